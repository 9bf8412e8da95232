"""The speedup panel: its chart and big number agree with the StepEvents they were fed."""

import os
import random
import time
from itertools import accumulate
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from engine_fixtures import tiny_llama
from PySide6.QtCharts import QChart
from PySide6.QtCore import QPointF
from PySide6.QtWidgets import QLabel

from draftscope.core.words import speedup_stale
from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.events import StepEvent, StepTree
from draftscope.gui.panels.speedup import SpeedupPanel, nice_ceiling
from draftscope.gui.theme import _palette


@pytest.fixture(scope="module")
def real_run(tokenizer):
    """StepEvents of a tiny Llama answering a repetitive prompt with context drafts, and its baseline."""
    model = tiny_llama(len(tokenizer), seed=3, layers=2, hidden=64, sharpen=4.0)
    engine = Engine(model, tokenizer, name="tiny")
    baseline = engine.measure_baseline(16)
    prompt = tokenizer("one two three one two three one two three one two three")["input_ids"]
    events = list(
        engine.generate(GenerationRequest(prompt_ids=prompt, max_new_tokens=60, drafters=[ContextDrafter()], budget=16))
    )
    steps = [ev for ev in events if isinstance(ev, StepEvent)]
    return steps, baseline


def expected_points(events, baseline):
    """The engine's clock and decode rate when the steps carry them (live answers); older stored
    steps: accumulated durations and speedup x baseline."""
    if all(ev.elapsed_ms is not None for ev in events):
        xs = [ev.elapsed_ms / 1000 for ev in events]
    else:
        xs = list(accumulate(ev.total_ms / 1000 for ev in events))
    rates = [
        ev.decode_tokens_per_second
        if ev.decode_tokens_per_second is not None
        else ev.speedup_estimate * baseline
        if ev.speedup_estimate is not None and baseline
        else ev.tokens_per_second
        for ev in events
    ]
    taus = [float(len(ev.token_ids)) for ev in events]
    return list(zip(xs, rates)), list(zip(xs, taus))


def synthetic_steps(n=80, baseline=20.0, seed=1, with_speedup=True, step_ms=65.0):
    """Plausible figures: ~65 ms steps (or ``step_ms``) whose τ (1-6 tokens) grows as the answer repeats itself."""
    rng = random.Random(seed)
    events, tokens, elapsed, first_tokens, decode_s = [], 0, 0.15, 0, 0.0  # 0.15 s of prompt processing
    for i in range(n):
        mean = 1.6 + 1.7 * i / (n - 1)
        k = max(1, min(6, round(rng.gauss(mean, 1.0))))
        ms = abs(rng.gauss(step_ms, step_ms / 10))
        tokens += k
        elapsed += ms / 1000
        if i == 0:
            first_tokens = tokens
        else:
            decode_s += ms / 1000
        decode = (tokens - first_tokens) / decode_s if i else None
        events.append(
            StepEvent(
                step=i + 1,
                token_ids=list(range(k)),
                pieces=["x"] * k,
                provenance=["context"] * (k - 1) + ["target"],
                tree=StepTree(),
                accepted_path=list(range(k - 1)),
                proposed=8,
                accepted=k - 1,
                draft_ms=2.0,
                verify_ms=ms - 2.0,
                total_ms=ms,
                tokens_total=tokens,
                steps_total=i + 1,
                tau=tokens / (i + 1),
                tokens_per_second=tokens / elapsed,
                speedup_estimate=decode / baseline if decode and with_speedup else None,
            )
        )
    return events


def assert_axes_hold(panel):
    points = panel.rate_points() + panel.baseline_points()
    assert panel.x_axis.max() == panel.tau_x_axis.max(), "both charts show the same time span"
    assert all(0 <= x <= panel.x_axis.max() for x, _ in points + panel.tau_points())
    assert all(panel.rate_axis.min() <= y <= panel.rate_axis.max() for _, y in points)
    assert all(panel.tau_axis.min() <= y <= panel.tau_axis.max() for _, y in panel.tau_points())


def test_chart_and_number_follow_real_steps(qtbot, real_run):
    steps, baseline = real_run
    assert baseline and len(steps) > 3 and any(ev.accepted for ev in steps), "context drafts were accepted"
    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.show()
    panel.reset(baseline)
    assert panel.rate_points() == [] and panel.speedup_text() == "—"
    for start in range(0, len(steps), 7):  # as the worker batches them
        panel.add_steps(steps[start : start + 7])
    rate, tau = expected_points(steps, baseline)
    assert panel.rate_points() == rate
    assert panel.tau_points() == tau
    last = steps[-1]
    plain = last.plain_tokens_per_second  # plain decoding at the answer's context, as the engine fitted it
    assert plain and panel.baseline_points() and {y for _, y in panel.baseline_points()} == {plain}
    assert panel.baseline_points()[0][0] == 0 and panel.baseline_points()[-1][0] >= rate[-1][0]
    # past τ times plain the baseline was measured on a busier machine: the label says "at most τ"
    said = f"≤{last.tau:.2f}×" if speedup_stale(last.speedup_estimate, last.tau) else f"{last.speedup_estimate:.2f}×"
    label = panel.findChild(QLabel, "speedupLabel")
    assert label.text() == panel.speedup_text() == said
    caption = panel.findChild(QLabel, "speedupCaption").text()
    assert f"vs {plain:.1f} tokens/s plain" in caption and f"τ {last.tau:.2f}" in caption
    assert_axes_hold(panel)
    legend = panel.findChild(QLabel, "speedupLegend").text()
    assert all(name in legend for name in ("tokens/s (this answer)", "plain decoding (at this length)", "τ so far"))

    # a stored answer redraws the same points
    panel.reset(baseline / 2)
    assert panel.rate_points() == [] and panel.tau_points() == [] and panel.speedup_text() == "—"
    assert {y for _, y in panel.baseline_points()} == {baseline / 2}
    panel.set_steps(steps, baseline)
    assert panel.rate_points() == rate and panel.tau_points() == tau
    assert panel.speedup_text() == said
    assert_axes_hold(panel)

    # selecting a step marks its x and rate, without echoing the pick back
    with qtbot.assertNotEmitted(panel.step_selected):
        panel.select_step(2)
    assert panel.selected_point() == rate[2]
    assert {p.x() for p in panel.marker_line.points()} == {rate[2][0]}
    panel.select_step(None)
    assert panel.selected_point() is None and panel.marker_line.points() == []


def test_without_a_baseline_the_number_is_unknown_until_one_is_measured(qtbot):
    events = synthetic_steps(30, with_speedup=False)  # what an engine that never measured plain decoding sends
    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.reset(None)
    panel.add_steps(events)
    assert panel.speedup_text() == "—" and panel.baseline_points() == []
    assert [y for _, y in panel.rate_points()] == pytest.approx([ev.tokens_per_second for ev in events])
    assert "not measured" in panel.caption.text()
    # measured afterwards: the decode rate (first step excluded) over the new figure
    panel.set_baseline(20.0)
    decode = (events[-1].tokens_total - events[0].tokens_total) / (sum(ev.total_ms for ev in events[1:]) / 1000)
    assert panel.speedup_text() == f"{decode / 20.0:.2f}×"
    assert {y for _, y in panel.baseline_points()} == {20.0}
    assert_axes_hold(panel)


def test_a_remeasured_baseline_moves_the_line_and_keeps_the_measured_rates(qtbot):
    events = synthetic_steps(40, baseline=20.0)
    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.reset(20.0)
    panel.add_steps(events)
    before = panel.rate_points()
    assert panel.speedup_text() == f"{events[-1].speedup_estimate:.2f}×"
    panel.set_baseline(25.0)
    assert panel.rate_points() == before
    assert {y for _, y in panel.baseline_points()} == {25.0}
    assert panel.speedup_text() == f"{before[-1][1] / 25.0:.2f}×"
    panel.set_baseline(None)
    assert panel.speedup_text() == "—" and panel.baseline_points() == []


def test_clicking_the_chart_picks_the_nearest_step(qtbot):
    events = synthetic_steps(20)
    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.set_steps(events, 20.0)
    x5 = panel.rate_points()[5][0]
    with qtbot.waitSignal(panel.step_selected, timeout=1000) as picked:
        panel.rate_series.clicked.emit(QPointF(x5 + 0.001, 30.0))
    assert picked.args == [5] and panel.selected_point()[0] == x5


def test_axes_grow_in_round_steps_and_add_steps_is_cheap(qtbot):
    assert [nice_ceiling(v) for v in (0.3, 1, 1.01, 3, 7, 42, 120)] == [0.3, 1, 1.5, 3, 8, 50, 150]
    events = synthetic_steps(1000, seed=2)
    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.resize(700, 450)
    panel.show()
    panel.reset(20.0)
    ranges = set()
    started = time.perf_counter()
    for start in range(0, len(events), 3):  # ~30 batches/s of a fast answer
        panel.add_steps(events[start : start + 3])
        ranges.add((panel.x_axis.max(), panel.rate_axis.max(), panel.tau_axis.max()))
    elapsed = time.perf_counter() - started
    print(f"\nadd_steps: 1000 steps in {len(range(0, 1000, 3))} batches took {elapsed * 1000:.0f} ms")
    qtbot.wait(10)  # one paint with all the points
    assert len(panel.rate_points()) == 1000
    assert len(ranges) < 40, "axes change now and then, not every batch"
    assert_axes_hold(panel)


def test_a_fast_answer_never_lays_out_thousands_of_tick_labels(qtbot):
    """A tiny model streams thousands of tokens/s against a 10 tokens/s baseline line: the rate
    axis jumps from 10 to thousands in one batch. Qt lays out a label for every tick the moment a
    range or a spacing changes, so at no moment may the range hold more than a screenful of ticks
    (a range grown under the old spacing of 2 made 2,500 labels and held the window ~200 ms)."""
    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.resize(700, 450)
    panel.show()
    counts = []
    for axis in (panel.x_axis, panel.tau_x_axis, panel.rate_axis, panel.tau_axis):

        def count(*_, axis=axis):
            counts.append((axis.max() - axis.min()) / axis.tickInterval() if axis.tickInterval() > 0 else 0)

        axis.rangeChanged.connect(count)
        axis.tickIntervalChanged.connect(count)
    for answer in range(2):  # the second answer starts from the first one's wide axes
        panel.reset(10.0)
        events = synthetic_steps(300, baseline=10.0, seed=answer, step_ms=0.4)
        for start in range(0, len(events), 3):
            panel.add_steps(events[start : start + 3])
        assert panel.rate_axis.max() > 1000, "the answer ran at thousands of tokens/s"
        assert_axes_hold(panel)
    panel.resize(1400, 900)  # more room, more ticks
    qtbot.wait(10)
    assert counts and max(counts) <= 12, f"{max(counts):.0f} ticks at once"


def test_follows_light_and_dark_palettes_and_saves_screenshots(qtbot, tmp_path):
    # DRAFTSCOPE_SCREENSHOT_DIR=docs/screenshots refreshes the synthetic screenshot; a plain run
    # never writes into the working tree
    shots = Path(os.environ.get("DRAFTSCOPE_SCREENSHOT_DIR", tmp_path))
    events = synthetic_steps(80)
    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.setPalette(_palette("light"))
    panel.resize(700, 450)
    panel.show()
    panel.set_steps(events, 20.0)
    panel.select_step(55)
    qtbot.wait(50)
    assert panel.chart.theme() == QChart.ChartTheme.ChartThemeLight
    assert panel.grab().save(str(shots / "speedup-panel.png"))
    panel.setPalette(_palette("dark"))
    qtbot.wait(50)
    assert panel.chart.theme() == QChart.ChartTheme.ChartThemeDark
    assert panel.chart.backgroundBrush().color() == _palette("dark").window().color()
    assert panel.grab().save(str(tmp_path / "speedup-dark.png"))
    # the data survives the theme switch
    assert len(panel.rate_points()) == 80 and panel.selected_point() is not None


def drawn_labels(chart) -> list[str]:
    """The texts Qt Charts draws in ``chart`` (axis labels and titles), as laid out now."""
    import shiboken6
    from PySide6.QtWidgets import QGraphicsTextItem

    return [
        shiboken6.wrapInstance(shiboken6.getCppPointer(item.toGraphicsObject())[0], QGraphicsTextItem).toPlainText()
        for item in chart.scene().items()
        if item.type() == 8 and item.isVisible()
    ]  # 8: QGraphicsTextItem::Type


def test_the_time_axis_labels_are_readable_at_the_apps_font(qtbot):
    """In the dock's height at the app's own font, the time axis shows its numbers, not "..." (Qt
    Charts elides labels it has no room for: a title beside them took it)."""
    from PySide6.QtWidgets import QApplication

    from draftscope.gui.theme import apply_theme
    from draftscope.storage import Settings

    apply_theme(QApplication.instance(), "light", Settings().font_size)
    panel = SpeedupPanel()
    qtbot.addWidget(panel)
    panel.resize(450, 400)
    panel.show()
    panel.reset(None)
    panel.add_steps(synthetic_steps(50, step_ms=8.0))
    qtbot.wait(50)
    labels = drawn_labels(panel.tau_chart)
    assert "..." not in labels and {"0.2", "0.4"} <= set(labels), labels


def test_an_answer_with_no_accepted_draft_says_so_and_never_a_speedup():
    """τ 1.00 answers said "1.99x plain" (a plain figure from a busier moment) or "1.05x plain" (timing
    noise): every token was the model's own, so the line says "no drafts used", whatever the timing.
    With drafts accepted, a figure past τ times plain is shown as at most τ, and said to be old."""
    from draftscope.core.words import answer_stats, speedup_stale

    stats = {
        "tokens": 64,
        "tau": 1.0,
        "tokens_per_second": 20.0,
        "time_to_first_token_ms": 300.0,
        "speedup_estimate": 1.99,
    }
    for speedup in (1.99, 1.05, 0.64):
        line = answer_stats({**stats, "speedup_estimate": speedup})
        assert "no drafts used" in line and f"{speedup:.2f}x" not in line, line
    assert "1.41x plain" in answer_stats({**stats, "tau": 2.1, "speedup_estimate": 1.41})
    assert "≤2.10x plain (the plain figure is out of date)" in answer_stats(
        {**stats, "tau": 2.1, "speedup_estimate": 2.5}
    )
    assert speedup_stale(1.2, 1.0) and not speedup_stale(0.9, 1.0) and not speedup_stale(None, 1.0)
