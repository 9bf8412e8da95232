"""``draftscope doctor``: what runs here and why, in one page — the model the settings name and
the backend it opens on, llama.cpp's build and its kept verdict on this CPU, torch's devices (or
that it is not installed: optional), and the folders Draftscope reads and writes. ``--forget``
drops the kept verdict (the next GGUF load checks again); ``--check`` runs llama.cpp's self-test
now and keeps what it finds as a load would."""

from __future__ import annotations

import argparse
import json
import platform


def add_parser(sub) -> None:
    doctor = sub.add_parser(
        "doctor", help="what runs here and why: model, backend, llama.cpp's verdict, kernels, paths"
    )
    doctor.add_argument(
        "--forget",
        action="store_true",
        help="forget the kept llama.cpp verdict: the next GGUF load runs the self-test again",
    )
    doctor.add_argument(
        "--check", action="store_true", help="run llama.cpp's self-test now (with the settings' threads)"
    )
    doctor.add_argument("--json", action="store_true", help="print JSON")
    doctor.set_defaults(func=cmd_doctor)


def cmd_doctor(args: argparse.Namespace) -> int:
    from draftscope.engine.backends.llama import llama_verdict
    from draftscope.storage import load_settings

    settings, notices = load_settings()
    said = []
    if args.forget:
        llama_verdict.forget()
        said.append("forgot the kept llama.cpp verdict: the next GGUF load checks again")
    if args.check:
        said.append(_check_now(settings.threads or None))
    report = gather(settings, notices)
    if args.json:
        print(json.dumps({**report, "done": said}, indent=2))
    else:
        print("\n".join([*said, *([""] if said else []), render(report)]))
    return 0


def _check_now(threads: int | None) -> str:
    from draftscope.engine.backends import llama_cpp_available
    from draftscope.engine.backends.llama import llama_verdict

    if not llama_cpp_available():
        return "llama.cpp is not installed: nothing to check (bash scripts/setup.sh installs it)"
    llama_verdict.forget()
    found = llama_verdict.verdict(threads=threads, progress=print)
    return "self-test: " + _verdict_words(found)


def gather(settings, notices: list[str]) -> dict:
    """Every fact the page shows, as data (``--json`` prints it as it is)."""
    from draftscope import __version__

    return {
        "draftscope": __version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "cpu": _cpu(),
        "model": _model(settings),
        "llama_cpp": _llama_cpp(),
        "torch": _torch(),
        "paths": _paths(),
        "kv_caches": _kv_caches(settings),
        "settings_notices": notices,
    }


def _cpu() -> dict:
    from draftscope.engine.backends.llama.llama_build import cpu_flags
    from draftscope.sysinfo import usable_cores

    flags = cpu_flags()
    wanted = (
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512_vnni",
        "avx512_bf16",
        "avx_vnni",
        "amx_tile",
        "amx_int8",
        "amx_bf16",
    )
    return {"name": _cpu_name(), "cores": usable_cores(), "features": [f for f in wanted if f in flags]}


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _model(settings) -> dict:
    """The settings' model, where it is, and the backend it would open on (the kept verdict only:
    nothing runs here)."""
    from draftscope.engine.backends import choose_backend
    from draftscope.models.resolve import ModelNotFoundError, resolve_model

    out = {
        "setting": settings.model,
        "backend_setting": settings.backend,
        "device_setting": settings.device,
        "threads_setting": settings.threads,
    }
    try:
        source = resolve_model(settings.model, fetch_default=False)
    except (ModelNotFoundError, OSError) as exc:
        return {**out, "problem": str(exc)}
    out |= {"name": source.display_name, "kind": source.kind, "location": source.location}
    try:
        choice = choose_backend(source, settings.backend, settings.device, check=False)
    except (ValueError, RuntimeError) as exc:
        return {**out, "problem": str(exc)}
    return {**out, "backend": choice.kind, "why": choice.why, "notice": choice.notice}


def _llama_cpp() -> dict:
    from draftscope.engine.backends import llama_cpp_available
    from draftscope.engine.backends.llama import llama_verdict

    if not llama_cpp_available():
        return {"installed": False}
    import llama_cpp

    from draftscope.engine.backends.llama.llamacpp import default_threads
    from draftscope.engine.backends.llama.selftest import kernels

    found = llama_verdict.verdict(check=False)
    return {
        "installed": True,
        "version": llama_cpp.__version__,
        "kernels": kernels(),
        "rpc": bool(llama_cpp.llama_supports_rpc()),
        "gpu_backends": _gpu_backends(llama_cpp),
        "default_threads": default_threads(),
        "verdict": None if found is None else vars(found),
        "verdict_words": _verdict_words(found),
    }


def _gpu_backends(llama_cpp) -> list[str]:
    """The GPU backends this build has (libggml-cuda.so, ...): llama_supports_gpu_offload also says
    yes for a CPU build with RPC, so the library files are what tells: those llama-cpp-python loads,
    LLAMA_CPP_LIB_PATH's where it is set (a CUDA build beside a wheel without one, as on the card)."""
    import os
    from pathlib import Path

    folder = Path(os.environ.get("LLAMA_CPP_LIB_PATH") or Path(llama_cpp.__file__).parent / "lib")
    found = {p.name.split(".")[0].removeprefix("libggml-") for p in folder.glob("libggml-*")}
    return sorted(found & {"cuda", "hip", "vulkan", "metal", "sycl", "opencl", "musa", "cann"})


def _verdict_words(found) -> str:
    if found is None:
        return "not checked yet on this build and CPU (the first GGUF load checks it; or draftscope doctor --check)"
    if found.runs and found.repacked:
        return "runs on this CPU, with its repacked kernels"
    return found.notice or ("runs" if found.runs else "does not run")


def _torch() -> dict:
    """torch's version and devices; where it is not installed, that (a fact, not a problem: the
    default path, a GGUF on llama.cpp, needs none) and what would need it."""
    from draftscope.optional_torch import install_plan, torch_available

    if not torch_available():
        plan = install_plan()
        return {"installed": False, "install": plan.command_words, "size": plan.size_words}
    try:
        import torch
    except Exception as exc:  # a broken install is something to report, not to die of
        return {"problem": f"torch does not import: {exc}"}
    cuda = torch.cuda.is_available()
    return {
        "installed": True,
        "version": torch.__version__,
        "threads": torch.get_num_threads(),
        "cuda": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
    }


def _paths() -> dict:
    from draftscope import paths

    return {
        "settings": str(paths.settings_file()),
        "history": str(paths.history_file()),
        "datastores": str(paths.datastores_dir()),
        "models": str(paths.models_dir()),
        "cache": str(paths.cache_dir()),
        "llama_verdict": str(paths.llama_verdict_file()),
    }


def _kv_caches(settings) -> dict:
    """Conversations' caches saved on disk (engine/kv_disk.py): how many, their size, where."""
    from draftscope import paths
    from draftscope.engine.kv_disk import cache_files, disk_use

    folder = paths.kv_cache_dir()
    return {
        "count": len(cache_files(folder)),
        "bytes": disk_use(folder),
        "budget_mb": int(getattr(settings, "kv_cache_budget_mb", 1024)),
        "folder": str(folder),
    }


def _kv_cache_lines(kv: dict) -> list[str]:
    budget = f"{kv['budget_mb']:,} MB" if kv["budget_mb"] > 0 else "off (budget 0)"
    return [
        f"  {kv['count']} saved · {kv['bytes'] / 2**20:,.1f} MB of {budget}",
        f"  {'folder':<14}{kv['folder']}",
    ]


def render(report: dict) -> str:
    """The report as a page of text, one fact a line."""
    cpu, model, llama, torch_info = report["cpu"], report["model"], report["llama_cpp"], report["torch"]
    lines = [
        f"Draftscope {report['draftscope']} · Python {report['python']} · {report['platform']}",
        f"CPU: {cpu['name']} · {cpu['cores']} cores usable · {' '.join(cpu['features']) or 'no AVX2'}",
        "",
        "What runs",
        *_model_lines(model, llama),
        "",
        "llama.cpp",
        *_llama_lines(llama),
        "",
        "torch",
        *_torch_lines(torch_info),
        "",
        "Paths",
        *(f"  {name:<14}{where}" for name, where in report["paths"].items()),
        "",
        "Conversations' caches on disk",
        *_kv_cache_lines(report["kv_caches"]),
    ]
    lines += [f"note: {n}" for n in report["settings_notices"]]
    return "\n".join(lines)


def _model_lines(model: dict, llama: dict) -> list[str]:
    threads = (
        model["threads_setting"] or f"0 (this computer's cores: {llama.get('default_threads', '?')} for llama.cpp)"
    )
    lines = [f"  model         {model.get('name', model['setting'])} ({model.get('location', model['setting'])})"]
    if "problem" in model:
        return [*lines, f"  problem       {model['problem']}"]
    lines += [
        f"  backend       {model['backend']}: {model['why']} (setting: {model['backend_setting']})",
        f"  threads       {threads}",
    ]
    if model.get("notice"):
        lines.append(f"  notice        {model['notice']}")
    return lines


def _llama_lines(llama: dict) -> list[str]:
    if not llama["installed"]:
        return [
            "  not installed: bash scripts/setup.sh builds llama.cpp for this CPU (without it GGUF models need "
            "the torch backend)"
        ]
    yes = {True: "yes", False: "no"}
    return [
        f"  llama-cpp-python {llama['version']} · kernels {' '.join(llama['kernels']) or 'baseline'}",
        f"  RPC workers {yes[llama['rpc']]} · GPU backends: {', '.join(llama['gpu_backends']) or 'none (a CPU build)'}",
        f"  verdict       {llama['verdict_words']}",
    ]


def _torch_lines(info: dict) -> list[str]:
    if info.get("installed") is False:
        return [
            "  not installed (optional: GGUF models on llama.cpp need none; the torch backend, Hugging Face "
            "models, training a recurrent head and learning a model's style do)",
            f"  install       {info['install']} ({info['size']}), or bash scripts/setup.sh --with-torch",
        ]
    if "problem" in info:
        return [f"  {info['problem']}"]
    devices = ", ".join(info["cuda"]) or "none (CPU only)"
    return [f"  torch {info['version']} · {info['threads']} threads · CUDA devices: {devices}"]
