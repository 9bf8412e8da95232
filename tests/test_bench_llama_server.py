"""``bench spec``'s llama-server methods (llama.cpp's own speculation, the peer a CPU user has): on
the tiny GGUF, skipped in words where no llama-server is found; where one is (scripts/
build_llama_tools.sh), its plain and speculating answers are measured beside ours and its greedy
answer is llama.cpp's plain decoding."""

import json
from pathlib import Path

import pytest

from llama_helpers import need_llama_cpp

need_llama_cpp()

from draftscope.bench.llama_server import find_llama_server  # noqa: E402
from draftscope.cli import main  # noqa: E402
from engine_fixtures import tiny_llama  # noqa: E402
from gguf_fixtures import write_tiny_gguf  # noqa: E402

QUESTIONS = str(Path(__file__).parent / "data" / "spec_bench_sample.jsonl")


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    model = tiny_llama(len(tokenizer), seed=3, sharpen=4.0, max_positions=1024)  # room for the questions
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", model, tokenizer_dir)


def spec(gguf, methods, tmp_path):
    out = tmp_path / "spec.json"
    code = main(["bench", "spec", "--model", str(gguf), "--backend", "llama.cpp", "--questions", QUESTIONS,
                 "--per-category", "1", "--categories", "coding,qa", "--max-new-tokens", "24",
                 "--methods", methods, "--json", str(out)])
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
