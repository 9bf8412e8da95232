"""What ``draftscope datastore build | build-default | distill | info`` print: a build's report and
a distillation's as JSON-ready summaries and as aligned lines, and a datastore's manifest in lines.
Split from ``datastore`` so that module keeps the parsers and the commands' runs (progress bars,
Ctrl-C, exit codes)."""

from __future__ import annotations

import argparse
import json


def distill_summary(report, args: argparse.Namespace) -> dict:
    return {
        "distill": {
            "answers": report.answers,
            "generated": report.generated,
            "answer_tokens": report.tokens,
            "generated_tokens": report.generated_tokens,
            "generate_seconds": round(report.generate_seconds, 2),
            "tokens_per_second": round(report.tokens_per_second, 1),
            "prompts_too_long": report.skipped_too_long,
            "answers_file": str(report.answers_path),
            "batch_size": args.batch_size,
            "max_new_tokens": args.max_new_tokens,
        },
        "datastore": build_summary(report.build),
    }


def format_distill_summary(s: dict) -> str:
    d = s["distill"]
    earlier = d["answers"] - d["generated"]
    lines = [
        f"answers     {d['answers']:,} ({d['generated']:,} generated now"
        + (f", {earlier:,} from an earlier run" if earlier else "")
        + f"), {d['answer_tokens']:,} tokens",
        f"generation  {d['generated_tokens']:,} tokens in {d['generate_seconds']:.1f} s, {d['tokens_per_second']:,.1f} "
        f"tokens/s (batch {d['batch_size']}, at most {d['max_new_tokens']} new tokens)",
        f"kept in     {d['answers_file']}",
    ]
    if d["prompts_too_long"]:
        lines.append(f"skipped     {d['prompts_too_long']:,} prompts too long for the model's context")
    return "\n".join(lines) + "\n" + format_build_summary(s["datastore"])


def build_summary(report) -> dict:
    return {
        "path": str(report.path),
        "manifest": str(report.manifest_path),
        "documents": report.documents,
        "tokens": report.tokens,
        "file_bytes": report.index.get("file_bytes"),
        "duplicates_skipped": report.duplicates,
        "records_skipped": report.skipped.count,
        "skipped_by_reason": dict(report.skipped.by_reason),
        "skipped_examples": report.skipped.examples[:5],
        "sources": [vars(s) for s in report.sources],
        "seconds": {k: round(v, 2) for k, v in report.timings.items()},
        "tokens_per_second": round(report.tokens / report.timings["total"]) if report.timings["total"] else None,
        "peak_rss_mb": round(report.peak_rss_mb, 1),
        "stopped_at_max_tokens": report.stopped_at_max_tokens,
    }


def format_build_summary(s: dict) -> str:
    t = s["seconds"]
    lines = [
        f"datastore   {s['path']}",
        f"holds       {s['documents']:,} documents, {s['tokens']:,} tokens, {s['file_bytes'] / 2**20:,.1f} MiB",
        f"time        {t['total']:.1f} s total: read {t['read']:.1f} s, tokenise {t['tokenise']:.1f} s, "
        f"index {t['index']:.1f} s ({s['tokens_per_second']:,} tokens/s)",
        f"memory      peak {s['peak_rss_mb']:,.0f} MiB resident",
    ]
    for src in s["sources"]:
        lines.append(
            f"source      {src['spec']}: {src['files']:,} files, {src['items']:,} records, "
            f"{src['documents']:,} documents, {src['tokens']:,} tokens, {src['skipped']:,} skipped"
        )
    if s["duplicates_skipped"]:
        lines.append(f"duplicates  {s['duplicates_skipped']:,} documents skipped")
    if s["records_skipped"]:
        reasons = ", ".join(f"{n:,} {r}" for r, n in s["skipped_by_reason"].items())
        lines.append(f"skipped     {s['records_skipped']:,} records ({reasons}); e.g.")
        lines += [f"              {e['location']}: {e['reason']}" for e in s["skipped_examples"]]
    if s["stopped_at_max_tokens"]:
        lines.append("note        stopped at --max-tokens")
    lines.append(f"manifest    {s['manifest']}")
    return "\n".join(lines)


def manifest_lines(manifest: dict) -> list[str]:
    tpl = manifest.get("chat_template") or {}
    tot = manifest.get("totals") or {}
    t = manifest.get("timings_seconds") or {}
    lines = [
        f"built       {manifest.get('created')} by draftscope {manifest.get('draftscope_version')} "
        f"for model {manifest.get('model') or '?'}",
        f"chat        template {'applied' if tpl.get('applied') else 'not applied'}, mode {tpl.get('mode')}",
        f"options     {json.dumps(manifest.get('options'))}",
    ]
    for src in manifest.get("sources") or []:
        lines.append(
            f"source      {src['spec']}: {src['items']:,} records, {src['documents']:,} documents, "
            f"{src['tokens']:,} tokens, {src['skipped']:,} skipped"
        )
    lines.append(
        f"skipped     {tot.get('records_skipped', 0):,} records, {tot.get('duplicates_skipped', 0):,} duplicates"
    )
    for reason, n in ((manifest.get("skipped") or {}).get("by_reason") or {}).items():
        lines.append(f"              {n:,} {reason}")
    if t:
        lines.append(
            f"time        {t.get('total', 0):.1f} s (read {t.get('read', 0):.1f}, tokenise "
            f"{t.get('tokenise', 0):.1f}, index {t.get('index', 0):.1f}); peak {manifest.get('peak_rss_mb')} MiB"
        )
    return lines
