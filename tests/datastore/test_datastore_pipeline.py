"""The build pipeline around the sources: progress, cancel, manifest, CLI, and the default
model's real chat template."""

import json
import threading

import pytest

from draftscope.cli import main
from draftscope.datastore import BuildOptions, CancelToken, Source, build_datastore
from draftscope.datastore.manifest import manifest_path, read_manifest
from draftscope.retrieval import BuildCancelled, Reader


def _jsonl(path, n, words=12):
    path.write_text(
        "".join(
            json.dumps({"text": " ".join(f"word{(i * 7 + j) % 50}" for j in range(words))}) + "\n" for i in range(n)
        )
    )
    return path


def test_progress_reports_phases_and_counts(tokenizer, tmp_path):
    src = _jsonl(tmp_path / "d.jsonl", 400)
    seen = []
    report = build_datastore(
        [Source.parse(f"jsonl:{src}")],
        tokenizer,
        tmp_path / "o.idx",
        options=BuildOptions(batch_chars=2000),
        progress=seen.append,
    )
    phases = [p.phase for p in seen]
    assert phases[0] == "reading" and phases[-2:] == ["indexing", "done"]
    reading = [p for p in seen if p.phase == "reading"]
    assert [p.tokens for p in reading] == sorted(p.tokens for p in reading), "tokens only grow"
    assert seen[-1].tokens == report.tokens == Reader(report.path).token_count
    assert seen[-1].bytes_read == seen[-1].bytes_total == src.stat().st_size
    assert seen[-1].items == 400
    assert any(p.eta_seconds is not None for p in reading)


def _previous_index(tokenizer, tmp_path):
    old_src = _jsonl(tmp_path / "old.jsonl", 3)
    out = tmp_path / "store.idx"
    build_datastore([Source.parse(f"jsonl:{old_src}")], tokenizer, out)
    return out, out.read_bytes(), manifest_path(out).read_bytes()


@pytest.mark.parametrize("when", ["reading", "indexing"])
def test_cancel_leaves_no_file_and_the_old_index(tokenizer, tmp_path, when):
    out, old_index, old_manifest = _previous_index(tokenizer, tmp_path)
    src = _jsonl(tmp_path / "new.jsonl", 2000)
    cancel = CancelToken()

    def on_progress(p):
        if p.phase == when:
            cancel.cancel()

    with pytest.raises(BuildCancelled):
        build_datastore(
            [Source.parse(f"jsonl:{src}")],
            tokenizer,
            out,
            options=BuildOptions(batch_chars=2000),
            progress=on_progress,
            cancel=cancel,
        )
    assert out.read_bytes() == old_index
    assert manifest_path(out).read_bytes() == old_manifest
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert leftovers == [], leftovers


def test_cancel_from_another_thread_stops_within_a_second(tokenizer, tmp_path):
    src = _jsonl(tmp_path / "big.jsonl", 20_000, words=40)
    cancel = CancelToken()
    started = threading.Event()
    outcome = {}

    def run():
        try:
            build_datastore(
                [Source.parse(f"jsonl:{src}")],
                tokenizer,
                tmp_path / "o.idx",
                options=BuildOptions(batch_chars=20_000),
                progress=lambda p: started.set(),
                cancel=cancel,
            )
            outcome["finished"] = True
        except BuildCancelled:
            outcome["cancelled"] = True

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(30)
    cancel.cancel()
    t.join(timeout=5)  # generous for a loaded CI machine; the design target is one batch
    assert not t.is_alive()
    assert outcome == {"cancelled": True}
    assert not (tmp_path / "o.idx").exists()


def test_manifest_records_the_build(tokenizer, tmp_path):
    src = _jsonl(tmp_path / "d.jsonl", 10)
    (tmp_path / "bad.jsonl").write_text('{"text": "fine"}\n{broken\n')
    report = build_datastore(
        [Source.parse(f"jsonl:{src}"), Source.parse(f"jsonl:{tmp_path / 'bad.jsonl'}")],
        tokenizer,
        tmp_path / "o.idx",
        model="tiny-model",
        options=BuildOptions(dedupe=True),
    )
    m = read_manifest(report.path)
    assert m["model"] == "tiny-model"
    assert m["tokenizer"]["fingerprint"] == Reader(report.path).tokenizer_fingerprint
    assert m["tokenizer"]["vocab_size"] == len(tokenizer)
    assert m["chat_template"]["applied"] and m["chat_template"]["mode"] == "assistant"
    assert m["options"]["dedupe"] is True
    assert [s["spec"] for s in m["sources"]] == [f"jsonl:{src}", f"jsonl:{tmp_path / 'bad.jsonl'}"]
    assert m["totals"]["tokens"] == report.tokens and m["totals"]["records_skipped"] == 1
    assert m["skipped"]["examples"][0]["location"] == f"{tmp_path / 'bad.jsonl'}:2"
    assert set(m["timings_seconds"]) == {"read", "tokenise", "index", "total"}
    assert m["peak_rss_mb"] > 0


def test_cli_build_and_info(tokenizer_dir, tmp_path, capsys):
    src = _jsonl(tmp_path / "d.jsonl", 20)
    out = tmp_path / "cli.idx"
    code = main(
        [
            "datastore",
            "build",
            "--model",
            str(tokenizer_dir),
            "--source",
            f"jsonl:{src}",
            "--out",
            str(out),
            "--quiet",
            "--json",
        ]
    )
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["documents"] == 20 and summary["tokens"] == Reader(out).token_count
    assert main(["datastore", "info", str(out), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "20 documents" in text and "checksum    ok" in text and f"jsonl:{src}" in text


KILLED_BEFORE_MANIFEST = """
import os, signal, sys
import draftscope.datastore.pipeline as pipeline
from draftscope.cli import main
# The index has been renamed into place; the process dies before the manifest is written.
pipeline.write_manifest = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
main(["datastore", "build", "--model", sys.argv[1], "--source", "jsonl:" + sys.argv[2], "--out", sys.argv[3], "--quiet"])
"""


def test_a_build_killed_before_its_manifest_leaves_the_old_manifest_marked_stale(tokenizer_dir, tmp_path, capsys):
    import subprocess
    import sys

    out = tmp_path / "s.idx"
    assert (
        main(
            [
                "datastore",
                "build",
                "--model",
                str(tokenizer_dir),
                "--source",
                f"jsonl:{_jsonl(tmp_path / 'a.jsonl', 20)}",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            KILLED_BEFORE_MANIFEST,
            str(tokenizer_dir),
            str(_jsonl(tmp_path / "b.jsonl", 35)),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == -9, done.stderr[-2000:]
    assert Reader(out).document_count == 35, "the new index is in place"
    assert main(["datastore", "info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "35 documents" in text and "manifest    STALE: s.idx.manifest.json describes another build" in text
    assert "documents 20 against the index's 35" in text
    assert main(["datastore", "info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["manifest_problem"].startswith("describes another build")


def test_info_survives_a_manifest_with_wrong_types_or_bad_json(tokenizer_dir, tmp_path, capsys):
    out = tmp_path / "m.idx"
    assert (
        main(
            [
                "datastore",
                "build",
                "--model",
                str(tokenizer_dir),
                "--source",
                f"jsonl:{_jsonl(tmp_path / 'a.jsonl', 10)}",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    good = read_manifest(out)
    for damage in (
        {"sources": "everything"},
        {"totals": [1, 2]},
        {"skipped": {"by_reason": 7}},
        {"timings_seconds": {"total": "long"}},
        {"sources": [{"spec": 1}]},
    ):
        manifest_path(out).write_text(json.dumps({**good, **damage}))
        assert main(["datastore", "info", str(out)]) == 0, damage
        text = capsys.readouterr().out
        assert "10 documents" in text and ("unexpected types" in text or "STALE" in text), (damage, text)
    manifest_path(out).write_text("{not json")
    assert main(["datastore", "info", str(out)]) == 0
    assert "manifest    unreadable:" in capsys.readouterr().out


def test_cli_errors_have_exit_codes_and_words(tokenizer_dir, tmp_path, capsys):
    out = str(tmp_path / "x.idx")
    assert main(["datastore", "build", "--model", str(tokenizer_dir), "--source", "pdf:/x", "--out", out]) == 2
    assert "KIND:PATH" in capsys.readouterr().err
    assert (
        main(
            [
                "datastore",
                "build",
                "--model",
                str(tokenizer_dir),
                "--source",
                f"text:{tmp_path}/none",
                "--out",
                out,
                "--quiet",
            ]
        )
        == 1
    )
    assert "no such file or folder" in capsys.readouterr().err
    assert (
        main(
            [
                "datastore",
                "build",
                "--model",
                str(tmp_path / "no-model"),
                "--source",
                f"text:{tmp_path}",
                "--out",
                out,
                "--quiet",
            ]
        )
        == 1
    )
    assert "model not found" in capsys.readouterr().err
    assert main(["datastore", "info", str(tmp_path / "missing.idx")]) == 2


@pytest.mark.network
def test_default_model_template_and_fingerprint(tmp_path):
    """With the real SmolLM2 tokenizer (fetched once into the cache): the datastore holds the
    assistant turns exactly as the model writes them after its generation prompt."""
    from draftscope.models.resolve import load_tokenizer, resolve_model

    tok = load_tokenizer(resolve_model("default"))
    chat = tmp_path / "chat.json"
    chat.write_text(
        json.dumps(
            [{"conversations": [{"from": "human", "value": "What is 2+2?"}, {"from": "gpt", "value": "2 + 2 = 4."}]}]
        )
    )
    report = build_datastore([Source.parse(f"chat:{chat}")], tok, tmp_path / "d.idx", model="default")
    r = Reader(report.path)
    assert tok.decode(r.document(0)) == "2 + 2 = 4.<|im_end|>\n"
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], tokenize=False, add_generation_prompt=True
    )
    full = tok.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "2 + 2 = 4."}], tokenize=False
    )
    assert full == prompt + "2 + 2 = 4.<|im_end|>\n"
    assert r.vocab_size == 49_152 and r.tokenizer_fingerprint.startswith("vocab-sha256:")


def test_a_file_named_by_two_sources_is_stored_once(tokenizer, tmp_path):
    """code:DIR and text:DIR/NOTES.md: NOTES.md is read by the first source only."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "main.py").write_text("def main():\n    print('hello world')\n")
    notes = folder / "NOTES.md"
    notes.write_text("Remember: the quick brown fox jumps over the lazy dog. " * 3)
    both = build_datastore(
        [Source.parse(f"code:{folder}"), Source.parse(f"text:{notes}")], tokenizer, tmp_path / "both.idx"
    )
    alone = build_datastore([Source.parse(f"code:{folder}")], tokenizer, tmp_path / "alone.idx")
    assert both.tokens == alone.tokens, "NOTES.md stored once"
