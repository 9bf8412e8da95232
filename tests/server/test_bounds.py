"""The server bounds work before it starts it (issue 60): a body nested too deep, an integer of too
many digits or a defect of the server's own is answered in OpenAI's shape, never plain text; a
request over the queue limit gets 429 before its body is read; bodies are parsed and files read
off the event loop, a few at a time, within the queue limit. A live in-process server on a tiny
model, real HTTP clients on 127.0.0.1."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from urllib.parse import urlparse

import httpx2 as httpx
import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

import draftscope.documents.extract as extract
import draftscope.server.intake as intake
import draftscope.server.protocol as protocol
from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine
from draftscope.server import ServerConfig, ServerThread, create_app
from draftscope.server.intake import MAX_DEPTH, PARSING_AT_ONCE

HI = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


@pytest.fixture
def served(tokenizer):
    def start(*, queue_limit=8, on_request=None):
        engine = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer, name="tiny")
        engine.eos_ids = set()
        runtime = runtime_for(engine, max_new_tokens=5, drafters=lambda: [ContextDrafter()])
        app = create_app(runtime, config=ServerConfig(queue_limit=queue_limit), on_request=on_request)
        server = ServerThread(app, port=0).start()
        started.append(server)
        return server

    started = []
    yield start
    for s in started:
        s.stop()


def nested(levels: int, inner: str = "0") -> str:
    return "[" * levels + inner + "]" * levels


def deep(body: dict, levels: int) -> bytes:
    """``body`` with its "DEEP" value arrays nested ``levels`` deep."""
    return json.dumps(body).replace('"DEEP"', nested(levels)).encode()


def posted(server, body: bytes, path: str = "/chat/completions") -> httpx.Response:
    return httpx.post(server.url + path, content=body, headers={"content-type": "application/json"}, timeout=30)


def error_of(reply: httpx.Response, status: int) -> dict:
    """The error of a reply that must be ``status`` in OpenAI's shape."""
    assert reply.status_code == status, reply.text[:300]
    assert reply.headers["content-type"].startswith("application/json"), reply.text[:300]
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def wait_until(condition, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_a_body_nested_100_000_arrays_deep_is_a_400_saying_so(served, path):
    """It was a plain-text 500: Python's JSON parser raised RecursionError."""
    server = served()
    error = error_of(posted(server, nested(100_000).encode(), path), 400)
    assert "nested too deep" in error["message"] and error["code"] == "nested_too_deep"
    assert posted(server, json.dumps(HI).encode()).status_code == 200, "the server goes on answering"


def test_a_value_just_within_the_depth_is_checked_as_any_other(served):
    server = served()
    body = deep({"model": "tiny", "prompt": "x", "seed": "DEEP"}, MAX_DEPTH - 1)
    error = error_of(posted(server, body, "/completions"), 400)
    assert error["param"] == "seed" and "'seed' must be an integer" in error["message"], error


@pytest.mark.parametrize(
    "body, param",
    [
        (deep({"model": "tiny", "messages": [{"role": "user", "content": "DEEP"}]}, 900), "messages"),
        (deep({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "tools": "DEEP"}, 900), "tools"),
        (deep({"model": "tiny", "prompt": "x", "seed": "DEEP"}, MAX_DEPTH), "seed"),
    ],
)
def test_a_value_nested_deep_inside_a_field_is_refused_naming_the_field(served, body, param):
    """Deep values that Python's parser still reads are refused before any check can recurse
    into them, with the field named (they were refused for some other reason, or not at all)."""
    server = served()
    path = "/completions" if b'"prompt"' in body else "/chat/completions"
    error = error_of(posted(server, body, path), 400)
    assert error["param"] == param and "nested too deep" in error["message"], error
    assert f"at most {MAX_DEPTH} levels" in error["message"]


def test_an_integer_of_more_digits_than_python_reads_is_a_400(served):
    """json.loads raises ValueError (not JSONDecodeError) past 4,300 digits: it was a plain-text 500."""
    server = served()
    body = '{"model": "tiny", "messages": [{"role": "user", "content": "x"}], "seed": 1%s}' % ("0" * 5000)
    error = error_of(posted(server, body.encode()), 400)
    assert "not valid JSON" in error["message"] and "digits" in error["message"]


def test_a_wide_value_where_a_role_goes_is_quoted_in_a_few_characters(served):
    """The error quoted the whole value: a list of 200,000 items made an error of 600 KB."""
    server = served()
    body = json.dumps({"messages": [{"role": [0] * 200_000, "content": "x"}]}).encode()
    error = error_of(posted(server, body), 400)
    assert error["param"] == "messages[0].role" and len(error["message"]) < 200, len(error["message"])


def test_an_unexpected_exception_is_a_500_in_openais_shape_and_logged(served, monkeypatch):
    """Starlette answered a defect with plain text "Internal Server Error", which OpenAI clients
    cannot read; the request's log line said the client had left."""

    def broken(body):
        raise RuntimeError("a defect of the server's own")

    monkeypatch.setattr(protocol, "parse_completion", broken)
    lines = []
    server = served(on_request=lines.append)
    error = error_of(posted(server, b'{"prompt": "x"}', "/completions"), 500)
    assert error["type"] == "server_error" and "RuntimeError: a defect of the server's own" in error["message"]
    wait_until(lambda: lines, "the request's log line")
    assert " POST /v1/completions 500 · " in lines[0], lines[0]
    assert posted(server, json.dumps(HI).encode()).status_code == 200, "the server goes on answering"


def raw_request(server, content_length: int, body: bytes = b"") -> socket.socket:
    """A POST whose headers promise ``content_length`` bytes, of which only ``body`` is sent."""
    where = urlparse(server.url)
    sock = socket.create_connection((where.hostname, where.port), timeout=10)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {content_length}\r\n\r\n".encode()
        + body
    )
    return sock


def reply_of(sock: socket.socket) -> str:
    """The response: its headers, then as many body bytes as its Content-Length says."""
    reply = b""
    while b"\r\n\r\n" not in reply and (chunk := sock.recv(65536)):
        reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(body) < length and (chunk := sock.recv(65536)):
        body += chunk
    return (head + b"\r\n\r\n" + body).decode(errors="replace")


def test_a_full_queue_refuses_with_429_before_the_body_is_read(served):
    """The queue limit was checked once a body was read and parsed: requests of 48 MB each were
    all read at once, bounded by nothing. A request whose body is still coming holds its place; the
    next is refused at once, none of its 40 MB sent."""
    server = served(queue_limit=0)  # one answer at a time, none waiting
    answerer = server.app.state.answerer
    body = json.dumps(HI).encode()
    first = raw_request(server, len(body), body[:10])  # its body stalls after 10 bytes
    try:
        wait_until(lambda: answerer.in_flight == 1, "the first request took its place")
        with raw_request(server, 40_000_000) as second:  # headers only: the server must not wait for 40 MB
            refused = reply_of(second)
        assert refused.startswith("HTTP/1.1 429"), refused[:200]
        assert '"code":"queue_full"' in refused.replace(" ", "")
        first.sendall(body[10:])
        answered = reply_of(first)
        assert answered.startswith("HTTP/1.1 200"), answered[:300]
    finally:
        first.close()
    wait_until(lambda: answerer.in_flight == 0, "the first request gave its place back")
    assert posted(server, body).status_code == 200


def test_a_body_that_stalls_is_refused_in_time_and_gives_its_place_back(served, monkeypatch):
    """A request holds its queue place while its body comes: a client that sent its headers and
    stopped held it for good, and with the queue full every other client got 429 until it left."""
    monkeypatch.setattr(intake, "BODY_SECONDS", 1.0)
    server = served(queue_limit=0)
    answerer = server.app.state.answerer
    body = json.dumps(HI).encode()
    with raw_request(server, len(body), body[:10]) as stalled:  # never sends the rest
        refused = reply_of(stalled)
    assert refused.startswith("HTTP/1.1 408"), refused[:200]
    assert '"code":"request_timeout"' in refused.replace(" ", "")
    wait_until(lambda: answerer.in_flight == 0, "the stalled request gave its place back")
    assert posted(server, body).status_code == 200


def with_file(text: str) -> dict:
    data = base64.b64encode(text.encode()).decode()
    part = {"type": "file", "file": {"filename": "notes.txt", "file_data": f"data:text/plain;base64,{data}"}}
    return {"model": "tiny", "max_tokens": 3, "messages": [{"role": "user", "content": [part]}]}


def test_models_answer_while_a_file_is_read_and_the_read_holds_its_place(served, monkeypatch):
    """A slow file (a PDF may take seconds) is read on a worker: /v1/models answers meanwhile, and
    the request holds its place in the queue while it is read (it was outside the queue limit)."""
    real, reading, go_on = extract.read_bytes, threading.Event(), threading.Event()

    def slow_read(name, data, mime):
        reading.set()
        go_on.wait(30)
        return real(name, data, mime)

    monkeypatch.setattr(extract, "read_bytes", slow_read)
    server = served(queue_limit=0)
    replies = []
    asking = threading.Thread(
        target=lambda: replies.append(httpx.post(server.url + "/chat/completions", json=with_file("a b c"), timeout=60))
    )
    asking.start()
    try:
        assert reading.wait(10), "the file was never read"
        models = httpx.get(server.url + "/models", timeout=5)
        assert models.status_code == 200 and models.json()["data"][0]["id"] == "tiny"
        error = error_of(httpx.post(server.url + "/chat/completions", json=HI, timeout=10), 429)
        assert error["code"] == "queue_full"
    finally:
        go_on.set()
        asking.join(60)
    assert replies and replies[0].status_code == 200, replies and replies[0].text


def test_bodies_are_parsed_off_the_event_loop_a_few_at_a_time(served, monkeypatch):
    """Parsing ran on the event loop: a large body stalled every other request. Now at most
    PARSING_AT_ONCE bodies are parsed at once, the rest wait their turn, and /v1/models answers."""
    real, go_on, lock = protocol.parse_chat, threading.Event(), threading.Lock()
    now, most = [0], [0]

    def slow_parse(body):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        go_on.wait(30)
        with lock:
            now[0] -= 1
        return real(body)

    monkeypatch.setattr(protocol, "parse_chat", slow_parse)
    count = PARSING_AT_ONCE + 2
    server = served(queue_limit=count)
    replies = []
    askers = [
        threading.Thread(
            target=lambda: replies.append(httpx.post(server.url + "/chat/completions", json=HI, timeout=60))
        )
        for _ in range(count)
    ]
    for t in askers:
        t.start()
    try:
        wait_until(lambda: server.app.state.answerer.in_flight == count, "every request admitted")
        wait_until(lambda: most[0] == PARSING_AT_ONCE, f"{PARSING_AT_ONCE} bodies parsed at once")
        assert httpx.get(server.url + "/models", timeout=5).status_code == 200
        assert most[0] == PARSING_AT_ONCE, "no more bodies are parsed at once"
    finally:
        go_on.set()
        for t in askers:
            t.join(60)
    assert [r.status_code for r in replies] == [200] * count
