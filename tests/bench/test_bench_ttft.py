"""``draftscope bench ttft`` (issue 61, item 6) on SmolLM2 through real ``draftscope serve``
process: while a question is typed our server has read all but its tail. llama-server is left out
here (it is built only for benchmarks; its figures are in docs/benchmarks.md), and so are the other
cases (a restart's restore is tests/commands/test_serve_restart.py's, conversations taking turns on
one slot tests/engine's)."""

from __future__ import annotations

import json

import pytest

from draftscope.cli import main


@pytest.mark.network
def test_bench_ttft_reads_ahead_while_typed(tmp_path, capsys):
    """The typed case end to end (the restart case's restore is tests/commands/test_serve_restart.py's,
    kept out of here for the suite's time: it starts the server twice more)."""
    out = tmp_path / "ttft.json"
    argv = ["bench", "ttft", "--model", "default", "--words", "120", "--cases", "typed", "--servers", "ours"]
    # 17 words at 0.6 s: ten seconds to read the document ahead, room for a busy machine (at 0.3 s one that
    # was building llama.cpp beside the suite sent before the first read ahead had ended)
    argv += ["--typing", "0.6", "--max-new-tokens", "4", "--repeats", "1", "--json", str(out)]
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "| typed | ours |" in said
    rows = {(r["case"], r["server"]): r for r in json.loads(out.read_text())}
    typed = rows["typed", "ours"]
    assert typed["cached_tokens"] >= typed["prompt_tokens"] - 24, "read while typed: Send reads only the tail"
