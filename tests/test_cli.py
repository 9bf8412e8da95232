"""The command line: index info, error exit codes, and the retriever benchmark on a small corpus."""

import json

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
    args = ["bench", "retriever", "--corpus", "synthetic", "--synthetic-tokens", "200000", "--contexts", "300",
            "--work-dir", str(tmp_path), "--json", str(out)]
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
