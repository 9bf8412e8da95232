"""A crash mid-regenerate loses at most the new answer: a real process killed while it writes the
new version, and a history reopened between the regenerate's start and its new version, show the
old answer and every turn after it, and the next message follows that answer (real SQLite)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from draftscope.storage import HistoryStore

# A window's regenerate, in a process of its own: the session rewinds to the first answer and the
# engine starts the new one, says what the model reads, and never finishes (the test kills it).
CHILD = textwrap.dedent("""
    import sys, threading
    from types import SimpleNamespace
    from draftscope.core.session import ChatSession
    from draftscope.storage import HistoryStore, Settings

    class Engine:
        baseline_tokens_per_second = None

        def generate(self, request):
            print("reading", [m["content"] for m in request.messages], flush=True)
            yield SimpleNamespace(step=0)  # one step of the new answer, then it hangs mid-answer
            threading.Event().wait()

    runtime = SimpleNamespace(
        engine=Engine(), settings=Settings(max_new_tokens=512), make_drafters=lambda: [], learn=lambda *a: None, documents=None
    )
    session = ChatSession(runtime, history=HistoryStore(sys.argv[1]), conversation_id=int(sys.argv[2]))
    assert session.rewind(int(sys.argv[3]))
    for _ in session.stream(session.request()):
        pass
""")


def two_exchanges(path) -> tuple[HistoryStore, int, int]:
    """A conversation of two questions and their answers; (the store, its id, the first answer's id)."""
    store = HistoryStore(path)
    c = store.create_conversation("Colours")
    store.add_message(c, "user", "Name a colour")
    first = store.add_message(c, "assistant", "Teal.", stats={"tokens": 3, "tau": 1.5})
    store.add_message(c, "user", "Another?")
    store.add_message(c, "assistant", "Ochre.")
    return store, c, first


def contents(store: HistoryStore, c: int) -> list[str]:
    return [m.content for m in store.messages(c)]


def test_a_process_killed_mid_regenerate_reopens_on_the_old_answer_and_what_followed(tmp_path):
    path = tmp_path / "history.sqlite3"
    store, c, first = two_exchanges(path)
    store.close()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), str(c), str(first)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stdout.readline()
        assert line.startswith("reading"), f"the regenerate did not start: {line!r} {child.stderr.read()}"
        assert "'Teal.'" not in line, "the new answer reads the conversation up to the question only"
    finally:
        child.kill()  # SIGKILL: no cleanup, as a crash or the OS ending the app
        child.wait()
    reopened = HistoryStore(path)
    assert contents(reopened, c) == ["Name a colour", "Teal.", "Another?", "Ochre."]
    assert reopened.messages(c)[1].stats == {"tokens": 3, "tau": 1.5}
    reopened.add_message(c, "user", "And a third?")
    assert [m.role for m in reopened.messages(c)] == ["user", "assistant", "user", "assistant", "user"]


def test_the_file_shows_the_old_answer_until_the_new_version_is_written(tmp_path):
    path = tmp_path / "history.sqlite3"
    store, c, first = two_exchanges(path)
    store.hide_version(first)  # the regenerate under way: its own view ends at the question
    assert contents(store, c) == ["Name a colour"]
    between = HistoryStore(path)  # the app killed here and started again
    assert contents(between, c) == ["Name a colour", "Teal.", "Another?", "Ochre."]
    between.close()
    new = store.add_message(c, "assistant", "Crimson.")
    after = HistoryStore(path)
    assert contents(after, c) == ["Name a colour", "Crimson."]
    assert after.messages(c)[1].versions == (first, new), "the old answer kept as a version"
    after.show_version(first)
    assert contents(after, c) == ["Name a colour", "Teal.", "Another?", "Ochre."]


def test_a_file_left_with_no_current_version_shows_its_answer_again(tmp_path):
    """What an earlier Draftscope's regenerate left when it was killed: no version of the answer
    current. Reopened, the answer and the turns after it are back."""
    path = tmp_path / "history.sqlite3"
    store, c, first = two_exchanges(path)
    store._write("UPDATE messages SET current_version = 0 WHERE id = ?", (first,))
    store.close()
    reopened = HistoryStore(path)
    assert contents(reopened, c) == ["Name a colour", "Teal.", "Another?", "Ochre."]
