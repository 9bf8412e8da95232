"""An imported answer whose plain rate is not a number opens in the inspection panels without a
crash (the speedup panel scales its axis by 1.2 x that rate)."""

from __future__ import annotations

import json

from draftscope.gui.panels.drafts import DraftsPanel
from draftscope.gui.panels.inspection import InspectionController
from draftscope.gui.panels.speedup import SpeedupPanel
from draftscope.gui.panels.trie_view import TrieView
from draftscope.storage import HistoryStore
from draftscope.storage.transfer import import_file


def test_an_imported_answer_with_a_damaged_plain_rate_opens(qtbot, tmp_path):
    answer = {"role": "assistant", "content": "Teal.", "stats": {"tokens": 2, "plain_tokens_per_second": "x"}}
    conv = {"title": "Colours", "messages": [{"role": "user", "content": "Pick a colour"}, answer]}
    file = tmp_path / "in.json"
    file.write_text(json.dumps({"format": "draftscope-conversations", "version": 1, "conversations": [conv]}))
    store = HistoryStore(tmp_path / "h.sqlite3")
    import_file(store, file)
    panels = DraftsPanel(), TrieView(str), SpeedupPanel()
    for panel in panels:
        qtbot.addWidget(panel)
    inspection = InspectionController(*panels)
    inspection.show_latest(store, store.conversations()[0].id, 25.0)
    assert panels[2].baseline == 25.0  # the measured rate, the damaged one left out
