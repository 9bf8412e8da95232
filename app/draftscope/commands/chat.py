"""``draftscope chat`` (terminal chat, streaming, tau and tokens/s after each answer) and
``draftscope generate`` (one prompt)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from draftscope.commands.model_options import add_model_arguments, runtime_from_args
from draftscope.commands.tool_loop import converse
from draftscope.commands.tool_options import add_tool_arguments, calls_json, fit_tools, read_tool_options

SCHEMA_HELP = "answers are JSON this JSON schema accepts (every token held to it; '{}' in the file: any JSON object)"
SUFFIX_HELP = (
    "fill in the middle: the code after the cursor (the prompt is the code before it); a code model with "
    "fill-in-the-middle tokens writes what goes between"
)
ATTACH_HELP = (
    "a file for the model to read with the {} (text, Markdown, source code, HTML, PDF, DOCX); repeat for several"
)


def add_parser(sub) -> None:
    chat = sub.add_parser("chat", help="chat in the terminal")
    add_model_arguments(chat)
    chat.add_argument("--attach", action="append", default=[], metavar="FILE", help=ATTACH_HELP.format("first message"))
    chat.add_argument("--documents", default=None, metavar="DIR", help=DOCUMENTS_HELP)
    chat.add_argument("--json-schema", default=None, metavar="FILE", help=SCHEMA_HELP)
    add_tool_arguments(chat)
    chat.set_defaults(func=cmd_chat)
    gen = sub.add_parser("generate", help="answer one prompt")
    gen.add_argument("prompt")
    add_model_arguments(gen)
    gen.add_argument("--attach", action="append", default=[], metavar="FILE", help=ATTACH_HELP.format("prompt"))
    gen.add_argument("--json-schema", default=None, metavar="FILE", help=SCHEMA_HELP)
    add_tool_arguments(gen, generate=True)
    gen.add_argument("--suffix", default=None, metavar="TEXT", help=SUFFIX_HELP)
    gen.add_argument("--quiet-stats", action="store_true", help="do not print statistics to stderr")
    gen.set_defaults(func=cmd_generate)


def _answer(session, args, out=None):
    """The session's next answer, streamed to ``out``; Ctrl-C stops it (the answer so far stays)."""
    out = out or sys.stdout  # looked up per call: sys.stdout may be replaced after import
    cancel = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: cancel.set())

    tools = getattr(args, "tool_turns", None)  # core/tool_turns.py: calls are shown apart from the text

    def show(ev):
        text = "".join(ev.pieces)
        out.write(text if tools is None else tools.said(text))
        out.flush()

    session.events.step.connect(show)  # the terminal is a view of the session's steps
    request = session.request(budget=args.budget, cancel=cancel, prompt_ids=getattr(args, "prompt_ids", None))
    request.grammar = getattr(args, "grammar", None)
    if tools is not None:
        tools.prepare(request)
    try:
        final = session.run(request)
        out.write(tools.finish() if tools is not None else "")
        return final
    finally:
        session.events.step.disconnect(show)
        signal.signal(signal.SIGINT, previous)


def _stats_line(final) -> str:
    from draftscope.core.session import answer_record
    from draftscope.core.words import answer_stats

    stats = answer_record(final, None)[0]
    stats.pop("finish_reason")  # said last, in the engine's word, which scripts read
    return f"[{answer_stats(stats, tau='tau')} · {final.finish_reason}]"


DOCUMENTS_HELP = (
    "a folder of documents the answers search (indexed once, kept up to date while running): its "
    "passages that best answer each message go into the prompt"
)


def open_documents(runtime, folder: str | None):
    """Index ``folder`` for the runtime's answers (progress on the terminal) and keep it up to date;
    the watcher, or None without a folder. ValueError: not a folder."""
    if not folder:
        return None
    from draftscope.documents.folder import Watcher, open_folder, said_skipped

    def progress(done: int, total: int, name: str) -> None:
        if name:
            print(f"\rindexing {folder}: {done:,} of {total:,} files · {name[-50:]:<50}", end="", file=sys.stderr)

    index, report = open_folder(folder, progress)
    print(
        f"\r{folder}: {report.files:,} documents indexed"
        + (f"; {len(report.problems)} could not be read (first: {report.problems[0]})" if report.problems else "")
        + (f"; {said_skipped(report)}" if report.skipped else "")
        + " " * 30,
        file=sys.stderr,
    )
    runtime.documents = index
    return Watcher(index, on_error=lambda said: print(f"draftscope: {said}", file=sys.stderr, flush=True))


def read_attachments(paths) -> list:
    """The files named, read to text (AttachmentError, naming the file, for one that cannot be)."""
    from draftscope.documents.extract import read_file

    return [read_file(path) for path in paths]


def _say_with(session, text: str, files: list) -> None:
    """A message and its files, as the model will read them (ValueError: they cannot fit)."""
    sent = session.attach(text, files)
    for f in sent:
        how = f.left_out or ("whole" if f.whole else f"{len(f.passages)} passages ({', '.join(f.passages)})")
        print(f"[{f.name}: {f.tokens:,} tokens, {how}]", file=sys.stderr)
    session.say(text, files=sent)


def read_schema(path: str | None) -> str | None:
    """``--json-schema``'s grammar, read and compiled before the model loads (a bad file is said at once)."""
    from draftscope.engine.grammar import GrammarError, json_grammar

    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            schema = json.load(f)
    except (OSError, ValueError) as exc:
        raise GrammarError(f"--json-schema {path}: {exc}") from exc
    try:
        return json_grammar(schema or None)
    except GrammarError as exc:
        raise GrammarError(f"--json-schema {path}: {exc}") from exc


def cmd_generate(args: argparse.Namespace) -> int:
    from draftscope.core.session import ChatSession
    from draftscope.documents.extract import AttachmentError

    try:
        if args.suffix and args.attach:  # a FIM prompt is the code around the cursor: no room for files
            raise ValueError("--suffix fills in a middle from the prompt and the suffix alone: no --attach")
        files = read_attachments(args.attach)  # before the model loads: a bad file is said at once
        args.grammar = read_schema(args.json_schema)
        if args.suffix and (args.tools or args.mcp):  # the FIM prompt has no chat template to show them
            raise ValueError("--suffix fills in a middle from the prompt and the suffix alone: no --tools or --mcp")
        offered = read_tool_options(args)  # MCP servers start before the model loads: their failures said first
    except (AttachmentError, ValueError) as exc:
        print(f"draftscope: {exc}", file=sys.stderr)
        return 2
    try:
        runtime = runtime_from_args(args)
        try:
            return _generate_with(ChatSession(runtime), args, files)
        finally:
            runtime.unload()  # the engine closes: the conversation's cache is saved for the next run
    finally:
        if offered is not None:
            offered.close()  # the MCP servers' processes end with the command


def _generate_with(session, args: argparse.Namespace, files: list) -> int:
    try:
        turns = fit_tools(args, session)  # a template without tools is said before answering
        _say_with(session, args.prompt, files)
        if args.suffix:  # the model's FIM prompt instead of the chat's
            args.prompt_ids = _fim_prompt(session.engine, args.prompt, args.suffix)
    except ValueError as exc:
        print(f"draftscope: {exc}", file=sys.stderr)
        return 2
    final = _answer(session, args)
    if turns is not None and args.tools_offered.runs:  # MCP tools: run (if approved), the model answers on
        finals = [final]
        converse(turns, final, lambda: _answer_on(session, args, finals), how="refuse")
        final = finals[-1]
        print()
    else:
        print(calls_json(turns, turns.after_answer() if turns is not None else []))  # a JSON line each
    if final.finish_reason == "error":
        print(f"draftscope: {final.error}", file=sys.stderr)
        return 1
    if not args.quiet_stats:
        print(_stats_line(final), file=sys.stderr)
    return 0


def _answer_on(session, args: argparse.Namespace, finals: list):
    """``generate``'s next answer after tool results, its prose on a line of its own."""
    said = args.tool_turns.reader.content if args.tool_turns.reader is not None else ""
    if said and not said.endswith("\n"):
        print()
    finals.append(_answer(session, args))
    return finals[-1] if finals[-1].finish_reason != "error" else None


def _fim_prompt(engine, before: str, after: str) -> list[int]:
    """``--suffix``: the model's fill-in-the-middle prompt (ValueError, in words, for a model without one)."""
    from draftscope.models.fim_tokens import fim_tokens, gguf_file

    return fim_tokens(engine.tokenizer, gguf_file(engine.backend.source)).prompt(engine.tokenizer, before, after)


def cmd_chat(args: argparse.Namespace) -> int:
    from draftscope.core.session import ChatSession
    from draftscope.documents.extract import AttachmentError

    try:
        files = read_attachments(args.attach)
        args.grammar = read_schema(args.json_schema)
        offered = read_tool_options(args)  # MCP servers start before the model loads: their failures said first
    except (AttachmentError, ValueError) as exc:
        print(f"draftscope: {exc}", file=sys.stderr)
        return 2
    try:
        runtime = runtime_from_args(args)
        watcher = open_documents(runtime, args.documents)
        try:
            return _chat_loop(ChatSession(runtime), args, files)  # the conversation lives in memory
        finally:
            if watcher is not None:
                watcher.stop()
            runtime.unload()  # the engine closes: the conversation's cache is saved for the next run
    finally:
        if offered is not None:
            offered.close()  # the MCP servers' processes end with the chat


def _attach_command(line: str, pending: list) -> None:
    """``/attach FILE``: the file goes with the next message."""
    from draftscope.documents.extract import AttachmentError, read_file

    path = line[len("/attach") :].strip().strip("'\"")
    if not path:
        print("(usage: /attach FILE)", file=sys.stderr)
        return
    try:
        pending.append(read_file(path))
    except AttachmentError as exc:
        print(f"[{exc}]", file=sys.stderr)
        return
    names = ", ".join(f.name for f in pending)
    print(f"(attached {pending[-1].name}: sent with your next message; attached now: {names})", file=sys.stderr)


def _chat_loop(session, args: argparse.Namespace, pending: list | None = None) -> int:
    try:
        tools = fit_tools(args, session)  # a template without tools is said before answering
    except ValueError as exc:
        print(f"draftscope: {exc}", file=sys.stderr)
        return 2
    print(
        "Type a message; /attach FILE adds a file to it, /reset starts over, /exit (or Ctrl-D) quits, "
        "Ctrl-C stops an answer.",
        file=sys.stderr,
    )
    pending = list(pending or [])
    if pending:
        print(f"(attached: {', '.join(f.name for f in pending)}; sent with your first message)", file=sys.stderr)
    while True:
        try:
            line = input("\nyou> ").strip()
        except EOFError:
            print()
            return 0
        except KeyboardInterrupt:
            print()
            continue
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return 0
        if line == "/reset":
            session.reset()
            print("(conversation cleared)", file=sys.stderr)
            continue
        if line == "/attach" or line.startswith("/attach "):
            _attach_command(line, pending)
            continue
        try:
            _say_with(session, line, pending)
        except ValueError as exc:  # the files cannot fit the context: they stay attached
            print(f"[{exc}]", file=sys.stderr)
            continue
        pending = []
        final = _reply(session, args)
        if final is not None and tools is not None:  # its calls decided and run, answered on
            how = "ask" if args.tools_offered.runs else "type"
            converse(tools, final, lambda: _reply(session, args), how=how)


def _reply(session, args: argparse.Namespace):
    """The model's next answer, then its figures; None when it failed (its question taken back)."""
    print("assistant> ", end="", flush=True)
    try:
        final = _answer(session, args)
    except ValueError as exc:  # e.g. the conversation outgrew the context window
        session.take_back_unanswered()  # the question, never a tool's result (a follow-up answer failed)
        print(f"\n[{exc}]", file=sys.stderr)
        return None
    print()
    if final.finish_reason == "error":
        print(f"[error: {final.error}]", file=sys.stderr)
        session.take_back_unanswered()
        return None
    print(_stats_line(final), file=sys.stderr)
    return final
