"""llama.cpp's self-test (issue 40): a quantised model whose batches reach the repacked kernels, a
child's death named by its signal and its cause, and set-up's ladder of builds (AMX turned off
first), driven with stand-in builds and self-test children that die as the AMX kernels did."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from draftscope.engine.backends.llama import llama_build, selftest
from draftscope.engine.backends.llama.gguf_writer import SELFTEST_TYPES, random_quantised_llama

AMX_CPU = {
    "sse4_2",
    "f16c",
    "fma",
    "bmi2",
    "avx",
    "avx2",
    "avx512f",
    "avx512cd",
    "avx512vl",
    "avx512dq",
    "avx512bw",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
}


def dying_child(
    tmp_path: Path,
    *,
    stage="prompt",
    buffers="CPU_Mapped,AMX",
    kernels="AVX2,AVX512,AMX_INT8",
    sig="SIGSEGV",
    plain_runs=False,
    name="child.py",
) -> list[str]:
    """A stand-in self-test child: says what the real one says, then dies of ``sig`` (with the
    weights in their plain layout it runs when ``plain_runs``)."""
    script = tmp_path / name
    script.write_text(
        textwrap.dedent(f"""
        import os, signal, sys
        print("kernels: {kernels}", flush=True)
        print("stage: load", flush=True)
        plain = "--plain-layout" in sys.argv
        print("buffers: " + ("CPU_Mapped" if plain else "{buffers}"), flush=True)
        if plain and {plain_runs!r}:
            print("stage: step")
            print("ok")
            sys.exit(0)
        print("stage: {stage}", flush=True)
        os.kill(os.getpid(), signal.{sig})
    """)
    )
    return [sys.executable, str(script)]


def test_the_self_test_model_is_quantised_in_the_catalogues_types(tmp_path):
    import gguf

    path = random_quantised_llama(tmp_path / "q.gguf")
    reader = gguf.GGUFReader(str(path))
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert set(SELFTEST_TYPES) <= set(types.values()), types
    products = {n: t for n, t in types.items() if n.startswith("blk.") and not n.endswith("norm.weight")}
    assert all(t in SELFTEST_TYPES for t in products.values()), products
    # shapes the repacked kernels take: rows a multiple of 32, columns of 256
    shapes = [t.shape for t in reader.tensors if t.name in products]
    assert all(int(cols) % 256 == 0 and int(rows) % 32 == 0 for cols, rows in shapes), shapes


def test_the_self_test_runs_here_and_its_batches_reach_the_repacked_kernels():
    from llama_helpers import need_llama_cpp

    need_llama_cpp()
    result = selftest.run()
    assert result.ok, result.message
    assert result.stage == "step" and result.signal is None
    # x86 with AVX2 (every CPU this project lands on): Q4_0 and Q4_K go to interleaved rows (CPU_REPACK),
    # or to AMX tiles where the build and the CPU have them
    assert {"CPU_REPACK", "AMX"} & set(result.buffers), result.buffers
    assert "AVX2" in result.kernels, result.kernels
    plain = selftest.run(repacked=False, threads=1)
    assert plain.ok and not {"CPU_REPACK", "AMX"} & set(plain.buffers), plain.buffers
    # with the app's threads (Settings ▸ Threads), not every core (issue 49, item 13)
    from draftscope.engine.backends.llama.llamacpp import default_threads

    assert plain.threads == 1 and result.threads == default_threads()


@pytest.mark.parametrize(
    "sig,words",
    [
        ("SIGSEGV", ["SIGSEGV", "segmentation fault", "batched product", "AMX"]),
        ("SIGILL", ["SIGILL", "illegal instruction", "built for another CPU"]),
    ],
)
def test_a_child_that_dies_is_named_by_its_signal_and_cause(tmp_path, sig, words):
    buffers = "CPU_Mapped,AMX" if sig == "SIGSEGV" else "CPU_Mapped,CPU_REPACK"
    result = selftest.run(command=dying_child(tmp_path, sig=sig, buffers=buffers))
    assert not result.ok and result.signal == sig and result.stage == "prompt"
    for word in words:
        assert word.lower() in result.message.lower(), result.message
    assert result.suspect == ("AMX" if sig == "SIGSEGV" else "AVX512")


def test_a_child_that_fails_in_words_is_reported_in_them(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(
        'print("stage: tree")\nprint("error: llama.cpp ran but gave unusable logits")\nraise SystemExit(1)\n'
    )
    result = selftest.run(command=[sys.executable, str(script)])
    assert not result.ok and result.signal is None
    assert "draft tree" in result.message and "unusable logits" in result.message


@pytest.mark.parametrize("then", ["hang", "SIGSEGV"])
def test_a_child_that_said_its_words_and_then_hung_or_died_gets_a_verdict(tmp_path, then):
    """Its "ok" and "error:" lines were passed on as unexpected fields: a TypeError instead of a
    verdict, and every GGUF failed to load with it."""
    script = tmp_path / "said-then.py"
    ending = (
        "import time; time.sleep(30)" if then == "hang" else "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"
    )
    script.write_text(f'print("stage: step")\nprint("error: a late complaint")\nprint("ok", flush=True)\n{ending}\n')
    result = selftest.run(command=[sys.executable, str(script)], timeout=3)
    assert not result.ok and result.stage == "step"
    if then == "hang":
        assert "did not finish its self-test within 3 s" in result.message and result.signal is None
    else:
        assert result.signal == "SIGSEGV" and "SIGSEGV" in result.message


# ---------------------------------------------------------------------------------- set-up's ladder


def variants(wheel_dirs) -> list[str]:
    """The build variants of wheel folders named llama-cpp-python-VERSION-VARIANT-KEY."""
    return [d.name.removeprefix(f"llama-cpp-python-{llama_build.VERSION}-").rsplit("-", 1)[0] for d in wheel_dirs]


def stand_in_setup(
    tmp_path: Path, *, installed=None, forced=None, flags=AMX_CPU, installed_kernels=("AVX2", "AVX512", "AMX_INT8")
):
    """LlamaSetup with a build command that writes a wheel holding its CMAKE_ARGS, an install that
    records it, and a self-test child that dies in AMX's kernels unless the installed build has them off."""
    state = tmp_path / "installed.txt"
    builds = []
    build_script = tmp_path / "build.py"
    build_script.write_text(
        "import os, sys\n"
        "open(os.path.join(sys.argv[1], 'llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl'), 'w')"
        ".write(os.environ['CMAKE_ARGS'])\n"
    )
    child = tmp_path / "selftest_child.py"
    child.write_text(
        textwrap.dedent(f"""
        import os, signal
        args = open({str(state)!r}).read()
        if "-DGGML_AMX_INT8=OFF" not in args:
            print("kernels: AVX2,AVX512,AMX_INT8", flush=True)
            print("buffers: CPU_Mapped,AMX", flush=True)
            print("stage: prompt", flush=True)
            os.kill(os.getpid(), signal.SIGSEGV)
        print("kernels: AVX2,AVX512", flush=True)
        print("buffers: CPU_Mapped,CPU_REPACK", flush=True)
        print("stage: step")
        print("ok")
    """)
    )

    def build_command(target):
        builds.append(target)
        return [sys.executable, str(build_script), str(target)]

    def install(wheel):
        state.write_text(Path(wheel).read_text())

    if installed is not None:
        state.write_text(installed)
    setup = llama_build.LlamaSetup(
        cache=tmp_path / "wheels",
        flags=flags,
        forced=forced,
        base="-DGGML_RPC=on",
        build_command=build_command,
        install=install,
        installed=lambda: list(installed_kernels) if installed is not None else None,
        selftest=lambda: selftest.run(command=[sys.executable, str(child)]),
    )
    return setup, builds, state


def test_set_up_rebuilds_without_amx_when_its_kernels_fault_and_keeps_each_build(tmp_path, capsys):
    setup, builds, state = stand_in_setup(tmp_path)
    assert setup.ensure()
    said = capsys.readouterr().out
    assert "build native" in said and "SIGSEGV" in said and "AMX" in said
    assert "next: no-amx (the AMX kernels turned off)" in said
    assert "build: no-amx" in said
    assert variants(builds) == ["native", "no-amx"]  # each its own wheel folder
    assert builds[0] != builds[1] and all(any(b.glob("*.whl")) for b in builds)
    args = state.read_text()
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AMX_TILE=OFF" in args and "-DGGML_AVX512=ON" in args
    # the next set-up on this machine builds nothing: the working wheel is cached under its key
    again, more, _ = stand_in_setup(tmp_path)
    assert again.ensure() and more == []
    said = capsys.readouterr().out
    assert "using the cached llama-cpp-python 0.3.36 build native" in said
    assert "using the cached llama-cpp-python 0.3.36 build no-amx" in said and "building" not in said


def test_an_installed_build_that_faults_in_amx_goes_straight_to_no_amx(tmp_path, capsys):
    setup, builds, state = stand_in_setup(tmp_path, installed="-DGGML_RPC=on")
    assert setup.ensure()
    said = capsys.readouterr().out
    assert "the installed llama.cpp fails its self-test" in said and "turning off the AMX kernels" in said
    assert variants(builds) == ["no-amx"]


def test_a_forced_build_is_built_and_a_wrong_one_named(tmp_path, capsys):
    setup, builds, state = stand_in_setup(tmp_path, forced="avx2")
    assert setup.ensure()
    assert variants(builds) == ["avx2"]
    assert "-DGGML_AVX512=OFF" in state.read_text() and "-DGGML_AVX2=ON" in state.read_text()
    with pytest.raises(ValueError, match="DRAFTSCOPE_LLAMA_KERNELS='sse'"):
        llama_build.LlamaSetup(cache=tmp_path, flags=AMX_CPU, forced="sse", base="")


def test_a_forced_build_replaces_an_installed_fallback_and_keeps_a_matching_one(tmp_path, capsys):
    """Issue 49, item 7: DRAFTSCOPE_LLAMA_KERNELS=native once set-up had fallen back to avx2 kept the
    avx2 build (any installed build "matched" native)."""
    passes = lambda: selftest.SelfTest(ok=True, repacked=True, message="llama.cpp runs")  # noqa: E731
    setup, builds, _ = stand_in_setup(tmp_path, installed="avx2", installed_kernels=("AVX2",), forced="native")
    setup.selftest = passes
    assert setup.ensure()
    assert variants(builds) == ["native"]
    assert "build: native (nothing turned off)" in capsys.readouterr().out
    for sub in ("b", "c"):
        (tmp_path / sub).mkdir()
    # the build asked for is the one installed: nothing is built
    again, more, _ = stand_in_setup(tmp_path / "b", installed="avx2", installed_kernels=("AVX2",), forced="avx2")
    again.selftest = passes
    assert again.ensure() and more == []
    # unforced, the ladder keeps what an earlier set-up left working (no rebuild of what faulted)
    plain, none, _ = stand_in_setup(tmp_path / "c", installed="avx2", installed_kernels=("AVX2",))
    plain.selftest = passes
    assert plain.ensure() and none == []


def test_a_forced_build_that_fails_leaves_the_build_below_it_that_runs(tmp_path, capsys):
    """DRAFTSCOPE_LLAMA_KERNELS=native after a fallback to no-amx, on a CPU whose AMX still faults:
    set-up tried native alone, then said "no llama.cpp build runs on this CPU" and uninstalled
    llama.cpp, though the no-amx build it replaced ran."""
    no_amx = llama_build.cmake_args("no-amx", AMX_CPU, "-DGGML_RPC=on")
    setup, builds, state = stand_in_setup(
        tmp_path, installed=no_amx, installed_kernels=("AVX2", "AVX512"), forced="native"
    )
    assert setup.ensure(), "a build that runs here was left uninstalled"
    said = capsys.readouterr().out
    assert variants(builds) == ["native", "no-amx"]  # native tried as asked, then the step below it
    assert "llama.cpp built native fails its self-test" in said and "SIGSEGV" in said
    assert "build: no-amx (the AMX kernels turned off), not native as DRAFTSCOPE_LLAMA_KERNELS asks" in said
    assert "-DGGML_AMX_INT8=OFF" in state.read_text()  # what is installed now is the build that runs


def test_set_up_says_so_when_no_build_runs(tmp_path, capsys):
    setup, builds, state = stand_in_setup(tmp_path)
    setup.selftest = lambda: selftest.run(command=dying_child(tmp_path))
    assert not setup.ensure()
    assert variants(builds) == ["native", "no-amx", "avx2"]


def test_the_ladder_follows_the_cpu():
    assert llama_build.ladder({"avx2", "fma"}) == ["native"]
    assert llama_build.ladder({"avx2", "avx512f"}) == ["native", "avx2"]
    assert llama_build.ladder(AMX_CPU) == ["native", "no-amx", "avx2"]
    assert llama_build.variant_of(["AVX2", "AVX512"], AMX_CPU) == "no-amx"
    assert llama_build.variant_of(["AVX2"], AMX_CPU) == "avx2"
    assert llama_build.variant_of(["AVX2", "AVX512", "AMX_INT8"], AMX_CPU) == "native"


def stand_in_tools(folder, monkeypatch, compute_cap: str | None):
    """``nvcc`` and (with ``compute_cap``) an ``nvidia-smi`` that reports it, first on PATH."""
    folder.mkdir(exist_ok=True)
    (folder / "nvcc").write_text("#!/bin/sh\nexit 0\n")
    if compute_cap is not None:
        (folder / "nvidia-smi").write_text(f"#!/bin/sh\necho {compute_cap}\n")
    for tool in folder.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    monkeypatch.delenv("CMAKE_ARGS", raising=False)


def test_with_a_cuda_toolkit_set_up_builds_for_this_card_s_architecture_only(tmp_path, monkeypatch):
    """Every architecture takes half an hour on a build machine; the card's own, minutes (issue 53)."""
    stand_in_tools(tmp_path / "hopper", monkeypatch, "9.0")
    assert llama_build.base_args() == "-DGGML_RPC=on -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90"
    monkeypatch.setenv("CMAKE_ARGS", "-DCMAKE_CUDA_ARCHITECTURES=86")  # the user's choice stands
    assert llama_build.base_args().count("CMAKE_CUDA_ARCHITECTURES") == 1


def test_with_no_card_to_ask_the_cuda_build_keeps_llama_cpp_s_default_architectures(tmp_path, monkeypatch):
    stand_in_tools(tmp_path / "no-card", monkeypatch, None)
    assert llama_build.base_args() == "-DGGML_RPC=on -DGGML_CUDA=on"
    stand_in_tools(tmp_path / "odd", monkeypatch, "No devices were found")
    assert llama_build.base_args() == "-DGGML_RPC=on -DGGML_CUDA=on"
