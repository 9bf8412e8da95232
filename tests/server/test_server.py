"""The OpenAI-compatible server through the official ``openai`` client: a live ``draftscope serve``
with the real default model (greedy text equals ``draftscope generate``, streamed and not; stop
sequences), and an in-process server on a tiny model for the mechanics (drafts in the extension
field, the history, bad keys, malformed bodies, the queue limit, a client that goes away)."""

import json
import subprocess
import sys
import threading
import time

import httpx2 as httpx  # what the openai client itself uses
import openai
import pytest
from engine_fixtures import tiny_llama
from runtime_helpers import runtime_for

from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import Engine
from draftscope.server import ServerConfig, ServerThread, check_bind, create_app
from draftscope.storage import HistoryStore

PROMPT = "Name three colours of the rainbow."


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- a live `draftscope serve`, real model


@pytest.fixture(scope="module")
def live():
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "draftscope",
            "serve",
            "--port",
            str(port),
            "--drafters",
            "context",
            "--max-new-tokens",
            "40",
            "--repetition-penalty",  # greedy text: the requests ask temperature 0, the penalty is the settings'
            "1",
            "--no-history",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"draftscope serve exited: {proc.stderr.read()[-3000:]}")
        try:
            if httpx.get(url + "/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("draftscope serve did not start listening")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def generate_cli(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "draftscope", "generate", PROMPT, "--drafters", "context", "--quiet-stats", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.endswith("\n")
    return done.stdout[:-1]


@pytest.mark.network
def test_greedy_text_through_the_server_equals_draftscope_generate(live):
    client = openai.OpenAI(base_url=live, api_key="unused")
    expected = generate_cli("--max-new-tokens", "40", "--temperature", "0", "--repetition-penalty", "1")
    assert len(expected) > 20
    reply = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=40
    )
    assert reply.choices[0].message.content == expected
    assert reply.usage.completion_tokens == reply.model_extra["draftscope"]["tokens"] <= 40
    stream = client.chat.completions.create(
        model="default", messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=40, stream=True
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert chunks[-1].model_extra["draftscope"]["stats"]["tau"] >= 1.0
    # Each step's chunk names its tokens and which were drafted (the context drafter's, or the target's).
    steps = [c.model_extra["draftscope"] for c in chunks[1:-1]]
    assert sum(len(s["tokens"]) for s in steps) == chunks[-1].model_extra["draftscope"]["stats"]["tokens"]
    assert all(t["drafted_by"] in (None, "context") for s in steps for t in s["tokens"])


@pytest.mark.network
def test_stop_sequences_end_the_answer_where_they_start(live):
    client = openai.OpenAI(base_url=live, api_key="unused")
    full = (
        client.chat.completions.create(
            model="default", messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=40
        )
        .choices[0]
        .message.content
    )
    stop = full[len(full) // 2 : len(full) // 2 + 4]
    cut = full[: full.find(stop)]
    reply = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=40,
        stop=[stop, "never appears"],
    )
    assert reply.choices[0].message.content == cut and reply.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=40,
        stop=stop,
        stream=True,
    )
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == cut, "no part of the stop sequence streamed"
    text = openai.OpenAI(base_url=live, api_key="unused").completions.create(
        model="default", prompt="The capital of France is", max_tokens=8, temperature=0
    )
    assert text.choices[0].text and text.object == "text_completion"


# ---------------------------------------------------------------- in process, tiny model


class SlowDrafter(ContextDrafter):
    """Context drafts, 30 ms a step: answers long enough to queue behind and to walk away from."""

    name = "context"

    def __init__(self, calls):
        super().__init__()
        self.calls = calls

    def propose(self, context_ids, budget):
        self.calls.append(time.monotonic())
        time.sleep(0.03)
        return super().propose(context_ids, budget)


@pytest.fixture
def served(tokenizer, tmp_path):
    def start(*, api_key=None, queue_limit=8, slow=False, history=True, on_request=None, max_body=None):
        engine = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer, name="tiny")
        engine.eos_ids = set()
        calls = []
        make = (lambda: [SlowDrafter(calls)]) if slow else (lambda: [ContextDrafter()])
        store = HistoryStore(tmp_path / "h.sqlite3") if history else None
        app = create_app(
            runtime_for(engine, max_new_tokens=30, drafters=make),
            history=store,
            config=ServerConfig(
                api_key=api_key,
                queue_limit=queue_limit,
                # the drafter is asked every step (the adaptive policy would rightly skip a slow one)
                budget=4 if slow else None,
                **({"max_body_bytes": max_body} if max_body else {}),
            ),
            on_request=on_request,
        )
        server = ServerThread(app, port=0).start()
        started.append(server)
        return server, store, calls

    started = []
    yield start
    for s in started:
        s.stop()


def test_each_request_is_logged_in_one_line(served):
    """When, who, what, the status, the answer's tokens and the seconds: a streamed answer's line is
    written once its last chunk is sent; a refused request is logged with its status."""
    import re

    lines = []
    server, _, _ = served(on_request=lines.append)
    client = openai.OpenAI(base_url=server.url, api_key="unused")
    client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=7)
    list(
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5, stream=True
        )
    )
    httpx.post(server.url + "/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d 127\.0\.0\.1:\d+ POST /v1/chat/completions"
    deadline = time.monotonic() + 5  # a line is written just after the response's last byte went out
    while len(lines) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(lines) == 3, lines
    assert re.fullmatch(stamp + r" 200 · 7 tokens · \d+\.\d\d s", lines[0]), lines[0]
    assert re.fullmatch(stamp + r" 200 · 5 tokens · \d+\.\d\d s", lines[1]), lines[1]
    assert re.fullmatch(stamp + r" 400 · \d+\.\d\d s", lines[2]), lines[2]


def test_models_chat_and_the_history(served):
    server, store, _ = served()
    client = openai.OpenAI(base_url=server.url, api_key="x")
    assert [m.id for m in client.models.list()] == ["tiny"]
    reply = client.chat.completions.create(
        model="tiny",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "one two three one two three"},
        ],
        max_tokens=12,
        seed=5,
    )
    assert reply.object == "chat.completion" and reply.usage.completion_tokens == 12
    assert reply.choices[0].finish_reason == "length"
    (conv,) = store.conversations()
    assert conv.title == "API · one two three one two three"
    user, answer = store.messages(conv.id)
    assert user.content == "one two three one two three" and answer.content == reply.choices[0].message.content
    assert len(store.steps(answer.id)) == answer.stats["steps"] > 0, "the panels can inspect it"


@pytest.mark.parametrize("learning", [True, False])
def test_answers_served_beside_the_window_are_learned(tokenizer, tmp_path, learning):
    """Settings ▸ Server serves over the window's runtime, which learns: served answers feed the
    model's learned datastore as the window's do (the next answer drafts from them); with learning
    switched off nothing is recorded."""
    from draftscope.core.runtime import Runtime
    from draftscope.drafters.learned import LearnedStore
    from draftscope.storage import Settings

    engine = Engine(tiny_llama(len(tokenizer), seed=3, sharpen=4.0), tokenizer, name="tiny")
    engine.eos_ids = set()
    store = LearnedStore("tiny", len(tokenizer), tmp_path / "learned")
    drafters = {"retrieval": False, "learned": learning, "context": True, "model": False, "recurrent": False}
    runtime = Runtime(Settings(drafters=drafters, max_new_tokens=10), engine, learned=store)
    runtime.start_learning()  # as the window does
    server = ServerThread(create_app(runtime, history=None), port=0).start()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="x")
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hello"}], max_tokens=10)
    finally:
        server.stop()
    runtime.close(timeout=10)  # waits for the learner to index what it was given
    assert store.stats().answers == (1 if learning else 0)


def test_a_bad_or_missing_key_is_401(served):
    server, _, _ = served(api_key="sesame")
    with pytest.raises(openai.AuthenticationError) as err:
        openai.OpenAI(base_url=server.url, api_key="wrong").models.list()
    assert err.value.body["code"] == "invalid_api_key"
    assert httpx.post(server.url + "/chat/completions", json={"messages": []}).status_code == 401
    ok = openai.OpenAI(base_url=server.url, api_key="sesame")
    assert ok.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3)


@pytest.mark.parametrize(
    "body, status, param",
    [
        (b"{not json", 400, None),
        (b"[1, 2]", 400, None),
        (json.dumps({"messages": "hi"}).encode(), 400, "messages"),
        (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode(), 400, "messages[0].role"),
        (json.dumps({"messages": [{"role": ["user"], "content": "x"}]}).encode(), 400, "messages[0].role"),  # was a 500
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}).encode(),
            400,
            "temperature",
        ),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": -3}).encode(), 400, "max_tokens"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "stop": ["a"] * 5}).encode(), 400, "stop"),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "n": 3}).encode(), 400, "n"),
        (
            json.dumps({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}).encode(),
            400,
            "messages[0].content[0].type",
        ),
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}).encode(),
            400,
            "tools[0].function",
        ),
        (json.dumps({"messages": [{"role": "user", "content": "x"}], "logprobs": 3}).encode(), 400, "logprobs"),
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}}).encode(),
            400,
            "response_format",
        ),
        (
            json.dumps({"messages": [{"role": "user", "content": "x"}], "presence_penalty": 0.5}).encode(),
            400,
            "presence_penalty",
        ),
    ],
)
def test_malformed_bodies_get_openai_shaped_errors(served, body, status, param):
    server, store, _ = served()
    r = httpx.post(server.url + "/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status
    error = r.json()["error"]
    assert error["message"] and error["type"] == "invalid_request_error" and error["param"] == param
    assert store.conversations() == [], "nothing was answered or stored"


def test_a_temperature_that_is_not_a_number_is_named_so(served):
    server, store, _ = served()
    body = b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}'
    r = httpx.post(server.url + "/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "'temperature' must be a finite number, got nan"


def test_serve_on_a_busy_port_fails_before_the_model_loads(monkeypatch, capsys):
    """The port is taken before anything loads: exit 2, the address and the way out named."""
    import socket

    import draftscope.commands.serve as serve_command
    from draftscope.cli import main

    monkeypatch.setattr(serve_command, "_serve_on", lambda *a: pytest.fail("the model was loaded"))
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        assert main(["serve", "--port", str(port)]) == 2
    finally:
        busy.close()
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in err and "--port" in err, err


def test_unknown_paths_and_methods_are_openai_shaped(served):
    server, _, _ = served()
    r = httpx.get(server.url + "/engines")
    assert r.status_code == 404 and "error" in r.json()
    r = httpx.get(server.url + "/chat/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_a_prompt_longer_than_the_context_is_a_400(served):
    server, _, _ = served()
    with pytest.raises(openai.BadRequestError) as err:
        openai.OpenAI(base_url=server.url, api_key="x").completions.create(
            model="tiny", prompt="word " * 2000, max_tokens=4
        )
    assert err.value.body["code"] == "context_length_exceeded"


def test_requests_queue_one_at_a_time_and_beyond_the_limit_get_429(served):
    server, _, calls = served(slow=True, queue_limit=1)
    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    results, errors = [], []

    def ask(i):
        try:
            results.append(
                client.chat.completions.create(
                    model="tiny", max_tokens=25, messages=[{"role": "user", "content": f"q{i}"}]
                )
            )
        except openai.RateLimitError as exc:
            errors.append(exc)

    first = threading.Thread(target=ask, args=(0,))
    first.start()
    while not calls:  # the first answer is running
        time.sleep(0.01)
    second = threading.Thread(target=ask, args=(1,))
    second.start()
    time.sleep(0.2)  # the second waits its turn
    ask(2)  # one too many
    first.join()
    second.join()
    assert len(results) == 2 and len(errors) == 1
    assert errors[0].status_code == 429 and errors[0].body["code"] == "queue_full"
    # One at a time: the second answer's steps all come after the first's.
    assert all(r.usage.completion_tokens == 25 for r in results)


def test_a_client_that_goes_away_cancels_its_answer_within_a_step(served):
    server, store, calls = served(slow=True)
    body = {"model": "tiny", "stream": True, "max_tokens": 30, "messages": [{"role": "user", "content": "go"}]}
    with httpx.stream("POST", server.url + "/chat/completions", json=body, timeout=30) as r:
        lines = r.iter_lines()
        for line in lines:
            if line.startswith("data: ") and '"draftscope"' in line:
                break  # one step arrived: walk away
    left_at = len(calls)
    time.sleep(0.6)  # 20 steps' time, were it still answering
    assert len(calls) <= left_at + 2, f"{len(calls) - left_at} steps after the client left"
    deadline = time.monotonic() + 5
    while not store.conversations() and time.monotonic() < deadline:
        time.sleep(0.05)
    (conv,) = store.conversations()
    answer = store.messages(conv.id)[-1]
    assert answer.stats["finish_reason"] == "cancel" and answer.stats["tokens"] < 30


def test_binding_beyond_this_machine_needs_a_key():
    check_bind("127.0.0.1", None)
    with pytest.raises(ValueError, match="API key"):
        check_bind("0.0.0.0", None)
    check_bind("0.0.0.0", "k")
    from draftscope.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--port", "1"]) == 2
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--port", "70000"])
    assert exit_.value.code == 2


def test_sampling_fields_reach_the_engine_seeded_answers_repeat(served):
    """Every sampling field a request names is the engine's (temperature, top_p, top_k, min_p, the
    repetition penalty and its window, the seed): a seeded sampled answer through the server (with
    the app's drafters) is plain decoding's in process with the same parameters, token for token; an
    unseeded answer names the seed it drew, which reproduces it."""
    from draftscope.engine.engine import GenerationRequest
    from draftscope.engine.sampling import SamplingParams

    server, _, _ = served(history=False)
    app_engine = server.app.state.answerer.runtime.engine
    client = openai.OpenAI(base_url=server.url, api_key="x")
    messages = [{"role": "user", "content": "one two three"}]
    texts = {}
    for seed in (1, 2):
        stream = client.chat.completions.create(
            model="tiny",
            messages=messages,
            temperature=0.8,
            top_p=0.9,
            seed=seed,
            max_tokens=12,
            stream=True,
            # llama-server's and vLLM's fields
            extra_body={"top_k": 6, "min_p": 0.6, "repetition_penalty": 1.3, "repetition_window": 8},
        )
        ids = [t["id"] for c in stream for t in (c.model_extra or {}).get("draftscope", {}).get("tokens", [])]
        request = GenerationRequest(
            prompt_ids=app_engine.encode_chat(messages),
            max_new_tokens=12,
            sampling=SamplingParams(
                temperature=0.8, top_k=6, top_p=0.9, seed=seed, min_p=0.6, repetition_penalty=1.3, repetition_window=8
            ),
        )
        expected = list(app_engine.generate(request))[-1].token_ids
        assert ids == expected, seed
        texts[seed] = ids
    assert texts[1] != texts[2], "the seed is used"
    drawn = client.chat.completions.create(model="tiny", messages=messages, temperature=1.0, max_tokens=12)
    seed = drawn.model_extra["draftscope"]["seed"]
    assert isinstance(seed, int)
    again = client.chat.completions.create(model="tiny", messages=messages, temperature=1.0, max_tokens=12, seed=seed)
    assert again.choices[0].message.content == drawn.choices[0].message.content
    assert again.model_extra["draftscope"]["seed"] == seed


def test_a_client_that_leaves_while_waiting_its_turn_is_never_answered(served):
    server, store, calls = served(slow=True, queue_limit=2)
    client = openai.OpenAI(base_url=server.url, api_key="x", max_retries=0)
    first = threading.Thread(
        target=lambda: client.chat.completions.create(
            model="tiny", max_tokens=20, messages=[{"role": "user", "content": "first"}]
        )
    )
    first.start()
    while not calls:
        time.sleep(0.01)
    body = {"model": "tiny", "stream": True, "max_tokens": 20, "messages": [{"role": "user", "content": "second"}]}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/chat/completions", json=body, timeout=0.2)  # gives up while queued
    first.join()
    time.sleep(0.5)
    titles = [c.title for c in store.conversations()]
    assert titles == ["API · first"], "the second request never ran"


def test_a_follow_up_reads_only_what_is_new_and_says_how_much_was_cached(served):
    """Clients resend the whole conversation: the model's cache of the turns before is kept, and
    usage.prompt_tokens_details.cached_tokens says how much of the prompt came from it;
    llama-server's ``cache_prompt: false`` reads it all again."""
    server, _, _ = served(history=False)
    client = openai.OpenAI(base_url=server.url, api_key="unused")
    chat = [{"role": "user", "content": "red green blue red green blue"}]
    first = client.chat.completions.create(model="tiny", messages=chat, max_tokens=8, temperature=0)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    chat += [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "and then?"},
    ]
    second = client.chat.completions.create(model="tiny", messages=chat, max_tokens=8, temperature=0)
    cached = second.usage.prompt_tokens_details.cached_tokens
    # at least the first turn's prompt (a random model's answer may re-tokenise otherwise from its text)
    assert first.usage.prompt_tokens <= cached < second.usage.prompt_tokens
    assert second.model_extra["draftscope"]["prompt_tokens_read"] == second.usage.prompt_tokens - cached
    whole = client.chat.completions.create(
        model="tiny", messages=chat, max_tokens=8, temperature=0, extra_body={"cache_prompt": False}
    )
    assert whole.usage.prompt_tokens_details.cached_tokens == 0
    assert whole.choices[0].message.content == second.choices[0].message.content
    streamed = list(
        client.chat.completions.create(
            model="tiny",
            messages=chat,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert streamed[-1].usage.prompt_tokens_details.cached_tokens == second.usage.prompt_tokens - 1
    with pytest.raises(openai.BadRequestError, match="cache_prompt"):
        client.chat.completions.create(model="tiny", messages=chat, max_tokens=8, extra_body={"cache_prompt": "yes"})


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens", "seed", "n", "temperature"])
def test_an_integer_of_hundreds_of_digits_is_a_400_naming_its_field(served, field):
    """It was a 500 (OverflowError: the finiteness check turned it into a float)."""
    server, _, _ = served(history=False)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], field: 10**300}
    reply = httpx.post(server.url + "/chat/completions", json=body, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == field and field in error["message"] and len(error["message"]) < 200


def test_a_2_gb_content_length_gets_413_without_the_body_being_read(served):
    """The server read any body whole: a 400 MB POST grew it to 1.25 GB before its 400."""
    import socket
    from urllib.parse import urlparse

    server, _, _ = served(history=False)
    where = urlparse(server.url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 2000000000\r\n\r\n{"model": '
        )
        reply = b""  # answered with 1.999 GB still unsent; the headers and the body may come apart
        while not reply.rstrip().endswith(b"}") and (chunk := sock.recv(65536)):
            reply += chunk
        reply = reply.decode(errors="replace")
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert "2,000,000,000 bytes" in reply and "--max-body-mb" in reply


def test_a_streamed_body_is_cut_off_with_413_once_it_passes_the_limit(served):
    server, _, _ = served(history=False, max_body=4096)

    def chunks():  # no Content-Length: chunked, as a client streaming a body sends it
        for _ in range(8):
            yield b" " * 1024

    reply = httpx.post(
        server.url + "/chat/completions", content=chunks(), headers={"content-type": "application/json"}, timeout=30
    )
    assert reply.status_code == 413 and "at most 4,096 bytes" in reply.json()["error"]["message"]
    small = httpx.post(
        server.url + "/chat/completions",
        timeout=60,
        json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
    )
    assert small.status_code == 200, "a body within the limit is answered"


def test_the_port_is_listening_from_the_moment_it_is_bound():
    """Bound but not listening while the model loaded, the port could be bound again by another
    server with SO_REUSEADDR, and ours failed after loading."""
    import errno
    import socket

    from draftscope.server import listening_socket

    ours = listening_socket("127.0.0.1", 0)
    try:
        port = ours.getsockname()[1]
        other = socket.socket()
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        with pytest.raises(OSError) as taken:
            other.bind(("127.0.0.1", port))
        other.close()
        assert taken.value.errno == errno.EADDRINUSE
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # a client that comes while the model loads waits in the backlog, not refused
    finally:
        ours.close()


def test_localhost_listens_on_ipv4_where_the_hosts_file_lists_ipv6_first(monkeypatch):
    import socket

    from draftscope.server import listening_socket

    real = socket.getaddrinfo

    def ipv6_first(host, port, *args, **kwargs):
        if host != "localhost":
            return real(host, port, *args, **kwargs)
        return [
            (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", port, 0, 0)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", ipv6_first)
    sock = listening_socket("localhost", 0)
    try:
        assert sock.family == socket.AF_INET and sock.getsockname()[0] == "127.0.0.1"
    finally:
        sock.close()
