"""`draftscope bench lossless`: the audit's statistics, a full run on a tiny model folder, and a
broken verifier making it fail."""

import json
import re
import shutil

import numpy as np
import pytest
from engine_fixtures import tiny_llama

from draftscope.bench.lossless_stats import chi_square_p, chi_square_test, ks_uniform, pairs_test
from draftscope.cli import main


def test_statistics_reject_what_is_not_uniform_or_independent():
    assert chi_square_p(3.841, 1) == pytest.approx(0.05, abs=1e-3)
    assert chi_square_p(18.307, 10) == pytest.approx(0.05, abs=1e-3)
    rng = np.random.default_rng(0)
    assert ks_uniform(rng.random(20_000))[1] > 0.01
    assert ks_uniform(rng.random(20_000) ** 1.1)[1] < 1e-6, "a slight skew over 20k values is caught"
    walk = np.cumsum(rng.normal(scale=0.05, size=5000)) % 1.0  # each value close to the last: dependent
    assert pairs_test([rng.random(5000)])[2] > 0.01
    assert pairs_test([walk])[2] < 1e-6
    stat, df, p = chi_square_test([50, 50, 0, 0], [25, 25, 25, 25])
    assert p < 1e-10 and df == 3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer_dir, tokenizer):
    folder = tmp_path_factory.mktemp("audit") / "tiny-model"
    shutil.copytree(tokenizer_dir, folder)
    tiny_llama(len(tokenizer), seed=1, sharpen=3.0).save_pretrained(folder)
    return folder


def audit(model_dir, out, *extra, configs="context,model"):
    return main(
        [
            "bench",
            "lossless",
            "--model",
            str(model_dir),
            "--draft-model",
            "self:1",
            "--configs",
            configs,
            "--prompts",
            "2",
            "--seeds",
            "2",
            "--max-new-tokens",
            "12",
            "--runs",
            "100",
            "--pit-tokens",
            "300",
            "--budget",
            "6",
            "--dtype",
            "float32",
            "--quiet",
            "--json",
            str(out),
            *extra,
        ]
    )


def test_audit_passes_on_a_tiny_model_and_writes_its_report(model_dir, tmp_path, capsys):
    code = audit(model_dir, tmp_path / "report.json", "--temperature", "0,1")
    out = capsys.readouterr().out
    assert code == 0, out
    assert "every test holds" in out
    checks = json.loads((tmp_path / "report.json").read_text())
    kinds = {(c["kind"], c["config"]) for c in checks}
    assert {
        ("greedy", "plain"),
        ("greedy", "context,model"),
        ("identity", "context,model"),
        ("first-tokens", "plain"),
        ("pit-uniform", "plain"),
        ("pit-pairs", "plain"),
    } <= kinds
    assert all(c["passed"] for c in checks)
    for kind in ("greedy", "identity"):
        check = next(c for c in checks if c["kind"] == kind and c["config"] == "context,model")
        assert check["extra"]["agreement"] == 1.0
        assert int(re.search(r"(\d+) draft tokens accepted", check["detail"]).group(1)) > 0, check
    identity = next(c for c in checks if c["kind"] == "identity")
    assert identity["temperature"] == 1 and "4/4 identical to plain decoding with the same seed" in identity["detail"]


def test_broken_noise_is_rejected_by_the_audit(model_dir, tmp_path, capsys):
    """--only-biased: noise reused across positions and keyed by the step; both must be caught."""
    code = audit(
        model_dir,
        tmp_path / "report.json",
        "--temperature",
        "1",
        "--only-biased",
        "--runs",
        "400",
        "--pit-tokens",
        "1500",
    )
    out = capsys.readouterr().out
    checks = json.loads((tmp_path / "report.json").read_text())
    caught = {c["kind"] for c in checks if not c["passed"]}
    assert "identity" in caught and caught & {"first-tokens", "pit-uniform", "pit-pairs"}, out
    assert "rejected (as it should)" in out and code == 0, "broken noise is not the engine's: the verdict is not run"


def test_audit_fails_when_verification_is_wrong(model_dir, tmp_path, capsys, monkeypatch):
    """An off-by-one verifier (the token after the accepted drafts read from the parent's row)
    changes answers only where drafts were accepted: the audit must fail."""
    import draftscope.engine.answer as engine_mod
    from draftscope.engine.verify import verify_tree

    def off_by_one(tree, chosen):
        path, _ = verify_tree(tree, chosen)
        row = path[-2] + 1 if len(path) > 1 else 0
        return path, int(chosen[row])

    monkeypatch.setattr(engine_mod, "verify_tree", off_by_one)
    code = audit(model_dir, tmp_path / "report.json", "--temperature", "0")
    out = capsys.readouterr().out
    assert code == 1
    assert "FAILED: greedy [context,model, T=0]" in out
    assert "| greedy | plain | 0 | ours | holds |" in out


def test_bad_arguments_are_named(model_dir, capsys):
    assert main(["bench", "lossless", "--model", str(model_dir), "--temperature", "-1"]) == 2
    assert "--temperature" in capsys.readouterr().err
