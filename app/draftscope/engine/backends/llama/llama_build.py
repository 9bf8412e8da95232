"""Set-up's llama.cpp: build llama-cpp-python for this CPU, check that it runs (selftest.py), and
where it dies rebuild it without the kernels that faulted, each build's wheel kept under a key of
its own, so only the first set-up on a machine pays for a build.

    python -m draftscope.engine.backends.llama.llama_build       (scripts/setup.sh runs this)

The builds, tried in this order when one dies:
  native   llama.cpp's default: -march=native, every kernel this CPU lists (AMX included)
  no-amx   this CPU's features named one by one, AMX left out (virtual machines that list AMX
           but fault on it)
  avx2     AVX2, FMA, F16C and BMI2 only: no AVX512, no AMX
DRAFTSCOPE_LLAMA_KERNELS=native|no-amx|avx2 starts the ladder at one (where detection is not
enough): that build is installed even where another already runs, and only if it fails its
self-test are the builds below it tried. CMAKE_ARGS is added to every build.
DRAFTSCOPE_REQUIRE_LLAMA_CPP=1 (CI) makes a llama.cpp that runs nowhere an error; otherwise it is
uninstalled and GGUF models run on torch."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from draftscope.engine.backends.llama import llama_verdict
from draftscope.engine.backends.llama import selftest as llama_selftest

VERSION = "0.3.36"
ENV = "DRAFTSCOPE_LLAMA_KERNELS"
VARIANTS = ("native", "no-amx", "avx2")
# (llama.cpp's cmake option, the /proc/cpuinfo flags it needs)
FEATURES = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    ("GGML_AVX512", ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")),
    ("GGML_AVX512_VBMI", ("avx512vbmi",)),
    ("GGML_AVX512_VNNI", ("avx512_vnni",)),
    ("GGML_AVX512_BF16", ("avx512_bf16",)),
    ("GGML_AMX_TILE", ("amx_tile",)),
    ("GGML_AMX_INT8", ("amx_int8",)),
    ("GGML_AMX_BF16", ("amx_bf16",)),
)
WHAT_IS_OFF = {
    "native": "nothing turned off",
    "no-amx": "the AMX kernels turned off",
    "avx2": "the AVX512 and AMX kernels turned off",
}


def say(text: str) -> None:
    print(f"\033[1m[setup]\033[0m {text}", flush=True)


def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[-1].split())
    except OSError:
        pass
    return set()


def base_args() -> str:
    """What every build has: the user's CMAKE_ARGS, RPC (models split over `draftscope worker`s) and
    CUDA where a CUDA toolkit is installed."""
    args = f"{os.environ.get('CMAKE_ARGS', '')} -DGGML_RPC=on".strip()
    if shutil.which("nvcc"):
        args += " -DGGML_CUDA=on"
        architecture = cuda_architecture()
        if architecture and "CMAKE_CUDA_ARCHITECTURES" not in args:
            args += f" -DCMAKE_CUDA_ARCHITECTURES={architecture}"
    return args


def cuda_architecture() -> str:
    """This machine's card as nvcc names its architecture ("90" for Hopper), from nvidia-smi; "" when
    there is none to ask. One architecture builds in minutes where every one takes half an hour, and
    the wheel is kept under its own key (the arguments are part of it)."""
    if not shutil.which("nvidia-smi"):
        return ""
    try:
        found = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    first = (found.stdout.strip().splitlines() or [""])[0].strip().replace(".", "")
    return first if found.returncode == 0 and first.isdigit() else ""


def cmake_args(variant: str, flags: set[str], base: str) -> str:
    if variant == "native":
        return base
    args = [base, "-DGGML_NATIVE=OFF"]
    for option, needs in FEATURES:
        wanted = not option.startswith("GGML_AMX") and not (variant == "avx2" and option.startswith("GGML_AVX512"))
        args.append(f"-D{option}={'ON' if wanted and all(f in flags for f in needs) else 'OFF'}")
    return " ".join(args)


def ladder(flags: set[str]) -> list[str]:
    """The builds worth trying on this CPU, best first: a step that would turn off nothing it has is skipped."""
    steps = ["native"]
    if any(f.startswith("amx") for f in flags):
        steps.append("no-amx")
    if "avx512f" in flags:
        steps.append("avx2")
    return steps


def wheel_dir(cache: Path, variant: str, flags: set[str], args: str) -> Path:
    key = hashlib.sha256((" ".join(sorted(flags)) + "\n" + args).encode()).hexdigest()[:12]
    return cache / f"llama-cpp-python-{VERSION}-{variant}-{key}"


def pip_wheel_command(target: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-cache-dir",
        "--no-deps",
        "--no-binary",
        "llama-cpp-python",
        "-w",
        str(target),
        f"llama-cpp-python=={VERSION}",
    ]


def pip_install(wheel: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--force-reinstall", "--no-deps", str(wheel)], check=True
    )
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", f"llama-cpp-python=={VERSION}"], check=True
    )  # its dependencies


def installed_build() -> list[str] | None:
    """The installed llama.cpp's kernels (None: not installed, another version, or without RPC).
    Asked in a child: this process must not hold a library that set-up is about to replace."""
    probe = (
        "import sys, llama_cpp\n"
        f"if llama_cpp.__version__ != {VERSION!r} or not llama_cpp.llama_supports_rpc(): sys.exit(1)\n"
        "from draftscope.engine.backends.llama.selftest import kernels\n"
        "print(','.join(kernels()))"
    )
    child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    return child.stdout.strip().split(",") if child.returncode == 0 else None


def matches(variant: str, kernels: list[str], flags: set[str], *, forced: bool) -> bool:
    """Is a build with these kernels what set-up's first step asks for? A forced build must be that
    build exactly (``native`` after a fallback to ``avx2`` is a rebuild); the ladder's first step,
    ``native``, takes whatever earlier set-ups left working, so a fallback is not undone each run."""
    if forced:
        return variant_of(kernels, flags) == variant
    if variant == "no-amx":
        return not any(k.startswith("AMX") for k in kernels)
    if variant == "avx2":
        return not any(k.startswith(("AMX", "AVX512")) for k in kernels)
    return True


def variant_of(kernels: list[str], flags: set[str]) -> str:
    """Which build gave a llama.cpp with these kernels on a CPU with these flags."""
    if "avx512f" in flags and not any(k.startswith("AVX512") for k in kernels):
        return "avx2"
    if any(f.startswith("amx") for f in flags) and not any(k.startswith("AMX") for k in kernels):
        return "no-amx"
    return "native"


class LlamaSetup:
    """One set-up run. Every outside action is a parameter, so the tests drive the whole ladder
    with stand-ins (a build command that writes a wheel, a self-test child that dies)."""

    def __init__(
        self,
        *,
        cache: Path,
        flags: set[str] | None = None,
        forced: str | None = None,
        build_command: Callable[[Path], list[str]] = pip_wheel_command,
        install: Callable[[Path], None] = pip_install,
        installed: Callable[[], list[str] | None] = installed_build,
        selftest: Callable[[], llama_selftest.SelfTest] | None = None,
        base: str | None = None,
    ) -> None:
        if forced is not None and forced not in VARIANTS:
            raise ValueError(f"{ENV}={forced!r}: choose one of {', '.join(VARIANTS)}")
        self.cache, self.forced = cache, forced
        self.flags = cpu_flags() if flags is None else flags
        self.build_command, self.install, self.installed = build_command, install, installed
        self.base = base_args() if base is None else base
        if selftest is None:
            selftest = llama_selftest.run
        self.selftest = selftest

    def ensure(self) -> bool:
        """Leave a llama.cpp that passes its self-test installed; False when no build does."""
        steps = self._steps()
        kernels = self.installed()
        fresh: set[str] = set()  # variants whose cached wheel must be rebuilt here (a wheel from another CPU)
        if kernels is not None and matches(steps[0], kernels, self.flags, forced=bool(self.forced)):
            result = self.selftest()
            if result.ok:
                say(f"{result.message} (installed build)")
                return True
            say(f"the installed llama.cpp fails its self-test: {result.message}")
            steps, fresh = self._after(result, steps)
        for at, variant in enumerate(steps):
            args = cmake_args(variant, self.flags, self.base)
            target = wheel_dir(self.cache, variant, self.flags, args)
            if variant in fresh:
                shutil.rmtree(target, ignore_errors=True)
            wheel = self._wheel(variant, target, args)
            if wheel is None:
                continue
            self.install(wheel)
            result = self.selftest()
            if result.ok:
                say(f"{result.message}; build: {variant} ({WHAT_IS_OFF[variant]}){self._instead(variant)}")
                return True
            rest = steps[at + 1 :]
            say(
                f"llama.cpp built {variant} fails its self-test: {result.message}"
                + (f"; next: {rest[0]} ({WHAT_IS_OFF[rest[0]]})" if rest else "")
            )
        return False

    def _steps(self) -> list[str]:
        """The builds to try, in order: the ladder, or the forced build and then the ladder's steps
        below it, so a forced build that fails its self-test (``native`` tried again after a fallback,
        on a CPU where it still faults) leaves the build that runs, never no llama.cpp at all."""
        if not self.forced:
            return ladder(self.flags)
        below = [s for s in ladder(self.flags) if VARIANTS.index(s) > VARIANTS.index(self.forced)]
        return [self.forced, *below]

    def _instead(self, variant: str) -> str:
        if not self.forced or variant == self.forced:
            return ""
        return f", not {self.forced} as {ENV} asks: that build fails its self-test here"

    def _after(self, result: llama_selftest.SelfTest, steps: list[str]) -> tuple[list[str], set[str]]:
        """The builds left to try after the installed one failed: past the ones with the kernels that
        faulted (AMX first), or, for an illegal instruction, the same build again compiled here."""
        if self.forced or result.signal == "SIGILL" or result.suspect is None:
            return steps, {steps[0]}
        skip = {"AMX": ("native",), "AVX512": ("native", "no-amx")}[result.suspect]
        left = [s for s in steps if s not in skip] or steps
        say(f"turning off the {result.suspect} kernels: next build {left[0]} ({WHAT_IS_OFF[left[0]]})")
        return left, set()

    def _wheel(self, variant: str, target: Path, args: str) -> Path | None:
        found = sorted(target.glob("llama_cpp_python-*.whl"))
        if found:
            say(f"using the cached llama-cpp-python {VERSION} build {variant} ({target})")
            return found[-1]
        say(
            f"building llama-cpp-python {VERSION} from source, build {variant} ({WHAT_IS_OFF[variant]}; "
            f"about 10 minutes on 2 cores; kept in {target})"
        )
        target.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(self.build_command(target), env={**os.environ, "CMAKE_ARGS": args})
        found = sorted(target.glob("llama_cpp_python-*.whl"))
        if done.returncode != 0 or not found:
            say(f"building llama-cpp-python {VERSION} ({variant}) failed (exit status {done.returncode})")
            shutil.rmtree(target, ignore_errors=True)
            return None
        return found[-1]


def forget_kept_verdict() -> None:
    """The app keeps its own check's verdict per build and CPU; set-up has just checked afresh (and
    perhaps rebuilt), so whatever the app kept is asked again at its next start."""
    try:
        llama_verdict.forget()
    except OSError as exc:
        say(f"could not forget the app's kept llama.cpp verdict: {exc}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--cmake-args"]:  # the installed build's options, for llama.cpp's own tools (build_llama_tools.sh)
        kernels, flags = installed_build(), cpu_flags()
        print(cmake_args(variant_of(kernels or [], flags) if kernels else "native", flags, base_args()))
        return 0
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "draftscope" / "wheels"
    try:
        setup = LlamaSetup(cache=cache, forced=os.environ.get(ENV) or None)
    except ValueError as exc:
        say(str(exc))
        return 2
    ran = setup.ensure()
    forget_kept_verdict()
    if ran:
        return 0
    if os.environ.get("DRAFTSCOPE_REQUIRE_LLAMA_CPP", "0") != "0":  # CI (.ci/run): its tests must run
        say("no llama.cpp build runs on this CPU and DRAFTSCOPE_REQUIRE_LLAMA_CPP asks for one: stopping")
        return 1
    which = f"no llama.cpp build from {setup.forced} down" if setup.forced else "no llama.cpp build"
    say(f"{which} runs on this CPU: uninstalling it; GGUF models will run on torch")
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "llama-cpp-python"], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
