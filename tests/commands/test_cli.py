"""The command line: index info, error exit codes, and the retriever benchmark on a small corpus."""

import json

import pytest

from draftscope.cli import main


def test_index_info_prints_the_header(build_index, capsys):
    r = build_index([[1, 2, 3], [4, 5]], vocab_size=300, tokenizer_fingerprint="fp")
    assert main(["index", "info", str(r.path), "--verify"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["documents"] == 2 and info["tokens"] == 5 and info["vocab_size"] == 300
    assert info["tokenizer_fingerprint"] == "fp" and info["checksum"] == "ok"


def test_bad_index_exits_2_with_a_message(tmp_path, capsys):
    assert main(["index", "info", str(tmp_path / "missing.idx")]) == 2
    assert "not found" in capsys.readouterr().err
    junk = tmp_path / "junk.idx"
    junk.write_text("hello")
    assert main(["index", "info", str(junk)]) == 2
    assert "not a Draftscope index" in capsys.readouterr().err


def test_bench_retriever_prints_every_figure(tmp_path, capsys):
    out = tmp_path / "figures.json"
    args = [
        "bench",
        "retriever",
        "--corpus",
        "synthetic",
        "--synthetic-tokens",
        "200000",
        "--contexts",
        "300",
        "--work-dir",
        str(tmp_path),
        "--json",
        str(out),
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    for label in ("build", "raw libsais", "peak memory", "on disk", "open", "search ", "search_batch"):
        assert label in text
    (fig,) = json.loads(out.read_text())
    assert fig["tokens"] == 200_000
    assert 5.5 < fig["bytes_per_token"] < 7, "u16 tokens + u32 suffixes + bitmap + document table"
    assert fig["hit_rate"] > 0.5
    assert fig["search_p99_us"] >= fig["search_p50_us"] > 0
    assert not list(tmp_path.glob("*.idx")), "benchmark cleans up its index"


def test_the_desktop_app_starts_and_stays_up(tmp_path, tokenizer_dir, tokenizer):
    """`draftscope gui --quit-after` as a user's launch would run it, on a tiny model folder: the
    window shows and the app is still running when the timer ends (a regression: closing the
    loading dialog used to quit the app right after the model loaded)."""
    import os
    import shutil
    import subprocess
    import sys

    from engine_fixtures import tiny_llama

    model_dir = tmp_path / "tiny-model"
    shutil.copytree(tokenizer_dir, model_dir)
    tiny_llama(len(tokenizer), seed=1).save_pretrained(model_dir)
    env = dict(
        os.environ,
        QT_QPA_PLATFORM="offscreen",
        DRAFTSCOPE_CONFIG_DIR=str(tmp_path / "config"),
        DRAFTSCOPE_DATA_DIR=str(tmp_path / "data"),
        DRAFTSCOPE_CACHE_DIR=str(tmp_path / "cache"),
    )
    run = subprocess.run(
        [sys.executable, "-m", "draftscope", "gui", "--model", str(model_dir), "--quit-after", "1500"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "main window shown (model tiny-model" in run.stdout
    assert "still running after 1500 ms" in run.stdout

    bad = subprocess.run(
        [sys.executable, "-m", "draftscope", "gui", "--model", str(tmp_path / "nope"), "--quit-after", "1500"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 1 and "could not be loaded" in bad.stderr and "nope" in bad.stderr


@pytest.mark.parametrize(
    "argv, words",
    [
        (["generate", "hi", "--device", "bogus"], "unknown device 'bogus'"),
        (["generate", "hi", "--dtype", "bogus"], "unknown dtype 'bogus'"),
        (["generate", "hi", "--max-new-tokens", "-5"], "--max-new-tokens: must be between 0"),  # 0: until it stops
        (["chat", "--min-p", "1.5"], "--min-p: must be between 0 and 1, got 1.5"),
        (["chat", "--repetition-window", "0"], "--repetition-window: must be between 1 and 1,048,576, got 0"),
        (["chat", "--top-k", "-1"], "--top-k: must be between 0"),
        (["drafter", "train", "--tokens", "0"], "--tokens: must be between 1"),
        (["datastore", "distill", "--out", "x.idx", "--batch-size", "ten"], "not a whole number: 'ten'"),
        (["bench", "spec", "--per-category", str(10**12)], "must be between 1 and 1,000,000,000"),
        (["models", "list", "--device", "gpu"], "unknown device 'gpu'"),
        (["generate", "hi", "--temperature", "nan"], "--temperature: must be between 0 and 5, got nan"),
        (["chat", "--top-p", "0"], "--top-p: must be in (0, 1], got 0"),
        (["serve", "--repetition-penalty", "x"], "--repetition-penalty: not a number: 'x'"),
        (["chat", "--context", "100"], "--context: must be 0 (the model's default) or between 256 and 1,048,576"),
    ],
)
def test_bad_arguments_are_usage_errors_before_anything_loads(argv, words, capsys):
    """One convention: a bad argument is argparse's usage error (exit 2), named, nothing loaded."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert words in capsys.readouterr().err


def test_every_benchmark_a_user_runs_is_a_bench_subcommand(capsys):
    """The user-facing benchmarks live under `draftscope bench` (maintainer measurements in scripts/)."""
    from draftscope.cli import build_parser

    parser = build_parser()
    bench = next(a for a in parser._subparsers._group_actions[0].choices["bench"]._actions if a.dest == "bench_command")
    assert set(bench.choices) == {
        *("retriever", "spec", "lossless", "gpu", "serve", "memory", "rpc", "project", "turns", "ttft", "structured")
    }
    with pytest.raises(SystemExit) as exc:
        main(["bench", "rpc", "--workers", "0"])
    assert exc.value.code == 2 and "--workers" in capsys.readouterr().err


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda tmp: tmp / "missing.idx", "no such file"),
        (lambda tmp: tmp, "a folder, not a datastore"),
        (lambda tmp: (tmp / "text.idx").write_text("not an index") and tmp / "text.idx", "not a readable datastore"),
    ],
)
def test_a_bad_datastore_is_named_before_the_model_loads(make, words, tmp_path, monkeypatch, capsys):
    import draftscope.core.runtime as runtime_module

    monkeypatch.setattr(runtime_module, "load_runtime", lambda *a, **k: pytest.fail("the model was loaded"))
    path = make(tmp_path)
    assert main(["generate", "hi", "--datastore", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"--datastore {path}: {words}" in err, err


def test_help_says_every_default_and_what_the_sampling_options_do(capsys):
    for argv, words in (
        (
            ["generate", "--help"],
            [
                "nucleus sampling",
                "K most likely tokens",
                "default: 0, until the model stops",
                "0 = greedy",
                "min-p",
                "--repetition-window TOKENS",
                "--no-model-sampling",
                "default: adaptive",
                "--threads",
                "--context TOKENS",
            ],
        ),
        (["serve", "--help"], ["(default: 8911)", "(default: 1;", "(default: 8)"]),
    ):
        with pytest.raises(SystemExit):
            main(argv)
        shown = " ".join(capsys.readouterr().out.split())
        for word in words:
            assert word in shown, (argv[0], word)


def test_kv_cache_mb_sets_the_room_for_caches_on_disk_and_0_keeps_none(tmp_path, monkeypatch):
    """serve, chat and generate take their settings from their options, not the settings file: the
    caches' budget is an option of its own (``--kv-cache-mb``; bench ttft's ours-no-disk is 0)."""
    import argparse

    from draftscope.commands.model_options import add_model_arguments, settings_from_args
    from draftscope.core.runtime import kv_store_for

    monkeypatch.setenv("DRAFTSCOPE_DATA_DIR", str(tmp_path))
    parser = argparse.ArgumentParser()
    add_model_arguments(parser)
    default = settings_from_args(parser.parse_args([]))
    assert default.kv_cache_budget_mb == 1024 and kv_store_for(default) is not None
    off = settings_from_args(parser.parse_args(["--kv-cache-mb", "0"]))
    assert off.kv_cache_budget_mb == 0 and kv_store_for(off) is None
    with pytest.raises(ValueError, match="kv_cache_budget_mb"):
        settings_from_args(parser.parse_args(["--kv-cache-mb", str(2 << 20)]))
