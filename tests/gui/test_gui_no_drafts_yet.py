"""The speedup panel says "no drafts used" once a live answer has run a few plain steps, never at its
first step, where every answer's τ is 1.00."""

from __future__ import annotations

from draftscope.engine.events import StepEvent, StepTree
from draftscope.gui.panels.speedup import UNKNOWN, SpeedupPanel


def plain_step(i: int) -> StepEvent:
    return StepEvent(
        step=i, token_ids=[i], pieces=["x"], provenance=["target"], tree=StepTree(), accepted_path=[],
        proposed=0, accepted=0, draft_ms=0.0, verify_ms=30.0, total_ms=30.0, tokens_total=i, steps_total=i,
        tau=1.0, tokens_per_second=30.0, speedup_estimate=1.0, elapsed_ms=30.0 * i,
        decode_tokens_per_second=33.0 if i > 1 else None, plain_tokens_per_second=33.0,
    )  # fmt: skip


def test_no_drafts_used_is_said_after_a_few_steps_not_at_the_first(qtbot):
    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.reset(33.0)
    panel.add_steps([plain_step(1)])
    assert panel.speedup_label.text() == UNKNOWN
    panel.add_steps([plain_step(i) for i in range(2, 6)])
    assert panel.speedup_label.text() == "no drafts used"
