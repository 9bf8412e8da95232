"""Files given to the model in every face: the server's content parts (a file part read and kept
with its message, an unknown part type refused naming it, an unreadable file refused naming it, a
body too large refused before it is decoded), the session's choice of whole file or passages
against the model's real context, and the terminal's --attach."""

from __future__ import annotations

import base64
import subprocess
import sys

import httpx2 as httpx
import openai
import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.core.session import ChatSession
from draftscope.documents.extract import Attachment
from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine
from draftscope.server import ServerConfig, ServerThread, create_app
from draftscope.server.protocol import ApiError, parse_chat
from draftscope.storage import HistoryStore


def data_url(data: bytes, mime: str = "text/plain") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def file_part(name: str, data: bytes, mime: str = "text/plain") -> dict:
    return {"type": "file", "file": {"filename": name, "file_data": data_url(data, mime)}}


@pytest.fixture
def tiny_engine(tokenizer):
    engine = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0, max_positions=512), tokenizer, name="tiny")
    engine.eos_ids = set()
    return engine


@pytest.fixture
def server(tiny_engine, tmp_path):
    store = HistoryStore(tmp_path / "h.sqlite3")
    app = create_app(
        runtime_for(tiny_engine, max_new_tokens=8, drafters=lambda: [ContextDrafter()]),
        history=store,
        config=ServerConfig(max_body_bytes=64 << 10),
    )
    running = ServerThread(app, port=0).start()
    yield running, store
    running.stop()


def test_parse_chat_reads_text_and_file_parts_and_refuses_the_rest():
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Summarise "},
                    file_part("a.md", b"# A"),
                    {"type": "text", "text": "this"},
                ],
            }
        ]
    }
    (message,) = parse_chat(body).messages
    assert message["content"] == "Summarise this"
    (part,) = message["files"]
    assert (part.filename, part.data, part.mime) == ("a.md", b"# A", "text/plain")
    cases = [
        (
            {"type": "image_url", "image_url": {"url": "x"}},
            "messages[0].content[0].type",
            "'image_url' are not supported",
        ),
        (
            {"type": "file", "file": {"file_id": "file-1"}},
            "messages[0].content[0].file.file_id",
            "send the file itself",
        ),
        (
            {"type": "file", "file": {"filename": "a", "file_data": "data:text/plain;base64,%%%"}},
            "messages[0].content[0].file.file_data",
            "not valid base64",
        ),
        ({"type": "file", "file": {"file_data": data_url(b"x")}}, "messages[0].content[0].file.filename", "filename"),
        ({"text": "no type"}, "messages[0].content[0]", "each content part"),
    ]
    for part, param, words in cases:
        with pytest.raises(ApiError) as err:
            parse_chat({"messages": [{"role": "user", "content": [part]}]})
        assert err.value.status == 400 and err.value.param == param and words in err.value.message, part
    with pytest.raises(ApiError, match="user messages only"):
        parse_chat({"messages": [{"role": "assistant", "content": [file_part("a.md", b"x")]}]})


def test_a_file_part_is_read_answered_from_and_kept_with_its_message(server, tokenizer):
    running, store = server
    client = openai.OpenAI(base_url=running.url, api_key="x")
    notes = b"alpha beta gamma delta\nepsilon zeta eta theta\n"
    with_file = client.chat.completions.create(
        model="tiny",
        max_tokens=8,
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "what comes after gamma?"}, file_part("notes.txt", notes)],
            }
        ],
    )
    plain = client.chat.completions.create(
        model="tiny", max_tokens=8, messages=[{"role": "user", "content": "what comes after gamma?"}]
    )
    expected = tokenizer.apply_chat_template(
        [
            {
                "role": "user",
                "content": '<file name="notes.txt">\nalpha beta gamma delta\nepsilon zeta eta theta\n'
                "</file>\n\nwhat comes after gamma?",
            }
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert with_file.usage.prompt_tokens == len(tokenizer(expected, add_special_tokens=False)["input_ids"])
    assert with_file.usage.prompt_tokens > plain.usage.prompt_tokens + 8, "the model read the file"
    first = min(store.conversations(), key=lambda c: c.id)  # the answer with the file came first
    user = store.messages(first.id)[0]
    assert user.content == "what comes after gamma?"
    assert [(f["name"], f["text"]) for f in user.files] == [("notes.txt", notes.decode().rstrip("\n"))]


def test_an_unreadable_file_or_a_huge_body_is_refused_naming_why(server):
    running, store = server
    bad = httpx.post(
        running.url + "/chat/completions",
        json={
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "read this"},
                        file_part("photo.png", b"\x89PNG\r\n\x1a\n" + bytes(64), "image/png"),
                    ],
                }
            ]
        },
    )
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert "photo.png is a binary file" in error["message"] and error["param"] == "messages[0].content[1].file"
    huge = httpx.post(
        running.url + "/chat/completions",
        json={"messages": [{"role": "user", "content": [file_part("big.txt", b"word " * 40_000)]}]},
    )
    assert huge.status_code == 413, huge.text
    assert store.conversations() == [], "nothing refused is kept"


def test_a_file_too_long_for_the_context_sends_the_passages_that_answer(tiny_engine, tmp_path):
    """The tiny model reads 512 tokens: a 4,000-word document goes as its best passages, within the
    room left for the answer, and the one that holds the fact is among them."""
    from test_documents import long_document

    session = ChatSession(runtime_for(tiny_engine, max_new_tokens=64), history=HistoryStore(tmp_path / "h.sqlite3"))
    question = "Where is the spare key to the archive room kept?"
    (sent,) = session.attach(question, [Attachment("minutes.txt", long_document())])
    assert not sent.whole and "blue cabinet" in sent.text
    session.say(question, files=[sent])
    prompt = tiny_engine.encode_chat(session.messages())
    assert len(prompt) <= tiny_engine.max_context - 64, "room is left for the answer"
    (turn,) = session.turns()
    assert turn.files == (sent,), "kept with the message, as the model read it"
    small = session.attach("and this?", [Attachment("short.md", "just a line")])
    assert small[0].whole


def test_the_terminal_refuses_an_unreadable_attachment_before_loading_a_model(tmp_path):
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 4)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "draftscope",
            "generate",
            "what is this?",
            "--attach",
            str(tmp_path / "blob.bin"),
            "--model",
            str(tmp_path / "no-such-model"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "blob.bin is a binary file" in done.stderr and "no-such-model" not in done.stderr


def test_a_long_verbatim_match_drafts_a_long_chain_and_a_short_one_a_short_one():
    """The conversation drafter: the answer following the attached text for 30 tokens drafts as deep
    as the budget asks (the step policy decides how much is verified), a 3-token match only max_depth."""
    document = list(range(100, 200))  # an attached file's tokens, then the question
    drafter = ContextDrafter(max_depth=10, long_depth=64)
    following = document + [7, 8, 9] + document[:30]  # the answer copies the file's first 30 tokens
    tree = drafter.propose(following, 200)
    # the rest of the context after the copied place: the file's other 70 tokens and what follows
    assert tree.max_depth == 103 and list(tree.tokens[:70]) == document[30:]
    assert tree.match_len == tree.extra["copy_run"] == 30
    short = document + [7, 8, 9] + [5] + document[40:43]  # a 3-token match after a break
    assert drafter.propose(short, 200).max_depth == 10


def test_the_server_answers_the_last_question_from_its_documents_folder(tiny_engine, tmp_path):
    """`draftscope serve --documents DIR`: the last user message gets the folder's passages (kept
    with it in the history, naming the file and lines); earlier turns are read as they were."""
    from draftscope.documents.folder import FolderIndex

    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "office.txt").write_text("The office wifi password is kestrel-42.\n\nLunch is at noon.\n")
    runtime = runtime_for(tiny_engine, max_new_tokens=8, drafters=lambda: [ContextDrafter()])
    runtime.documents = FolderIndex(folder, tmp_path / "index.sqlite3")
    runtime.documents.refresh()
    store = HistoryStore(tmp_path / "h.sqlite3")
    running = ServerThread(create_app(runtime, history=store), port=0).start()
    try:
        client = openai.OpenAI(base_url=running.url, api_key="x")
        client.chat.completions.create(
            model="tiny",
            max_tokens=8,
            messages=[
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "hi"},
                {"role": "user", "content": "What is the wifi password?"},
            ],
        )
    finally:
        running.stop()
    (conversation,) = store.conversations()
    first, _, last, _ = store.messages(conversation.id)
    assert first.files == ()
    (found,) = last.files
    assert found["name"] == "notes (documents)" and "kestrel-42" in found["text"]
    assert found["passages"] == ["office.txt, lines 1-3"]
