"""``bench spec``'s report for the grounded prompts, rendered from recorded run results (no model):
prompt by prompt (writing rate, τ, the longest accepted run, the whole files' share of the batch
curve's ceiling), the ceiling read off a curve, the engine's verify curve beside llama-bench's; and
the whole-file prompts shipped with the grounded ones."""

import argparse
import json
import re
import sysconfig
from pathlib import Path
from types import SimpleNamespace

import pytest

from draftscope.bench import spec
from draftscope.bench.batch_curve import (
    BatchCurve,
    ceiling_curve,
    curve_sizes,
    curve_table,
    describe,
    engine_curve,
    parse_llama_bench,
)
from draftscope.bench.spec_prompts import longest_run, prompt_table

FLAT = BatchCurve({1: 25.0, 2: 40.0, 16: 100.0, 64: 320.0, 128: 1000.0}, "llama-bench, 2 threads", llama_bench=True)


def row(question, category, method, tokens, seconds, first_s, steps=None, longest=None):
    return {
        "question_id": question,
        "category": category,
        "turn": 1,
        "method": method,
        "tokens": tokens,
        "seconds": seconds,
        "steps": steps,
        "draft_ms": None,
        "first_s": first_s,
        "first_tokens": 1,
        "writing_s": seconds - first_s,
        "longest_run": longest,
        "equal": True,
        "speedup": 1.0,
    }


ROWS = [
    row("grounded-file-1", "grounded-file", "llama", 101, 6.0, 1.0),  # 20 tokens/s writing
    row("grounded-file-1", "grounded-file", "auto", 101, 2.0, 1.0, steps=20, longest=37),  # 100/s
    row("grounded-edit-1", "grounded-edit", "llama", 51, 3.5, 1.0),
    row("grounded-edit-1", "grounded-edit", "auto", 51, 2.0, 1.0, steps=25, longest=6),
]


def test_the_ceiling_is_the_best_rate_a_fully_accepted_forward_writes():
    # 1: 40/s, 2: 50/s, 16: 160/s, 64: 200/s, 128: 128/s: the 64-token forward writes fastest
    assert FLAT.ceiling() == (64, 200.0)
    assert FLAT.over_plain(64) == pytest.approx(5.0)
    assert "ceiling: a fully accepted 64-token forward writes 200.0 tokens/s, 5.00x plain" in describe(FLAT)
    steep = BatchCurve({1: 25.0, 2: 50.0, 16: 400.0}, "steep")  # no size beats a plain step
    assert steep.ceiling() == (1, 40.0)


def test_the_engine_curve_counts_the_root_in_each_forward():
    curve = engine_curve({0: 0.025, 1: 0.04, 15: 0.1}, "ours at load")
    assert curve.ms == {1: 25.0, 2: 40.0, 16: 100.0}
    assert engine_curve(None, "ours") is None
    # llama-bench's curve gives the ceiling where measured, else the engine's
    assert ceiling_curve([curve, FLAT]) is FLAT and ceiling_curve([curve]) is curve and ceiling_curve([]) is None


def test_the_curve_goes_to_the_largest_forward_the_backend_verifies():
    assert curve_sizes(None) == (1, 2, 4, 8, 16, 32, 64, 128)
    assert curve_sizes(511) == (1, 2, 4, 8, 16, 32, 64, 128)  # past 128: not worth llama-bench's time
    assert curve_sizes(64) == (1, 2, 4, 8, 16, 32, 64)  # a root and 64 nodes: 65 tokens at most


def test_llama_bench_lines_are_read_and_noise_skipped():
    out = "\n".join(
        [
            json.dumps({"n_prompt": 64, "avg_ns": 320e6}),
            "not json",
            json.dumps({"n_prompt": 1, "avg_ns": 25e6}),
            json.dumps({"n_gen": 1}),
        ]
    )
    assert parse_llama_bench(out) == {1: 25.0, 64: 320.0}


def test_the_longest_run_is_the_most_draft_tokens_accepted_in_one_step():
    steps = [SimpleNamespace(accepted=n) for n in (0, 3, 41, 0, 12)]
    assert longest_run(steps) == 41
    assert longest_run([]) == 0


def test_each_prompt_gets_a_line_per_method_and_the_files_a_share_of_the_ceiling():
    text = prompt_table(ROWS, ["llama", "auto"], FLAT.ceiling(), FLAT.source)
    assert "200.0 tokens/s (a fully accepted 64-token forward, llama-bench, 2 threads)" in text
    lines = {tuple(c.strip() for c in line.strip("|").split("|")[:2]): line for line in text.splitlines()}
    # writing 100 tokens in 1 s: 100/s, τ 101/20, a 37-token run, half the ceiling
    assert re.search(r"\| 101 \| 100\.0 \| 5\.05 \| 37 \| 50% \|", lines["grounded-file-1", "auto"])
    assert re.search(r"\| 20\.0 \| – \| – \| 10% \|", lines["grounded-file-1", "llama"])
    # not a whole file: no share of the ceiling
    assert lines["grounded-edit-1", "auto"].rstrip().endswith("| 6 | – |")
    assert prompt_table(ROWS, ["auto"], None).startswith("batch curve's ceiling: not measured")


def test_the_verify_curves_are_printed_side_by_side():
    ours = engine_curve({0: 0.025, 1: 0.04, 63: 0.4}, "ours at load")
    text = curve_table([ours, FLAT])
    assert "| tokens | ours at load | llama-bench, 2 threads |" in text
    assert "| 64 | 400.0 ms, 160.0/s (4.00x) | 320.0 ms, 200.0/s (5.00x) |" in text
    assert "| 16 | – | 100.0 ms, 160.0/s (4.00x) |" in text
    assert "| ceiling | 160.0/s at 64 | 200.0/s at 64 |" in text


def test_the_report_of_a_grounded_run_renders_from_recorded_rows(tmp_path, capsys):
    args = argparse.Namespace(json_out=str(tmp_path / "spec.json"), markdown=str(tmp_path / "spec.md"))
    learned = SimpleNamespace(stats=lambda: SimpleNamespace(answers=0))
    ours = engine_curve({0: 0.025, 63: 0.4}, "ours at load")
    spec.report(args, ROWS, ["llama", "auto"], "llama", "llama.cpp", learned, [FLAT, ours])
    out = capsys.readouterr().out
    assert "| grounded-file-1 | auto | 101 | 100.0 | 5.05 | 37 | 50% |" in out
    assert out.index("| tokens | ours at load | llama-bench, 2 threads |") > out.index("grounded-file-1 | auto")
    assert (tmp_path / "spec.md").read_text().count("| grounded-file-1 |") == 2
    assert json.loads((tmp_path / "spec.json").read_text())["curves"]["llama-bench, 2 threads"]["64"] == 320.0


def test_a_spec_bench_run_reports_no_prompt_table(capsys):
    rows = [dict(r, category="coding", question_id=81) for r in ROWS[:2]]
    args = argparse.Namespace(json_out=None, markdown=None)
    spec.report(
        args, rows, ["llama", "auto"], "llama", "llama.cpp", SimpleNamespace(stats=lambda: SimpleNamespace(answers=0))
    )
    out = capsys.readouterr().out
    assert "longest accepted run" not in out and "verify curves" not in out


def file_prompts():
    return spec.load_questions("grounded", 3, {"grounded-file"})


def test_the_grounded_prompts_hold_whole_files_of_the_standard_library():
    assert [q["question_id"] for q in file_prompts()] == [f"grounded-file-{i}" for i in (1, 2, 3)]
    for q in file_prompts():
        prompt = q["turns"][0]
        name = re.match(r"Here is (Lib/\w+\.py) from Python's standard library", prompt).group(1)
        code = prompt.split("```python\n", 1)[1].rsplit("```", 1)[0]
        assert 300 <= code.count("\n") <= 600, (name, code.count("\n"))
        assert "give back the whole file" in prompt
        # the file as Python ships it (the shipped text is this Python's or another's): most lines shared
        shipped = Path(sysconfig.get_paths()["stdlib"], name.removeprefix("Lib/")).read_text(encoding="utf-8")
        ours = code.splitlines()
        assert sum(line in set(shipped.splitlines()) for line in ours) > 0.8 * len(ours), name


def test_an_unknown_category_is_named_with_the_ones_there_are():
    with pytest.raises(
        ValueError, match=r"no such categories in .*grounded_questions.jsonl: grounded-files \(it has: "
    ):
        spec.load_questions("grounded", 1, {"grounded-files"})


def test_whole_files_can_be_asked_for_alone_with_room_for_a_long_copy():
    parser = argparse.ArgumentParser()
    spec.add_arguments(parser)
    args = parser.parse_args(["--questions", "grounded", "--categories", "grounded-file", "--max-new-tokens", "512"])
    asked = {c for c in args.categories.split(",") if c}
    assert args.max_new_tokens == 512
    assert {q["category"] for q in spec.load_questions(args.questions, args.per_category, asked)} == {"grounded-file"}
