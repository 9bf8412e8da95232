"""How long the UI thread spends per streaming update of the chat view, in a long conversation
(offscreen Qt, no model: the chat transcript alone, every update rendered, only rendering timed).

    QT_QPA_PLATFORM=offscreen python scripts/bench_chat_render.py [exchanges ...]
"""

import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication

from draftscope.gui.chat import view as chat_view
from draftscope.gui.chat.view import ChatTranscript
from draftscope.storage import HistoryStore

chat_view.STREAM_RENDER_SHARE_WAIT = 0  # time every update's render (the app skips some in long answers)


class Conversation:  # what the transcript observes of a ChatSession
    def __init__(self, history) -> None:
        self.history, self.conversation_id = history, None


CODE = "```python\n" + "\n".join(f"def f{i}(x):\n    return x * {i}" for i in range(20)) + "\n```\n"


def run(exchanges: int, updates: int = 200) -> None:
    history = HistoryStore(Path(tempfile.mkdtemp()) / "h.sqlite3")
    conv = history.create_conversation("long")
    for i in range(exchanges):
        history.add_message(conv, "user", f"question {i}")
        history.add_message(conv, "assistant", f"answer {i}\n\n" + "words " * 80 + "\n\n" + CODE)
    session = Conversation(history)
    window = ChatTranscript(session)
    window.resize(860, 600)
    window.show()
    t = time.perf_counter()
    session.conversation_id = conv
    window.refresh()
    full_ms = (time.perf_counter() - t) * 1000
    window.begin_stream()
    times = []
    for k in range(updates):
        window.streaming_text += "token " + ("\n\n```python\nx = 1\n" if k == updates // 2 else "")
        t = time.perf_counter()
        window.render(stream_only=True)
        QApplication.processEvents()
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    print(
        f"{exchanges:4d} exchanges: open conversation {full_ms:6.1f} ms; streaming update median "
        f"{times[len(times) // 2]:.1f} ms, p99 {times[int(len(times) * 0.99)]:.1f} ms, max {times[-1]:.1f} ms"
    )
    window.close()


if __name__ == "__main__":
    app = QApplication([])
    for n in [int(a) for a in sys.argv[1:]] or [5, 60, 200]:
        run(n)
