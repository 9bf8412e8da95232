"""The OpenAI wire format, as far as Draftscope serves it: request bodies checked field by field (an error
names the field, with OpenAI's status and shape). What the server sends back: ``server/responses.py``."""

from __future__ import annotations

import base64
import binascii
import math
import reprlib
from dataclasses import dataclass, field

import draftscope.server.request_fields as request_fields
from draftscope.core.tools import ToolError, ToolRequest, message_tool_fields, tool_request
from draftscope.engine.grammar import GrammarError
from draftscope.rules import SAMPLING_FIELDS, SamplingField
from draftscope.server.logprob_fields import LogprobsFieldError, requested
from draftscope.server.response_format import gbnf_of, grammar_of

MAX_STOP = 4  # OpenAI accepts up to four stop sequences
MAX_TOKENS_LIMIT = 1 << 20
# a request body beyond this is refused (413) before it is read (draftscope serve --max-body-mb): room for
# the largest file a message may carry (documents.extract.MAX_FILE_BYTES), base64 and all
MAX_BODY_BYTES = 48 << 20


class ApiError(Exception):
    """An error answered in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, message, param=param, code="invalid_value")


@dataclass
class Sampling:
    # the SamplingParams fields the request set, by their names (seed included): the rest are the
    # settings' (or the model's) values
    overrides: dict[str, float] = field(default_factory=dict)
    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    cache_prompt: bool = True  # llama-server's field: false reads the whole prompt again, keeping nothing
    grammar: str | None = None  # response_format's JSON or a GBNF (engine/grammar.py): every token keeps it valid
    logprobs: int | None = None  # alternatives listed with each token's logprob (server/logprob_fields.py); None: off
    n: int = 1  # answers to write, each with its own seed (server/choices.py checks it against the server's places)


@dataclass
class ChatRequest:
    messages: list[dict]
    stream: bool = False
    include_usage: bool = False
    sampling: Sampling = field(default_factory=Sampling)
    model: str | None = None
    tools: ToolRequest | None = None  # core/tools.py: the tools it offers, what it asks of them


@dataclass
class CompletionRequest:
    prompt: str
    stream: bool = False
    include_usage: bool = False
    sampling: Sampling = field(default_factory=Sampling)
    model: str | None = None
    suffix: str = ""  # fill-in-the-middle: the code after the cursor ("" none), ``prompt`` the code before it


def _number(body: dict, name: str, lo: float, hi: float, *, integer: bool = False):
    value = body.get(name)
    if value is None:
        return None
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise _bad(name, f"'{name}' must be {'an integer' if integer else 'a number'}, got {_quoted(value)}")
    # NaN fails every comparison: "between -inf and inf" would say nothing. (An int is finite, and
    # isfinite would overflow on one of hundreds of digits.)
    if isinstance(value, float) and not math.isfinite(value):
        raise _bad(name, f"'{name}' must be a finite number, got {value!r}")
    if not lo <= value <= hi:
        raise _bad(name, f"'{name}' must be between {lo} and {hi}, got {_short(value)}")
    return value


def _short(value) -> str:
    """A value as an error quotes it: an integer of hundreds of digits by its length."""
    text = repr(value)
    return text if len(text) <= 40 else f"a number of {len(text)} digits"


def _quoted(value) -> str:
    """Any JSON value as an error quotes it, a few of its items and characters at most: quoted
    whole, a list of a million items would make an error of megabytes."""
    return _short(value) if isinstance(value, int) else reprlib.repr(value)


def _declared(body: dict, name: str, declared: SamplingField):
    """A SamplingParams field within its range (the server's, where narrower: OpenAI's temperature);
    vLLM's top_k -1 is off, as the app's 0 is."""
    value = _number(body, name, float("-inf"), float("inf"), integer=declared.whole)
    if name == "top_k" and value == -1:
        value = 0
    allowed = declared.server_range or declared.range
    if value is not None and not allowed.holds(value):
        raise _bad(name, f"'{name}' must be {allowed.words()}, got {_short(value)}")
    return value


def _sampling_fields(body: dict) -> dict:
    """Every SamplingParams field the request names (llama-server's and vLLM's beyond OpenAI's:
    top_k, min_p, repetition_penalty...), and its seed: any 64-bit integer, as OpenAI's."""
    given = {name: _declared(body, name, declared) for name, declared in SAMPLING_FIELDS.items()}
    given["seed"] = _number(body, "seed", -(2**63), 2**63 - 1, integer=True)
    return {name: value for name, value in given.items() if value is not None}


def _refuse_unsupported(body: dict) -> None:
    """A field Draftscope does not serve, set: a 400 naming it (server/request_fields.py has every field's fate)."""
    name = request_fields.refused(body)
    if name is not None:
        instead = request_fields.INSTEAD.get(name)
        raise ApiError(
            400,
            f"'{name}' is not supported by Draftscope's server" + (f" ({instead})" if instead else ""),
            param=name,
            code="unsupported_parameter",
        )


def _sampling(body: dict) -> Sampling:
    _refuse_unsupported(body)
    body, clash = request_fields.with_our_names(body)  # llama-server's repeat_penalty is our repetition_penalty
    if clash is not None:
        ours = request_fields.ALIASES[clash]
        raise _bad(clash, f"'{clash}' and '{ours}' name one setting with two values: send one")
    stop = body.get("stop")
    if stop is None:
        stops = []
    elif isinstance(stop, str):
        stops = [stop]
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = list(stop)
    else:
        raise _bad("stop", "'stop' must be a string or a list of strings")
    if len(stops) > MAX_STOP:
        raise _bad("stop", f"'stop' takes at most {MAX_STOP} sequences, got {len(stops)}")
    if any(s == "" for s in stops):
        raise _bad("stop", "'stop' sequences must not be empty")
    max_tokens = _max_tokens(body)
    n = _number(body, "n", 1, 128, integer=True)
    cache_prompt = body.get("cache_prompt", True)
    if not isinstance(cache_prompt, bool):
        raise _bad("cache_prompt", "'cache_prompt' must be true or false")
    return Sampling(
        overrides=_sampling_fields(body),
        max_tokens=max_tokens,
        stop=stops,
        cache_prompt=cache_prompt,
        grammar=_grammar(body),
        n=n or 1,
    )


def _grammar(body: dict) -> str | None:
    """``response_format``'s grammar or the GBNF ``grammar`` (server/response_format.py): a problem is a 400
    naming the field."""
    try:
        json = grammar_of(body.get("response_format"), body.get("json_schema"))
    except GrammarError as exc:
        raise _bad("response_format", str(exc)) from exc
    try:
        return gbnf_of(body.get("grammar"), json) or json
    except GrammarError as exc:
        raise _bad("grammar", str(exc)) from exc


def _max_tokens(body: dict) -> int | None:
    """The answer's length limit: ``max_completion_tokens``, ``max_tokens`` or llama-server's
    ``n_predict``. 0 reads the prompt into the cache and writes nothing (llama-server's pre-encode):
    a client warms a conversation while its user types, and the next request reads only what is new."""
    if body.get("n_predict") == -1:  # llama-server's "no limit": the settings' length, as if left out
        body = {k: v for k, v in body.items() if k != "n_predict"}
    for name in ("max_completion_tokens", "max_tokens", "n_predict"):
        value = _number(body, name, 0, MAX_TOKENS_LIMIT, integer=True)
        if value is not None:
            return value
    return None


def _stream_flags(body: dict) -> tuple[bool, bool]:
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise _bad("stream", "'stream' must be true or false")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise _bad("stream_options", "'stream_options' must be an object")
    return bool(stream), bool(options.get("include_usage"))


def _model(body: dict) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad("model", "'model' must be a string")
    return model


@dataclass(frozen=True)
class FilePart:
    """A file sent in a message's content (OpenAI's ``{"type": "file"}`` part), not yet read."""

    filename: str
    data: bytes
    mime: str | None
    param: str  # where it was in the request, for errors about it


def _content(message: dict, i: int) -> tuple[str, list[FilePart]]:
    """A message's text and its files: a string, or OpenAI's content parts (text and file)."""
    content = message.get("content")
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        raise _bad(f"messages[{i}].content", "'content' must be a string or a list of content parts")
    texts, files = [], []
    for j, part in enumerate(content):
        where = f"messages[{i}].content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "file":
            files.append(_file_part(part.get("file"), where))
        elif isinstance(kind, str) and kind != "text":
            raise ApiError(
                400,
                f"content parts of type '{_short_text(kind)}' are not supported (text and file are)",
                param=f"{where}.type",
                code="unsupported_content_type",
            )
        else:
            raise _bad(where, "each content part must be an object with a 'type': text (with 'text') or file")
    return "".join(texts), files


def _file_part(file, where: str) -> FilePart:
    """``{"filename": ..., "file_data": "data:MIME;base64,..."}``, decoded (the body's size limit has
    already bounded it)."""
    if not isinstance(file, dict):
        raise _bad(f"{where}.file", "a file part needs a 'file' object with 'filename' and 'file_data'")
    if file.get("file_id") is not None:
        raise ApiError(
            400,
            "'file_id' is not supported: send the file itself as 'file_data' (a data: URL)",
            param=f"{where}.file.file_id",
            code="unsupported_parameter",
        )
    name, data = file.get("filename"), file.get("file_data")
    if not isinstance(name, str) or not name.strip():
        raise _bad(f"{where}.file.filename", "a file part needs its 'filename' (a non-empty string)")
    if not isinstance(data, str):
        raise _bad(f"{where}.file.file_data", "'file_data' must be a string: data:MIME;base64,...")
    mime = None
    if data.startswith("data:"):
        header, _, data = data.partition(",")
        if not header.endswith(";base64"):
            raise _bad(f"{where}.file.file_data", "'file_data' must be base64: data:MIME;base64,...")
        mime = header[5:].removesuffix(";base64") or None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise _bad(f"{where}.file.file_data", f"'file_data' is not valid base64: {exc}") from exc
    return FilePart(name.strip(), raw, mime, f"{where}.file")


def _short_text(text: str) -> str:
    return text if len(text) <= 40 else text[:39] + "…"


ROLES = {"system", "developer", "user", "assistant", "tool", "function"}


def parse_chat(body) -> ChatRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _bad(f"messages[{i}]", "each message must be an object")
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:  # a list or an object is no role (nor hashable)
            raise _bad(f"messages[{i}].role", f"unsupported role {_quoted(role)} (one of {', '.join(sorted(ROLES))})")
        text, files = _content(m, i)
        if files and role != "user":
            raise _bad(f"messages[{i}].content", "files can be sent in user messages only")
        calls = _tool_part(message_tool_fields, m, i, role)  # an assistant's tool_calls, a result's call id
        role = {"developer": "system", "function": "tool"}.get(role, role)
        out.append({"role": role, "content": text, "files": files, **calls})
    if body.get("suffix"):  # completions' field: a chat would answer as if it were not there
        raise _bad("suffix", "'suffix' (fill-in-the-middle) is served on /v1/completions, not in a chat")
    stream, usage = _stream_flags(body)
    tools = _tool_part(tool_request, body)
    return ChatRequest(out, stream, usage, _with_logprobs(_sampling(body), body, chat=True), _model(body), tools)


def _tool_part(read, *args):
    """``read(*args)`` (core/tools.py), its ToolError a 400 naming the field."""
    try:
        return read(*args)
    except ToolError as exc:
        raise _bad(exc.param, str(exc)) from exc


def parse_completion(body) -> CompletionRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if _tool_part(tool_request, body) is not None:  # a plain completion has no conversation to call in
        raise _bad("tools", "tools are served on /v1/chat/completions, not on /v1/completions")
    suffix = _suffix(body)
    if not isinstance(prompt, str) or not (prompt or suffix):  # a middle may begin a file: no prefix
        raise _bad("prompt", "'prompt' must be a non-empty string")
    stream, usage = _stream_flags(body)
    sampling = _with_logprobs(_sampling(body), body, chat=False)
    return CompletionRequest(prompt, stream, usage, sampling, _model(body), suffix)


def _with_logprobs(sampling: Sampling, body: dict, *, chat: bool) -> Sampling:
    """``sampling`` with the logprobs the request asks for (chat's and the legacy completions' fields differ)."""
    try:
        sampling.logprobs = requested(body, chat=chat)
    except LogprobsFieldError as exc:
        raise _bad(exc.param, str(exc)) from exc
    return sampling


def _suffix(body: dict) -> str:
    """Fill-in-the-middle's code after the cursor (server/asgi.py makes the model's FIM prompt of it)."""
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise _bad("suffix", "'suffix' must be a string")
    return suffix or ""
