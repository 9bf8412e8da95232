"""Fuzz runs (issue 49), with hypothesis and a bounded number of examples: request bodies for the
server — parsed, and posted to a live in-process server — never give a 500 or kill it; damaged GGUF
files give an error in words from the header read and from the whole check (llama.cpp's load in a
child), never a death of this process."""

from __future__ import annotations

import json

import httpx2 as httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draftscope.rules import SAMPLING_FIELDS, SamplingParams
from draftscope.server.protocol import ApiError, parse_chat, parse_completion

FUZZ = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
    database=None,
)  # the same examples on every run: a failure in CI is one here


def fuzz(examples: int) -> settings:
    return settings(FUZZ, max_examples=examples)


# JSON values, numbers at their edges included (hundreds of digits, NaN, infinities, -0.0)
NUMBERS = (
    st.integers()
    | st.integers(min_value=10**300, max_value=10**400)
    | st.integers(max_value=-(10**300))
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, -1, 1 << 20, 2**63, -0.0, 1e308])
)
SCALARS = st.none() | st.booleans() | NUMBERS | st.text(max_size=20)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
# Bodies of the right shape most of the time, so that examples get past the first checks to the
# numbers' (a wrong shape anywhere is refused at once); any JSON value some of the time.


def mostly(usual, rare):
    """``usual`` three times in four, ``rare`` the rest."""
    return st.sampled_from([usual, usual, usual, rare]).flatmap(lambda strategy: strategy)


ROLE_AND_TEXT = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "developer"]), "content": st.text(max_size=30)}
)
MESSAGE = mostly(ROLE_AND_TEXT, st.fixed_dictionaries({"role": JSON, "content": JSON}))
MESSAGES = st.lists(MESSAGE, min_size=1, max_size=3)
NUMBER_FIELDS = (*SAMPLING_FIELDS, "seed", "max_tokens", "max_completion_tokens", "n")
FIELDS = {name: mostly(NUMBERS, JSON) for name in NUMBER_FIELDS}
FIELDS |= {
    "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=6) | JSON,
    "stream": st.booleans() | JSON,
    "stream_options": st.fixed_dictionaries({"include_usage": JSON}) | JSON,
    "model": st.text(max_size=10) | JSON,
    "cache_prompt": st.booleans() | JSON,
}
CHAT = st.fixed_dictionaries({"messages": mostly(MESSAGES, JSON)}, optional=FIELDS)
PROMPT = st.text(min_size=1, max_size=30)
COMPLETION = st.fixed_dictionaries({"prompt": mostly(PROMPT, JSON)}, optional=FIELDS)


def parsed_or_refused(parse, body) -> None:
    try:
        request = parse(body)
    except ApiError as exc:
        assert exc.status == 400 and exc.message, exc.message
        return
    sampling = request.sampling
    SamplingParams(**sampling.overrides)  # what the server let through, the engine takes
    assert sampling.max_tokens is None or 0 <= sampling.max_tokens <= 1 << 20  # 0: read the prompt only


@fuzz(400)
@given(body=mostly(CHAT, JSON))
def test_a_chat_body_is_parsed_or_refused_with_a_400(body):
    parsed_or_refused(parse_chat, body)


@fuzz(200)
@given(body=mostly(COMPLETION, JSON))
def test_a_completion_body_is_parsed_or_refused_with_a_400(body):
    parsed_or_refused(parse_completion, body)


def encoded(body) -> bytes:
    return json.dumps(body, allow_nan=True).encode()


BODIES = mostly(
    CHAT.map(encoded) | COMPLETION.map(encoded),
    JSON.map(encoded) | st.binary(max_size=64) | st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),
)


@pytest.fixture
def server(tokenizer):
    """An in-process server on a tiny model, answers cut at 8 tokens."""
    from engine_fixtures import tiny_llama
    from runtime_helpers import runtime_for

    from draftscope.drafters import ContextDrafter
    from draftscope.engine.engine import Engine
    from draftscope.server import ServerConfig, ServerThread, create_app

    engine = Engine(tiny_llama(len(tokenizer), seed=3), tokenizer, name="tiny")
    app = create_app(
        runtime_for(engine, max_new_tokens=8, drafters=lambda: [ContextDrafter()]), history=None, config=ServerConfig()
    )
    running = ServerThread(app, port=0).start()
    yield running
    running.stop()


def test_a_live_server_answers_fuzzed_bodies_without_a_500(server):
    seen = set()

    @fuzz(60)
    @given(body=BODIES, path=st.sampled_from(["/chat/completions", "/completions"]))
    def post(body, path):
        r = httpx.post(server.url + path, content=body, headers={"content-type": "application/json"}, timeout=60)
        seen.add(r.status_code)
        assert r.status_code < 500, (r.status_code, r.text[:300])
        if r.status_code != 200:
            assert r.json()["error"]["message"]

    post()
    assert httpx.get(server.url + "/models").status_code == 200, "the server outlived every body"
    assert {200, 400} <= seen, seen  # some bodies were answered: the fuzz reached the engine


# ---------------------------------------------------------------------------------- GGUF files


@pytest.fixture(scope="module")
def good_gguf(tmp_path_factory):
    from draftscope.engine.backends.llama.gguf_writer import random_llama

    return random_llama(tmp_path_factory.mktemp("gguf-fuzz") / "good.gguf")


def damage(data: bytes, header_end: int):
    """Bytes set in the header and tensor table (where parsers trip), and perhaps the file cut short."""
    flips = st.lists(st.tuples(st.integers(4, header_end - 1), st.integers(0, 255)), min_size=1, max_size=8)
    cut = st.none() | st.integers(0, len(data))

    def apply(args) -> bytes:
        changes, at = args
        out = bytearray(data)
        for offset, value in changes:
            out[offset] = value
        return bytes(out[:at] if at is not None else out)

    return st.tuples(flips, cut).map(apply)


def header_end(data: bytes) -> int:
    return data.index(b"blk.0.attn_norm.weight") + 400  # metadata and the start of the tensor table


def test_the_header_read_names_what_is_wrong_with_any_damaged_file(good_gguf, tmp_path):
    from draftscope.engine.backends.llama.gguf_check import GGUFError, read_header

    data = good_gguf.read_bytes()
    counter = iter(range(10**6))

    @fuzz(300)
    @given(damaged=damage(data, header_end(data)))
    def read(damaged):
        path = tmp_path / f"h{next(counter)}.gguf"  # a new name each time: the reader is cached per file
        path.write_bytes(damaged)
        try:
            read_header(path)
        except GGUFError as exc:
            assert path.name in str(exc) or "GGUF" in str(exc), str(exc)
        finally:
            path.unlink()

    read()


def test_the_whole_check_refuses_or_passes_damaged_files_and_this_process_lives(good_gguf, tmp_path, monkeypatch):
    """llama.cpp's own load, in the check's child: a file it would crash on is refused in words."""
    from llama_helpers import need_llama_cpp

    need_llama_cpp()
    from draftscope.engine.backends.llama import gguf_check

    monkeypatch.setenv("DRAFTSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    data = good_gguf.read_bytes()
    counter = iter(range(10**6))

    @fuzz(12)
    @given(damaged=damage(data, header_end(data)))
    def check(damaged):
        path = tmp_path / f"c{next(counter)}.gguf"
        path.write_bytes(damaged)
        try:
            gguf_check.check(path, timeout=120)
        except gguf_check.GGUFError as exc:
            assert any(c.isalpha() for c in str(exc)), repr(exc)

    check()
