"""``bench spec``'s llama-server methods (llama.cpp's own speculation, the peer a CPU user has): on
the tiny GGUF, skipped in words where no llama-server is found; where one is (scripts/
build_llama_tools.sh), its plain and speculating answers are measured beside ours and its greedy
answer is llama.cpp's plain decoding."""

import json
from pathlib import Path

import pytest
from llama_helpers import need_llama_cpp

need_llama_cpp()

from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf

from draftscope.bench.llama_server import find_llama_server
from draftscope.cli import main

QUESTIONS = str(Path(__file__).parents[1] / "data" / "spec_bench_sample.jsonl")


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    model = tiny_llama(len(tokenizer), seed=3, sharpen=4.0, max_positions=1024)  # room for the questions
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", model, tokenizer_dir)


def spec(gguf, methods, tmp_path):
    out = tmp_path / "spec.json"
    code = main(
        [
            "bench",
            "spec",
            "--model",
            str(gguf),
            "--backend",
            "llama.cpp",
            "--questions",
            QUESTIONS,
            "--per-category",
            "1",
            "--categories",
            "coding,qa",
            "--max-new-tokens",
            "24",
            "--methods",
            methods,
            "--json",
            str(out),
        ]
    )
    return code, (json.loads(out.read_text()) if out.is_file() else None)


def test_without_llama_server_its_methods_are_skipped_saying_why(gguf, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DRAFTSCOPE_LLAMA_SERVER", str(tmp_path / "no-such-llama-server"))
    code, result = spec(gguf, "llama,llama-server,llama-server-ngram-mod,plain", tmp_path)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "llama-server, llama-server-ngram-mod skipped: DRAFTSCOPE_LLAMA_SERVER=" in out and "is not a file" in out
    assert {r["method"] for r in result["rows"]} == {"llama", "plain"}


def test_llama_server_answers_beside_ours(gguf, tmp_path, capsys):
    binary, why = find_llama_server()
    if binary is None:
        pytest.skip(why)
    code, result = spec(gguf, "llama,llama-server,llama-server-ngram-simple,context", tmp_path)
    out = capsys.readouterr().out
    assert code == 0, out
    rows = result["rows"]
    for method in ("llama-server", "llama-server-ngram-simple"):
        mine = [r for r in rows if r["method"] == method]
        assert len(mine) == 2 and all(r["tokens"] > 0 and r["seconds"] > 0 for r in mine), mine
    # llama.cpp's plain decoding twice over (the server's loop and llama-cpp-python's): the same
    # tokens on this F32 model, as the near-ties of a quantised one are absent
    assert all(r["equal"] for r in rows if r["method"] == "llama-server"), out


def test_repeats_rotate_the_order_and_keep_the_median(gguf, tmp_path, capsys, monkeypatch):
    import draftscope.bench.spec as spec_mod

    calls = []
    repeated = spec_mod.repeated

    def watching(run_method, methods, repeats):
        def run(m):
            calls.append(m)
            return run_method(m)

        return repeated(run, methods, repeats)

    monkeypatch.setattr(spec_mod, "repeated", watching)
    out = tmp_path / "spec.json"
    code = main(
        [
            "bench",
            "spec",
            "--model",
            str(gguf),
            "--backend",
            "llama.cpp",
            "--questions",
            QUESTIONS,
            "--per-category",
            "1",
            "--categories",
            "coding",
            "--max-new-tokens",
            "16",
            "--methods",
            "llama,plain,context",
            "--repeats",
            "3",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    # three rounds, each starting one method later
    assert calls == ["llama", "plain", "context", "plain", "context", "llama", "context", "llama", "plain"], calls
    assert "speedup over plain" in text and "| context |" in text.split("speedup over plain")[1], text
    rows = json.loads(out.read_text())["rows"]
    assert {r["method"] for r in rows} == {"llama", "plain", "context"}
    # the longest accepted run, from our answers' steps: none drafted in plain, none known of llama's loop
    runs = {r["method"]: r["longest_run"] for r in rows}
    assert runs["plain"] == 0 and runs["llama"] is None and isinstance(runs["context"], int), runs


def test_the_median_of_the_rounds_is_kept():
    from draftscope.bench.spec import repeated
    from draftscope.bench.spec_methods import Run

    times = {"a": iter([3.0, 1.0, 2.0]), "b": iter([5.0, 9.0, 7.0])}
    out = repeated(lambda m: Run([1, 2], next(times[m]), first_s=0.5), ["a", "b"], 3)
    assert out["a"].seconds == 2.0 and out["b"].seconds == 7.0 and out["a"].tokens == [1, 2]


def test_first_token_and_writing_rate_are_reported_against_the_chosen_base(gguf, tmp_path, capsys):
    """Prompt reading apart from writing, as llama-server's timings split them: every method says
    when its first token was known, and the table gives both figures over --base."""
    binary, why = find_llama_server()
    if binary is None:
        pytest.skip(why)
    out = tmp_path / "spec.json"
    code = main(
        [
            "bench",
            "spec",
            "--model",
            str(gguf),
            "--backend",
            "llama.cpp",
            "--questions",
            QUESTIONS,
            "--per-category",
            "1",
            "--categories",
            "coding",
            "--max-new-tokens",
            "24",
            "--methods",
            "llama,llama-server,plain,context",
            "--base",
            "llama-server",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    result = json.loads(out.read_text())
    for r in result["rows"]:
        assert 0 < r["first_s"] < r["seconds"], r
        assert r["writing_s"] is None or abs(r["first_s"] + r["writing_s"] - r["seconds"]) < 1e-6, r
    overall = result["summary"]["overall"]
    assert overall["llama-server"]["writing_speedup"] == 1.0 and overall["llama-server"]["first_token_ratio"] == 1.0
    assert overall["plain"]["writing_per_s"] > 0 and overall["plain"]["first_token_s"] > 0
    assert "first token (s, mean) and writing rate (tokens/s after the first), each over llama-server" in text
    assert "verify curve (llama-bench" in text and "16:" in text, text


def test_the_grounded_questions_hold_the_text_they_are_answered_from():
    from draftscope.bench.spec import load_questions

    questions = load_questions("grounded", 3, set())
    assert {q["category"] for q in questions} == {
        "grounded-edit",
        "grounded-fix",
        "grounded-summary",
        "grounded-quote",
        "grounded-file",
    }
    assert len(questions) == 15
    edit = next(q for q in questions if q["question_id"] == "grounded-edit-1")["turns"][0]
    assert "def rgb_to_hsv(r, g, b):" in edit and "give back the whole function" in edit.lower()
    fix = next(q for q in questions if q["question_id"] == "grounded-fix-2")["turns"][0]
    assert "if not predicate(line)" in fix  # the bug the model is asked to find
