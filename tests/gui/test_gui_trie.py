"""The draft-tree view (offscreen Qt): real steps from a tiny engine drawn node for node, the
accepted path and the target's own token marked, step navigation, readability of big trees, and a
screenshot for the docs."""

import os
import random
import time
from dataclasses import replace
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
pytest.importorskip("PySide6")

from engine_fixtures import tiny_llama
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGraphicsPathItem, QLabel, QPushButton

from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.events import StepEvent, StepTree
from draftscope.gui.panels.drafts import visible_text
from draftscope.gui.panels.trie_view import FIT_MIN_SCALE, MIN_SCALE, ROOT, TARGET, NodeItem, TrieView, format_support

# ---------------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def live_steps(tokenizer):
    """StepEvents of a real answer: a tiny Llama drafting from a repetitive prompt."""
    model = tiny_llama(len(tokenizer), seed=3, layers=2, hidden=64, sharpen=4.0)
    engine = Engine(model, tokenizer, name="tiny")
    prompt = tokenizer.encode("one two three four one two three four one two three four")
    events = list(
        engine.generate(GenerationRequest(prompt_ids=prompt, max_new_tokens=60, budget=12, drafters=[ContextDrafter()]))
    )
    steps = [ev for ev in events if isinstance(ev, StepEvent)]
    assert any(ev.accepted for ev in steps), "the repetitive prompt gets drafts accepted"
    return steps


def make_view(qtbot, token_text, size=(900, 600)) -> TrieView:
    view = TrieView(token_text)
    qtbot.addWidget(view)
    view.resize(*size)
    view.show()
    qtbot.waitExposed(view)
    return view


def event_from(nodes, accepted_path, target_id, *, step=1, steps_total=None) -> StepEvent:
    """A StepEvent around a tree given as flat (token, parent, support, source) lists in BFS order."""
    tokens = [n[0] for n in nodes]
    parents = [n[1] for n in nodes]
    depth = []
    for p in parents:
        depth.append(1 if p < 0 else depth[p] + 1)
    emitted = [tokens[i] for i in accepted_path] + ([] if target_id is None else [target_id])
    provenance = [nodes[i][3] for i in accepted_path] + ([] if target_id is None else ["target"])
    tree = StepTree(tokens, parents, depth, [float(n[2]) for n in nodes], [n[3] for n in nodes])
    return StepEvent(
        step=step,
        token_ids=emitted,
        pieces=[f"<{t}>" for t in emitted],
        provenance=provenance,
        tree=tree,
        accepted_path=list(accepted_path),
        proposed=len(nodes),
        accepted=len(accepted_path),
        draft_ms=1.0,
        verify_ms=2.0,
        total_ms=3.0,
        tokens_total=len(emitted),
        steps_total=steps_total or step,
        tau=float(len(emitted)),
        tokens_per_second=10.0,
        speedup_estimate=None,
    )


def nested_event(spec, path_texts, target_text):
    """A StepEvent from a nested (text, support, source, children) spec with English token texts;
    returns it and the id -> text dict. The accepted path is given by its texts, root-down."""
    vocab: dict[int, str] = {}
    nodes, level = [], [(ROOT, child) for child in spec]
    while level:  # breadth first, as drafters order their trees
        next_level = []
        for parent, (text, support, source, *kids) in level:
            token = len(vocab) + 1
            vocab[token] = text
            nodes.append((token, parent, support, source))
            next_level.extend((len(nodes) - 1, kid) for kid in (kids[0] if kids else []))
        level = next_level
    path, parent = [], ROOT
    for text in path_texts:
        parent = next(i for i, n in enumerate(nodes) if n[1] == parent and vocab[n[0]] == text)
        path.append(parent)
    vocab[999] = target_text
    return event_from(nodes, path, 999), vocab


def random_tree(size: int, seed: int = 0):
    """``size`` nodes with a wide first level and thinning, deeper levels (as drafters produce)."""
    rng = random.Random(seed)
    nodes = [(1000 + i, ROOT, rng.randint(1, 40), "retrieval") for i in range(min(size, 12))]
    first = 0
    while len(nodes) < size:
        level_start = len(nodes)
        for parent in range(first, level_start):
            for _ in range(rng.choice((0, 1, 1, 2, 3))):
                if len(nodes) < size:
                    nodes.append(
                        (
                            1000 + len(nodes),
                            parent,
                            round(rng.random(), 2),
                            rng.choice(("retrieval", "context", "model", "recurrent")),
                        )
                    )
        if len(nodes) == level_start:  # every node drew no child: grow one anyway
            nodes.append((1000 + len(nodes), level_start - 1, 1, "context"))
        first = level_start
    path = [len(nodes) - 1]  # accepted: the branch to the deepest node, stopping one above it
    while nodes[path[0]][1] != ROOT:
        path.insert(0, nodes[path[0]][1])
    return event_from(nodes, path[:-1], 7)


def synthetic_text(token: int) -> str:
    return f" tok{token}"


def rect_of(item):
    return item.mapRectToScene(item.rect)


# ---------------------------------------------------------------------------------- tests


def test_real_steps_are_drawn_node_for_node(qtbot, tokenizer, live_steps):
    token_text = lambda token: tokenizer.decode([token])  # noqa: E731
    view = make_view(qtbot, token_text)
    assert view.objectName() == "trieView" and view.current_index() is None and view.follow_live()
    for start in range(0, len(live_steps), 5):  # the worker's batches
        view.add_steps(live_steps[start : start + 5])
        assert view.current_index() == min(start + 5, len(live_steps)) - 1, "following: the newest step is shown"
    assert view.follow_live()

    for index, ev in enumerate(live_steps):
        view.select_step(index)
        nodes = view.node_items()
        n = len(ev.tree.tokens)
        has_target = len(ev.token_ids) > len(ev.accepted_path)
        assert set(nodes) == set(range(n)) | {ROOT} | ({TARGET} if has_target else set())
        assert view.accepted_nodes() == ev.accepted_path
        assert view.stop_node() == (ev.accepted_path[-1] if ev.accepted_path else ROOT)
        for i in range(n):
            assert nodes[i].label == visible_text(token_text(ev.tree.tokens[i]))
            assert nodes[i].note == format_support(ev.tree.support[i])
            assert str(ev.tree.tokens[i]) in nodes[i].toolTip()
        if has_target:
            assert nodes[TARGET].label == visible_text(token_text(ev.token_ids[len(ev.accepted_path)]))
            assert nodes[TARGET].pen.style() == Qt.PenStyle.DashLine, "the target's token is drawn dashed"
            assert "target" in nodes[TARGET].toolTip()
        if index > 0:
            assert nodes[ROOT].label == visible_text(token_text(live_steps[index - 1].token_ids[-1]))

        # edges run from each parent's right side to its child's left side
        edges = [
            item
            for item in view.scene.items()
            if isinstance(item, QGraphicsPathItem) and not isinstance(item, NodeItem)
        ]
        assert len(edges) == len(nodes) - 1
        for edge in edges:
            parent, child = edge.data(0)
            p, c = rect_of(nodes[parent]), rect_of(nodes[child])
            assert c.left() > p.right(), "depth grows to the right"
            path = edge.path()
            assert path.pointAtPercent(0).x() == pytest.approx(p.right())
            assert path.pointAtPercent(1).x() == pytest.approx(c.left())
            assert p.top() <= path.pointAtPercent(0).y() <= p.bottom()
            assert c.top() <= path.pointAtPercent(1).y() <= c.bottom()

    # a step with an accepted path and rejected nodes: the two look different
    ev_index = next(
        i for i, ev in enumerate(live_steps) if ev.accepted_path and len(ev.tree.tokens) > len(ev.accepted_path)
    )
    ev = live_steps[ev_index]
    view.select_step(ev_index)
    nodes = view.node_items()
    rejected = [i for i in range(len(ev.tree.tokens)) if i not in ev.accepted_path]
    for a in ev.accepted_path:
        for r in rejected:
            assert nodes[a].opacity() > nodes[r].opacity()
            assert nodes[a].pen.widthF() > nodes[r].pen.widthF()
            assert nodes[a].pen.color() != nodes[r].pen.color()
            assert nodes[a].font.bold() and not nodes[r].font.bold()
    stop = nodes[ev.accepted_path[-1]]
    assert stop.pen.color() not in (nodes[a].pen.color() for a in ev.accepted_path[:-1])
    assert "stopped here" in stop.toolTip()


def test_navigation_follow_live_and_the_step_label(qtbot, tokenizer, live_steps):
    view = make_view(qtbot, lambda token: tokenizer.decode([token]))
    picked = []
    view.step_selected.connect(picked.append)
    prev, next_ = view.findChild(QPushButton, "prevStepButton"), view.findChild(QPushButton, "nextStepButton")
    follow, label = view.findChild(QPushButton, "followLiveButton"), view.findChild(QLabel, "stepLabel")
    assert view.findChild(QPushButton, "fitButton") is not None
    half = len(live_steps) // 2
    view.add_steps(live_steps[:half])
    last = live_steps[half - 1]
    assert label.text() == f"Step {last.step} of {half} · {last.proposed} drafted · {last.accepted} accepted"
    assert follow.isChecked() and not next_.isEnabled()

    qtbot.mouseClick(prev, Qt.MouseButton.LeftButton)
    assert picked == [half - 2] and view.current_index() == half - 2 and not view.follow_live()
    assert not follow.isChecked()
    assert label.text().startswith(f"Step {live_steps[half - 2].step} of {half} ·")
    qtbot.mouseClick(next_, Qt.MouseButton.LeftButton)
    assert picked == [half - 2, half - 1]

    view.select_step(2)  # another panel picked a step: no echo
    assert picked == [half - 2, half - 1] and view.current_index() == 2 and not view.follow_live()
    assert view.accepted_nodes() == live_steps[2].accepted_path

    view.add_steps(live_steps[half:])  # not following: the picked step stays on screen, the count grows
    assert view.current_index() == 2 and f"of {len(live_steps)}" in label.text()

    qtbot.mouseClick(follow, Qt.MouseButton.LeftButton)
    assert view.follow_live() and view.current_index() == len(live_steps) - 1
    assert view.accepted_nodes() == live_steps[-1].accepted_path
    assert picked == [half - 2, half - 1], "following live is no step pick"

    view.reset()
    assert view.current_index() is None and view.follow_live() and view.node_items() == {}
    assert not [item for item in view.scene.items()] and label.text() == "No steps yet"

    view.set_steps(live_steps[:5])  # a stored answer: its last step, not following
    assert view.current_index() == 4 and not view.follow_live()
    assert view.accepted_nodes() == live_steps[4].accepted_path
    view.add_steps(live_steps[5:6])
    assert view.current_index() == 4


def test_big_trees_stay_readable_and_fast(qtbot):
    view = make_view(qtbot, synthetic_text)
    ev = random_tree(100, seed=1)
    assert max(ev.tree.depth) >= 4 and sum(p == -1 for p in ev.tree.parents) >= 10
    view.set_steps([ev])
    nodes = view.node_items()
    assert len(nodes) == 100 + 2
    rects = sorted((rect_of(item) for item in nodes.values()), key=lambda r: (r.left(), r.top()))
    for i, a in enumerate(rects):
        for b in rects[i + 1 :]:
            assert not a.intersects(b), "no two nodes overlap"
    for item in nodes.values():
        assert item.label and not item.label.startswith("…"), "text never elided to nothing"
    # a parent sits midway between its first and last child
    for i in range(100):
        kids = [k for k, p in enumerate(ev.tree.parents) if p == i] + ([TARGET] if view.stop_node() == i else [])
        if kids:
            mid = (rect_of(nodes[kids[0]]).center().y() + rect_of(nodes[kids[-1]]).center().y()) / 2
            assert rect_of(nodes[i]).center().y() == pytest.approx(mid)

    fit = view.findChild(QPushButton, "fitButton")
    qtbot.mouseClick(fit, Qt.MouseButton.LeftButton)
    assert view.view.scale_factor() >= FIT_MIN_SCALE, "fit never shrinks text below a readable size"
    stop = view.view.mapFromScene(rect_of(view.node_items()[view.stop_node()]).center())
    assert view.view.viewport().rect().contains(stop), "the end of the accepted path is in view"
    assert view.view.verticalScrollBar().maximum() > 0, "too tall to fit at a readable scale: it scrolls"
    for _ in range(10):
        view.view.zoom(0.5)
    assert view.view.scale_factor() == pytest.approx(MIN_SCALE)

    long_text = {5000: "x" * 200}
    wide = make_view(qtbot, lambda t: long_text.get(t, " a"))
    wide.set_steps([event_from([(5000, ROOT, 3, "context")], [0], 6)])
    label = wide.node_items()[0].label
    assert 8 <= len(label) < 40 and label.endswith("…")
    for size in (64, 256):
        events = [random_tree(size, seed=s) for s in range(5)]
        view.set_steps(events)
        started = time.perf_counter()
        for i in range(5):
            view.select_step(i)
        ms = (time.perf_counter() - started) * 1000 / 5
        print(f"\nscene build for {size} nodes: {ms:.1f} ms")
        assert len(view.node_items()) == size + 2


def test_hidden_view_draws_when_shown_or_asked(qtbot, live_steps, tokenizer):
    view = TrieView(lambda token: tokenizer.decode([token]))
    qtbot.addWidget(view)
    view.add_steps(live_steps)
    assert not view.scene.items(), "nothing is drawn while the view is off screen"
    view.show()
    qtbot.waitExposed(view)
    assert view.scene.items() and view.accepted_nodes() == live_steps[-1].accepted_path


STORY = [  # the context ends "... the quick brown fox jumped over the"
    (
        " lazy",
        14,
        "retrieval",
        [
            (
                " dog",
                11,
                "retrieval",
                [
                    (" and", 5, "retrieval", [(" the", 2, "retrieval"), (" ran", 1, "retrieval")]),
                    (".", 4, "retrieval", [("\n", 2, "retrieval")]),
                    (",", 2, "retrieval", [(" who", 1, "retrieval")]),
                ],
            ),
            (" brown", 2, "retrieval", [(" dog", 2, "retrieval")]),
            (" cat", 1, "retrieval"),
        ],
    ),
    (
        " fence",
        6,
        "context",
        [
            (" and", 4, "context", [(" ran", 2, "context"), (" landed", 1, "context")]),
            (" into", 2, "context", [(" the", 2, "context")]),
        ],
    ),
    (" moon", 0.31, "model", [(" again", 0.58, "model", [(".", 0.71, "model")]), (",", 0.22, "model")]),
    (" wall", 2, "retrieval", [(" of", 1, "retrieval")]),
    (" edge", 0.12, "recurrent", [(" of", 0.64, "recurrent", [(" the", 0.9, "recurrent")])]),
    (" sleeping", 1, "context"),
]


@pytest.fixture
def themed_app(qapp):
    """Lets a test apply the app's themes; puts the shared QApplication's look back afterwards."""
    from PySide6.QtGui import QPalette

    style, sheet, palette, font = qapp.style().name(), qapp.styleSheet(), QPalette(qapp.palette()), qapp.font()
    prop = qapp.property("draftscopeTheme")
    yield qapp
    hints = qapp.styleHints()
    if hasattr(hints, "setColorScheme"):
        hints.setColorScheme(Qt.ColorScheme.Unknown)
    qapp.setStyle(style)
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)
    qapp.setFont(font)
    qapp.setProperty("draftscopeTheme", prop)


def test_screenshots_in_light_and_dark(qtbot, tmp_path, themed_app):
    from PySide6.QtGui import QPalette

    from draftscope.gui.theme import apply_theme

    # DRAFTSCOPE_SCREENSHOT_DIR=docs/screenshots refreshes the synthetic screenshots; a plain run
    # never writes into the working tree
    shots = Path(os.environ.get("DRAFTSCOPE_SCREENSHOT_DIR", tmp_path))
    apply_theme(themed_app, "light", 10)
    ev, vocab = nested_event(STORY, [" lazy", " dog", " and"], " barked")
    assert 20 <= len(ev.tree.tokens) <= 40
    view = make_view(qtbot, vocab.__getitem__)
    vocab[998] = " the"  # the token before the drafted one: the tree's root
    view.set_steps([event_from([], [], 998, step=i + 1) for i in range(6)] + [replace(ev, step=7)])
    view.add_steps([event_from([], [], 998, step=8 + i) for i in range(24)])
    assert view.accepted_nodes() == ev.accepted_path and view.node_items()[TARGET].label == "·barked"
    assert view.grab().save(str(shots / "trie-view-synthetic.png"))

    big = make_view(qtbot, synthetic_text)
    big.set_steps([random_tree(100, seed=1)])
    assert big.grab().save(str(shots / "trie-100.png"))

    apply_theme(themed_app, "dark", 10)  # a theme switch redraws the tree in the new palette
    qtbot.waitUntil(lambda: view.scene.backgroundBrush().color() == view.palette().color(QPalette.ColorRole.Base))
    assert view.palette().color(QPalette.ColorRole.Base).lightness() < 128
    assert view.accepted_nodes() == ev.accepted_path
    assert view.grab().save(str(shots / "trie-view-dark.png"))
