"""Sampling that does not loop by default: fresh settings sample (temperature, top-k, top-p, min-p,
a light penalty over the last 64 tokens, no length limit but the context), and the model's own
recommendation (a GGUF's general.sampling.* metadata, a generation_config.json) takes the place of
what it sets while the setting is on; damaged or out-of-range values are ignored with a log line."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
from sampling_fixtures import write_gguf

from draftscope.core.sampling_defaults import described, effective_sampling, sampling_from
from draftscope.core.session import ChatSession
from draftscope.models.recommended_sampling import (
    ModelSampling,
    read_gguf_metadata,
    recommended_for,
    recommended_sampling,
)
from draftscope.models.resolve import ModelSource
from draftscope.rules import RANGES, REPETITION_WINDOW
from draftscope.storage import Settings


def gguf_source(path) -> ModelSource:
    return ModelSource("gguf", str(path), path.stem)


QWEN_LIKE = {"temp": 0.7, "top_k": 20, "top_p": 0.8, "min_p": 0.0, "penalty_repeat": 1.05, "penalty_last_n": 128}


def test_fresh_settings_sample_and_run_until_the_model_stops():
    s = Settings()
    params = sampling_from(s)
    assert not params.greedy and params.temperature == pytest.approx(0.8)
    assert (params.top_k, params.top_p, params.min_p) == (40, pytest.approx(0.95), pytest.approx(0.05))
    assert params.repetition_penalty == pytest.approx(1.1) and params.repetition_window == REPETITION_WINDOW == 64
    assert s.max_new_tokens == 0 and s.model_sampling and not s.problems()


def test_the_length_limit_0_is_the_context_for_an_answer_and_a_read_ahead_only_when_asked():
    engine = SimpleNamespace(max_context=4096, baseline_tokens_per_second=None)
    runtime = SimpleNamespace(engine=engine, settings=Settings(), make_drafters=lambda: [], documents=None)
    session = ChatSession(runtime)
    assert session.request(messages=[{"role": "user", "content": "hi"}]).max_new_tokens == 4096
    assert session.request(messages=[], max_new_tokens=0).max_new_tokens == 0  # the server's read ahead
    runtime.settings = Settings(max_new_tokens=300)
    assert session.request(messages=[]).max_new_tokens == 300


def test_a_ggufs_recommended_sampling_replaces_the_settings_values(tmp_path):
    path = write_gguf(tmp_path / "qwen-like.gguf", **QWEN_LIKE)
    model = recommended_sampling(gguf_source(path))
    assert model.values == pytest.approx(
        {
            "temperature": 0.7,
            "top_k": 20,
            "top_p": 0.8,
            "min_p": 0.0,
            "repetition_penalty": 1.05,
            "repetition_window": 128,
        }
    )
    settings = Settings(model=str(path))
    assert recommended_for(settings.model) == model  # the dialog's look-up finds the same
    params = sampling_from(settings, model, seed=3)
    assert (params.temperature, params.top_k, params.top_p, params.repetition_window) == pytest.approx(
        (0.7, 20, 0.8, 128)
    )
    assert params.seed == 3
    assert "temperature 0.7" in described(effective_sampling(settings, model))
    own = sampling_from(Settings(model=str(path), model_sampling=False), model)
    assert (own.temperature, own.top_k, own.repetition_window) == pytest.approx((0.8, 40, 64)), "switched off"
    served = sampling_from(settings, model, temperature=0.2, min_p=0.3)
    assert (served.temperature, served.min_p, served.top_k) == pytest.approx((0.2, 0.3, 20)), "a request's own win"


def test_what_the_model_leaves_unset_stays_the_settings(tmp_path):
    model = recommended_sampling(gguf_source(write_gguf(tmp_path / "m.gguf", temp=0.6)))
    defaults = effective_sampling(Settings(), model)
    assert defaults.from_model == {"temperature"}
    assert defaults.values["temperature"] == pytest.approx(0.6) and defaults.values["min_p"] == pytest.approx(0.05)
    assert recommended_sampling(gguf_source(write_gguf(tmp_path / "none.gguf"))) is None


def test_damaged_and_out_of_range_values_are_ignored_with_a_log_line(tmp_path, caplog):
    path = write_gguf(tmp_path / "bad.gguf", temp=9.0, top_p="high", min_p=float("nan"), top_k=-3, penalty_repeat=1.2)
    with caplog.at_level(logging.INFO):
        model = recommended_sampling(gguf_source(path))
    assert model.values == pytest.approx({"repetition_penalty": 1.2})
    logged = caplog.text
    for key in ("temperature", "top_p", "min_p", "top_k"):
        assert f"recommended {key} ignored" in logged or f"general.sampling.{key}" in logged, (key, logged)
    assert sampling_from(Settings(), model).temperature == pytest.approx(0.8)


def test_llama_cpps_penalty_windows_minus_one_and_zero(tmp_path):
    whole = recommended_sampling(gguf_source(write_gguf(tmp_path / "a.gguf", penalty_last_n=-1, penalty_repeat=1.1)))
    assert whole.values["repetition_window"] == RANGES["repetition_window"].high  # the whole context
    off = recommended_sampling(gguf_source(write_gguf(tmp_path / "b.gguf", penalty_last_n=0, penalty_repeat=1.3)))
    assert off.values == {"repetition_penalty": 1.0}  # llama.cpp: no penalty at all


def test_a_cut_or_foreign_file_recommends_nothing_and_never_raises(tmp_path, caplog):
    path = write_gguf(tmp_path / "whole.gguf", **QWEN_LIKE)
    data = path.read_bytes()
    for name, body in (("cut.gguf", data[:200]), ("foreign.gguf", b"GGML" + data[4:]), ("empty.gguf", b"")):
        (tmp_path / name).write_bytes(body)
        assert recommended_sampling(gguf_source(tmp_path / name)) is None, name
    assert recommended_for(str(tmp_path / "missing.gguf")) is None
    with pytest.raises(ValueError, match="cut.gguf is not a readable GGUF"):
        read_gguf_metadata(tmp_path / "cut.gguf", {"general.sampling.temp"})


def folder_with(tmp_path, config) -> ModelSource:
    folder = tmp_path / "hf-model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text("{}")
    (folder / "generation_config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    return ModelSource("folder", str(folder), folder.name)


def test_a_generation_config_recommends_and_do_sample_false_with_a_temperature_means_greedy(tmp_path, caplog):
    qwen = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}
    model = recommended_sampling(folder_with(tmp_path, qwen))
    assert (
        model.values == pytest.approx({"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05})
        and model.origin == "generation_config.json"
    )
    greedy = recommended_sampling(folder_with(tmp_path, {"do_sample": False, "temperature": 0.6}))
    assert greedy.values == {"temperature": 0.0}
    assert sampling_from(Settings(), greedy).greedy
    written = {"do_sample": False, "top_p": 0.9, "eos_token_id": 2}  # transformers writes do_sample by default
    assert recommended_sampling(folder_with(tmp_path, written)).values == {"top_p": 0.9}
    assert not sampling_from(Settings(), recommended_sampling(folder_with(tmp_path, written))).greedy
    assert recommended_sampling(folder_with(tmp_path, {"do_sample": False})) is None
    assert recommended_sampling(folder_with(tmp_path, {"eos_token_id": 2})) is None
    with caplog.at_level(logging.WARNING):
        assert recommended_sampling(folder_with(tmp_path, "{not json")) is None
    assert "not JSON" in caplog.text


def test_what_the_command_line_sets_wins_over_the_model():
    model = ModelSampling({"temperature": 0.7, "top_k": 20}, "the GGUF's metadata")
    assert model.without({"temperature": 1.2}).values == {"top_k": 20}
