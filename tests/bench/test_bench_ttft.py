"""``draftscope bench ttft`` (issue 61, item 6) on SmolLM2 through real ``draftscope serve``
processes: while a question is typed our server has read all but its tail, and after a real restart
it restores the conversation from disk. llama-server is left out here (it is built only for
benchmarks; its figures are in docs/benchmarks.md), and so is the third case (tests/engine cover
conversations taking turns on one slot)."""

from __future__ import annotations

import json

import pytest

from draftscope.cli import main


@pytest.mark.network
def test_bench_ttft_reads_ahead_while_typed_and_restores_after_a_restart(tmp_path, capsys):
    out = tmp_path / "ttft.json"
    argv = ["bench", "ttft", "--model", "default", "--words", "120", "--cases", "typed,restart", "--servers", "ours"]
    argv += ["--typing", "0.3", "--max-new-tokens", "4", "--repeats", "1", "--json", str(out)]
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "| typed | ours |" in said and "| restart | ours |" in said
    rows = {(r["case"], r["server"]): r for r in json.loads(out.read_text())}
    typed = rows["typed", "ours"]
    assert typed["cached_tokens"] >= typed["prompt_tokens"] - 24, "read while typed: Send reads only the tail"
    restored = rows["restart", "ours"]
    assert restored["cached_tokens"] >= 0.8 * restored["prompt_tokens"], "restored from disk after the restart"
