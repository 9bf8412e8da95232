"""``response_format`` as a grammar (engine/grammar.py): none for text, any JSON object for
``json_object``, a schema's JSON for ``json_schema`` in OpenAI's nested shape (``json_schema.schema``)
or llama-server's top-level one (``schema`` beside ``type``, or a ``json_schema`` field of the request:
llama-server documents it, then runs unconstrained where the shape is not its own; here every shape is
honoured or refused). llama-server's ``grammar`` field, a GBNF grammar, is read here too. A problem is
a GrammarError whose words name it."""

from __future__ import annotations

import reprlib

from draftscope.engine.grammar import GrammarError, gbnf_grammar, json_grammar

KINDS = ("text", "json_object", "json_schema")


def grammar_of(fmt: object, schema: object) -> str | None:
    """The grammar ``response_format`` (``fmt``) and llama-server's ``json_schema`` field ask for."""
    if fmt is not None and not isinstance(fmt, dict):
        raise GrammarError("'response_format' must be an object")
    kind = (fmt or {}).get("type", "text" if schema is None else "json_schema")
    if kind not in KINDS:
        raise GrammarError(f"unknown response_format type {reprlib.repr(kind)} ({', '.join(KINDS)})")
    if kind == "text" and schema is None:
        return None
    if fmt is not None and kind != "text":
        nested = fmt.get("json_schema")
        schema = nested.get("schema") if isinstance(nested, dict) else fmt.get("schema", schema)
    if kind == "json_schema" and schema is None:
        raise GrammarError("a json_schema response_format needs its schema (json_schema.schema)")
    if schema is not None and not isinstance(schema, dict):
        raise GrammarError(f"a JSON schema is an object, not {type(schema).__name__}")
    return json_grammar(schema)


def gbnf_of(text: object, json: str | None) -> str | None:
    """The grammar llama-server's ``grammar`` field asks for ("" none); ``json``, the one response_format
    asked for: the answer can be held to one of them only."""
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise GrammarError("'grammar' must be a string: a GBNF grammar")
    if json is not None:
        raise GrammarError("'grammar' and a JSON response_format (or 'json_schema') both say what to write: send one")
    return gbnf_grammar(text)
