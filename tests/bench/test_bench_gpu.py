"""`draftscope bench gpu` on the CPU: every section prints its figures and writes them as JSON
lines; the tiny fp32 shape keeps the fp32 promise (plain = HF generate, oracle = plain); a real
model folder runs the spec-bench section through `bench spec`; bad arguments are usage errors."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from engine_fixtures import tiny_llama

from draftscope.bench.gpu_report import SECTIONS
from draftscope.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def sections_of(out: str) -> dict[str, str]:
    """The printed text under each numbered heading, by section name."""
    parts = re.split(r"^== \d\. (.+) ==$", out, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def json_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tiny_shape_prints_every_section_and_keeps_fp32_identity(tmp_path, capsys):
    out_file = tmp_path / "gpu.jsonl"
    code = main(
        [
            "bench",
            "gpu",
            "--device",
            "cpu",
            "--shape",
            "tiny",
            "--tokens",
            "16",
            "--contexts",
            "32,64",
            "--reps",
            "2",
            "--bandwidth",
            "50",
            "--json",
            str(out_file),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "shape tiny on " in out and "float32" in out and "backend torch · cpu · float32" in out
    assert "random weights: these figures measure costs, not acceptance" in out
    assert "median of 2 reps after 2 warm-ups" in out
    text = sections_of(out)
    assert list(text) == list(SECTIONS.values())

    curve = text["verify cost curve"]
    assert "context 32:" in curve and "context 64:" in curve
    assert "bandwidth bound: 50 GB/s from --bandwidth" in curve
    for tree in ("chain 0", "chain 1", "chain 8", "chain 64", "wide 64 (8 x chain of 8)"):
        assert re.search(rf"{re.escape(tree)} +\d+\.\d+ ms +\d+\.\d+x +[\d.]+ GB/s +[\d.]+% of the bound", curve), tree
    worst = text["worst step"]
    assert "16 steps of verify + commit of a 64-node tree" in worst and "first 3 steps (warm-up):" in worst
    assert re.search(r"the other 13: median [\d.]+ ms, p99 [\d.]+ ms, max [\d.]+ ms, max/median [\d.]+", worst)
    plain = text["plain decoding vs HF generate"]
    assert re.search(r"HF generate +[\d.]+ tokens/s \(16 tokens\)", plain)
    assert re.search(r"engine plain loop +[\d.]+ tokens/s \(16 tokens\)", plain)
    assert "token-identical: True (expected in fp32)" in plain
    oracle = text["oracle limit"]
    for config in ("depth 3", "depth 7", "depth 15", "adaptive", re.escape("wide 64 (8 x 8)")):
        line = rf"{config} +[\d.]+ tokens/s +[\d.]+x plain +tau +[\d.]+ +[\d.]+ nodes a step +token-identical: True"
        assert re.search(line, oracle), config
    assert re.search(
        r"wide 64 \(8 x 8\): [\d.]+ ms a step, its 64-node forward alone [\d.]+ ms: \d+% of a step "
        r"outside the forward",
        oracle,
    )
    assert "skipped: needs --model" in text["spec-bench"]

    rows = json_lines(out_file)
    assert {r["section"] for r in rows} == {"header", *SECTIONS.values()}
    curve_rows = [r for r in rows if r["section"] == "verify cost curve"]
    curve_rows = [r for r in curve_rows if "ms" in r]
    assert len(curve_rows) == 2 * 9 and all(r["ms"] > 0 for r in curve_rows)
    for r in curve_rows:  # the bytes a step reads over its time, and that over the bound given
        # the file keeps GB/s to 2 decimals: a slow machine's 0.06 GB/s is 0.0624 before rounding
        assert r["gb_per_s"] == pytest.approx(r["bytes_read"] / (r["ms"] / 1000) / 1e9, rel=0.01, abs=0.006)
        assert r["bound_share"] == pytest.approx(r["gb_per_s"] / 50, rel=0.01, abs=0.0002)
    assert all(r["ratio"] == 1.0 for r in curve_rows if r["nodes"] == 0)
    assert {r["nodes"] for r in curve_rows} == {0, 1, 2, 4, 8, 16, 32, 64}
    steps = next(r for r in rows if r["section"] == "worst step" and r["part"] == "steps")
    assert steps["median_ms"] <= steps["p99_ms"] <= steps["max_ms"]
    assert steps["last_cache"] - steps["first_cache"] == 16 * 4
    assert next(r for r in rows if r["section"] == "plain decoding vs HF generate" and "identical" in r)["identical"]
    oracle_rows = [r for r in rows if r["section"] == "oracle limit" and "identical" in r]
    assert [r["config"] for r in oracle_rows] == ["depth 3", "depth 7", "depth 15", "adaptive", "wide 64 (8 x 8)"]
    assert all(r["identical"] for r in oracle_rows)
    assert [r["tau"] for r in oracle_rows[:3]] == [4.0, 8.0, 16.0]  # all drafts accepted: depth + 1 a step
    assert [r["nodes_per_step"] for r in oracle_rows[:3]] == [3.0, 7.0, 15.0]
    wide = oracle_rows[4]  # 64-node trees whose first branch is right: 8 drafts + the bonus a step (16 tokens: 2 steps)
    assert wide["tau"] == 8.0 and wide["nodes_per_step"] > 32
    outside = next(r for r in rows if r["section"] == "oracle limit" and r["config"] == "outside the forward")
    assert outside["forward_ms"] > 0 and 0 <= outside["outside_share"] < 1


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer_dir, tokenizer):
    folder = tmp_path_factory.mktemp("bench-gpu") / "tiny-model"
    shutil.copytree(tokenizer_dir, folder)
    tiny_llama(len(tokenizer), seed=1, sharpen=3.0, max_positions=8192).save_pretrained(folder)
    return folder


def test_a_model_folder_runs_the_spec_bench_section(model_dir, tmp_path, capsys):
    out_file = tmp_path / "gpu.jsonl"
    questions = str(Path(__file__).parents[1] / "data" / "spec_bench_sample.jsonl")
    code = main(
        [
            "bench",
            "gpu",
            "--device",
            "cpu",
            "--model",
            str(model_dir),
            "--dtype",
            "float32",
            "--tokens",
            "12",
            "--contexts",
            "32",
            "--reps",
            "1",
            "--sections",
            "oracle,spec-bench",
            "--questions",
            questions,
            "--json",
            str(out_file),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert list(sections_of(out)) == ["oracle limit", "spec-bench"]
    assert "random weights" not in out
    assert "draftscope bench spec: tiny-model" in out  # bench spec's own run and table
    rows = json_lines(out_file)
    assert all(r["identical"] for r in rows if r["section"] == "oracle limit" and "identical" in r)
    spec = {r["method"]: r for r in rows if r["section"] == "spec-bench"}
    assert set(spec) == {"hf", "hf-pld", "plain", "auto", "oracle"} and spec["oracle"]["equal"] == 1


def test_contexts_past_the_models_length_are_refused_in_words(model_dir, capsys):
    code = main(["bench", "gpu", "--device", "cpu", "--model", str(model_dir), "--contexts", "9000", "--tokens", "4"])
    err = capsys.readouterr().err
    assert code == 2 and "holds 8,192" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, words",
    [
        (
            ["--shape", "huge"],
            "invalid choice: 'huge' (choose from 'tiny', 'smollm2-135m', 'qwen2.5-0.5b', 'qwen2.5-1.5b', 'qwen2.5-7b')",
        ),
        (
            ["--sections", "verify,nope"],
            "unknown section(s) 'nope' (choose from verify, worst, plain, peer, oracle, spec-bench)",
        ),
        (["--sections", ","], "unknown section(s) (none given)"),
        (["--contexts", "256,x"], "not a whole number: 'x'"),
        (["--shape", "tiny", "--model", "x"], "not allowed with argument --shape"),
    ],
)
def test_bad_arguments_are_usage_errors(argv, words, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "gpu", *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert words in err and "Traceback" not in err


def test_the_static_cache_runs_the_same_sections_and_says_so(capsys):
    """--cache static: what CUDA runs (here its steps eagerly, saying why), same identity promise."""
    code = main(
        [
            "bench",
            "gpu",
            "--device",
            "cpu",
            "--shape",
            "tiny",
            "--cache",
            "static",
            "--tokens",
            "12",
            "--contexts",
            "32",
            "--reps",
            "1",
            "--sections",
            "verify,plain,oracle",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "static cache, eager steps" in out
    found = sections_of(out)
    assert "token-identical: True" in found["plain decoding vs HF generate"]
    assert "False" not in found["oracle limit"]


def test_a_step_reads_its_weights_once_and_its_kv_cache():
    """The bandwidth figures' numerator, by hand for the tiny shape (fp32, its own head): every matrix
    once, of the embedding table only the row looked up, the KV cache of the context."""
    from draftscope.bench.gpu_models import SHAPES, card_bandwidth, shape_model, step_bytes

    model = shape_model("tiny", torch.device("cpu"), torch.float32)
    shape = SHAPES["tiny"]
    hidden, ffn, layers, vocab = (
        shape["hidden_size"],
        shape["intermediate_size"],
        shape["num_hidden_layers"],
        shape["vocab_size"],
    )
    kv_dim = shape["num_key_value_heads"] * hidden // shape["num_attention_heads"]
    per_layer = (
        hidden * hidden * 2
        + hidden * kv_dim * 2
        + hidden
        + 2 * kv_dim  # q, o; k, v; their biases
        + 3 * hidden * ffn
        + 2 * hidden
    )  # the MLP, two norms
    expected = (
        layers * per_layer + vocab * hidden + hidden + hidden
    ) * 4  # the head, the final norm, one embedding row
    got = step_bytes(model, context=100)
    assert got["weights"] == expected and got["kv"] == 2 * layers * kv_dim * 100 * 4
    assert card_bandwidth("NVIDIA H200") == 4800.0 and card_bandwidth("NVIDIA H100 80GB HBM3") == 3350.0
    assert card_bandwidth("NVIDIA A100-SXM4-80GB") == 2039.0 and card_bandwidth("Some CPU") is None


def test_a_projection_replays_traced_acceptance_against_measured_costs(model_dir, tmp_path, capsys):
    """bench spec --trace here, bench gpu --json's curve, bench project: plain decoding projects to
    exactly 1x, the oracle (every draft right) above it; the table says it is a projection."""
    costs, trace = tmp_path / "costs.jsonl", tmp_path / "trace.jsonl"
    assert (
        main(
            [
                "bench",
                "gpu",
                "--device",
                "cpu",
                "--model",
                str(model_dir),
                "--dtype",
                "float32",
                "--contexts",
                "32",
                "--reps",
                "1",
                "--sections",
                "verify",
                "--json",
                str(costs),
            ]
        )
        == 0
    )
    questions = str(Path(__file__).parents[1] / "data" / "spec_bench_sample.jsonl")
    # a fixed budget: the oracle drafts whatever this machine's cost curve says (the adaptive policy may
    # rightly verify nothing on a CPU where one node costs 3x a plain step)
    assert (
        main(
            [
                "bench",
                "spec",
                "--model",
                str(model_dir),
                "--dtype",
                "float32",
                "--questions",
                questions,
                "--per-category",
                "1",
                "--categories",
                "writing,coding",
                "--max-new-tokens",
                "16",
                "--methods",
                "plain,oracle",
                "--budget",
                "8",
                "--trace",
                str(trace),
            ]
        )
        == 0
    )
    steps = json_lines(trace)
    assert {s["method"] for s in steps} == {"plain", "oracle"}
    assert all(s["nodes"] == 0 and s["tokens"] == 1 for s in steps if s["method"] == "plain")
    assert any(s["sources"].get("oracle", 0) > 0 for s in steps if s["method"] == "oracle")
    capsys.readouterr()
    assert main(["bench", "project", "--trace", str(trace), "--costs", str(costs)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("PROJECTION (not measured)") and "at context 32" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ") and "x |" in line}
    assert rows["plain"].rstrip().endswith("| 1.00x |"), rows
    assert float(rows["oracle"].split("|")[-2].strip().rstrip("x")) > 1.0, rows


def test_a_projected_step_costs_what_was_measured_or_a_line_between():
    from draftscope.bench.project import cost, project

    curve = {0: 10.0, 4: 14.0, 8: 20.0}
    assert cost(curve, 0) == 10.0 and cost(curve, 2) == 12.0 and cost(curve, 6) == 17.0 and cost(curve, 16) == 40.0
    steps = [
        {"method": "m", "nodes": 4, "tokens": 3, "draft_ms": 1.0},
        {"method": "m", "nodes": 0, "tokens": 1, "draft_ms": 0.5},
    ]  # a step that drafted nothing: plain's cost
    m = project(steps, curve)["m"]
    assert m["ms"] == 14.0 + 1.0 + 10.0 and m["plain_ms"] == 40.0 and m["speedup"] == pytest.approx(40.0 / 25.0)
    assert project(steps, curve, drafting=False)["m"]["ms"] == 24.0
