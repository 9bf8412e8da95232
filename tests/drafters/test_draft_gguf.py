"""A GGUF draft model beside a GGUF model on llama.cpp, opened as every face opens it: through
``load_runtime`` (the window's launcher, ``draftscope generate`` and ``draftscope serve``), its
drafter made by ``make_drafters()``, and an answer that is plain decoding's with drafts accepted.
(This path crashed at load: the runtime read a torch model's generation config off the draft model.)

The draft model here is the model itself written to a second file, so its drafts are what the
model would write: an answer that accepted none would prove nothing."""

from __future__ import annotations

import re

import pytest
from llama_helpers import assert_plain_or_near_tie, need_llama_cpp

need_llama_cpp()

from engine_fixtures import pin_budget, tiny_llama
from gguf_fixtures import write_tiny_gguf

from draftscope.core.runtime import load_runtime
from draftscope.drafters.model_drafter import ModelDrafter
from draftscope.engine.engine import GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.storage import Settings

ONLY_MODEL = {"retrieval": False, "learned": False, "context": False, "model": True, "recurrent": False}
PROMPT = "The quick brown fox jumps over"


@pytest.fixture(scope="module")
def files(tokenizer, tokenizer_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("draft-gguf")
    model = tiny_llama(len(tokenizer), seed=3, sharpen=4.0)
    return (
        write_tiny_gguf(folder / "tiny-F32.gguf", model, tokenizer_dir),
        write_tiny_gguf(folder / "tiny-draft-F32.gguf", model, tokenizer_dir, name="tiny-draft"),
    )


def settings_for(files, **fields) -> Settings:
    target, draft = files
    return Settings(
        **{
            "model": str(target),
            "draft_model": str(draft),
            "backend": "llama.cpp",
            "drafters": dict(ONLY_MODEL),
            "datastore": "",
            "max_new_tokens": 32,
            **fields,
        }
    )


@pytest.mark.parametrize(
    "params", [SamplingParams(), SamplingParams(temperature=0.9, top_p=0.95, seed=21)], ids=["greedy", "T0.9"]
)
def test_the_runtime_opens_a_gguf_draft_model_and_answers_with_it(files, tokenizer, params):
    runtime = load_runtime(settings_for(files), strict=True)
    try:
        assert runtime.engine.backend.kind == "llama.cpp" and runtime.draft_model.kind == "llama.cpp"
        assert runtime.notices == [] and runtime.drafter_setup.names == ["model"]
        drafters = runtime.make_drafters()
        assert [type(d) for d in drafters] == [ModelDrafter]
        ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
        engine = runtime.engine
        plain = list(engine.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=32, sampling=params)))[-1]
        drafted = list(
            engine.generate(
                GenerationRequest(prompt_ids=ids, max_new_tokens=32, sampling=params, drafters=drafters, budget=6)
            )
        )[-1]
        assert drafted.error is None and drafted.stats.accepted_by_source.get("model", 0) > 0, drafted.stats
        assert_plain_or_near_tie(engine, ids, plain.token_ids, drafted.token_ids, params)
    finally:
        runtime.close()


def test_the_terminal_drafts_with_a_gguf_draft_model(files, capsys):
    from draftscope.cli import main

    target, draft = files
    assert (
        main(
            [
                "generate",
                PROMPT,
                "--model",
                str(target),
                "--draft-model",
                str(draft),
                "--drafters",
                "model",
                "--backend",
                "llama.cpp",
                "--max-new-tokens",
                "24",
                "--budget",
                "6",
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "drafters: model" in captured.err and captured.out.strip()
    tau = float(re.search(r"tau ([0-9.]+)", captured.err).group(1))
    assert tau > 1.5, captured.err  # the draft model's drafts were accepted


def test_the_server_drafts_with_a_gguf_draft_model(files):
    """``draftscope serve --draft-model …``'s runtime, served through the official client."""
    import openai

    from draftscope.cli import build_parser
    from draftscope.commands.model_options import runtime_from_args
    from draftscope.server import ServerConfig, ServerThread, create_app

    target, draft = files
    args = build_parser().parse_args(
        [
            "serve",
            "--model",
            str(target),
            "--draft-model",
            str(draft),
            "--drafters",
            "model",
            "--backend",
            "llama.cpp",
            "--max-new-tokens",
            "24",
        ]
    )
    runtime = runtime_from_args(args)
    # as cmd_serve builds it; a fixed budget: the adaptive policy may rightly not draft for a tiny model
    server = ServerThread(create_app(runtime, history=None, config=ServerConfig(budget=6)), port=0).start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="unused")
        reply = client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=24
        )
        stats = reply.model_extra["draftscope"]
        assert reply.choices[0].message.content and stats["accepted_by_source"].get("model", 0) > 0, stats
    finally:
        server.stop()
        runtime.close()


def test_the_window_opens_with_a_gguf_draft_model_and_drafts_with_it(qtbot, files, tmp_path):
    """The launcher loads the runtime as the app does (load_runtime); the window answers with
    the draft model's drafts accepted and says nothing went wrong."""
    pytest.importorskip("PySide6")
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QPlainTextEdit, QPushButton

    from draftscope.gui.launcher import Launcher
    from draftscope.storage import HistoryStore

    launcher = Launcher(load_runtime, HistoryStore(tmp_path / "h.sqlite3"), settings_for(files, max_new_tokens=24))
    with qtbot.waitSignal(launcher.window_ready, timeout=60_000) as ready:
        launcher.start()
    window = ready.args[0]
    qtbot.addWidget(window)
    assert "could not" not in window.statusBar().currentMessage()
    assert window.runtime.drafter_setup.names == ["model"]
    pin_budget(window.runtime.engine, nodes=6)  # the adaptive policy may rightly not draft for a tiny model
    window.findChild(QPlainTextEdit, "chatInput").setPlainText(PROMPT)
    with qtbot.waitSignal(window.answer_signals.answer_ended, timeout=60_000) as done:
        qtbot.mouseClick(window.findChild(QPushButton, "sendButton"), Qt.MouseButton.LeftButton)
    final = done.args[0]
    assert final.error is None and final.stats.accepted_by_source.get("model", 0) > 0, final.stats
    window.close()
    launcher.server.stop()


def test_a_draft_ends_at_the_draft_models_own_end_token(files, tokenizer):
    """The model drafter stops drafting where its draft model would end the answer (llama.cpp's
    end-of-generation tokens for a GGUF draft model): drafting past it is wasted verify work."""
    runtime = load_runtime(settings_for(files), strict=True)
    try:
        ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
        [drafter] = runtime.make_drafters()
        free = drafter.propose(ids, 6)
        assert len(free) == 6
        runtime.draft_model.eos_ids.add(int(free.tokens[2]))  # as if the third draft token ended answers
        [drafter] = runtime.make_drafters()
        assert drafter.propose(ids, 6).tokens.tolist() == free.tokens[:3].tolist()
    finally:
        runtime.close()
