"""``draftscope doctor`` (issue 49): what runs here and why — the settings' model and its backend,
llama.cpp's kept verdict and kernels, the folders — and ``--forget`` / ``--check`` on the verdict."""

from __future__ import annotations

import json

import pytest
from llama_helpers import amx_faulting_selftest, need_llama_cpp

from draftscope.cli import main
from draftscope.engine.backends.llama import llama_verdict
from draftscope.storage import Settings, save_settings


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A config folder of its own, and a self-test child whose repacked kernels fault (SIGSEGV) while
    the plain layout runs."""
    need_llama_cpp()
    monkeypatch.setenv("DRAFTSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    amx_faulting_selftest(tmp_path, monkeypatch, plain_runs=True)
    return tmp_path


def doctor(capsys, *args) -> str:
    assert main(["doctor", *args]) == 0
    return capsys.readouterr().out


def test_doctor_says_what_runs_the_kept_verdict_and_the_paths(here, capsys):
    said = doctor(capsys)
    assert "not checked yet" in said and "llama-cpp-python 0.3.36" in said and "AVX2" in said
    assert str(here / "verdict.json") in said and str(here / "config" / "settings.json") in said
    assert llama_verdict.verdict(check=False) is None, "looking must not run the check"

    said = doctor(capsys, "--check")
    assert "self-test: llama.cpp runs without its repacked kernels here" in said and "SIGSEGV" in said
    kept = llama_verdict.verdict(check=False)
    assert kept is not None and kept.runs and not kept.repacked
    assert "runs without its repacked kernels" in doctor(capsys).split("verdict", 1)[1]

    said = doctor(capsys, "--forget")
    assert "forgot the kept llama.cpp verdict" in said and "not checked yet" in said
    assert llama_verdict.verdict(check=False) is None


def test_doctor_names_the_model_its_backend_and_a_problem(here, capsys, tmp_path):
    from draftscope.engine.backends.llama.gguf_writer import random_llama

    model = random_llama(tmp_path / "mine.gguf")
    save_settings(Settings(model=str(model), threads=1))
    report = json.loads(doctor(capsys, "--json"))
    assert report["model"]["kind"] == "gguf" and report["model"]["backend"] == "llama.cpp"
    assert report["model"]["threads_setting"] == 1 and report["llama_cpp"]["verdict"] is None
    assert report["paths"]["settings"] == str(here / "config" / "settings.json")

    save_settings(Settings(model=str(tmp_path / "gone.gguf")))
    said = doctor(capsys)
    assert "problem" in said and "gone.gguf" in said and "no such file" in said


def test_doctor_check_runs_the_self_test_with_the_settings_threads(here, capsys, monkeypatch):
    """Issue 49, item 13: the self-test ran on every core whatever Settings ▸ Threads said; `doctor
    --check` must check with the threads the app will compute on."""
    import sys

    from draftscope.engine.backends.llama import selftest

    argv = here / "argv"
    child = here / "says-its-argv.py"
    child.write_text(
        f"import sys\nopen({str(argv)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\nprint('stage: step')\nprint('ok')\n"
    )
    monkeypatch.setattr(selftest, "CHILD_COMMAND", [sys.executable, str(child)])
    save_settings(Settings(threads=1))
    assert "self-test: runs on this CPU" in doctor(capsys, "--check")
    assert argv.read_text().split() == ["--threads", "1"]

    argv.unlink()
    save_settings(Settings(threads=0))  # 0: as many as the cores, llama.cpp's own default, as a load has it
    doctor(capsys, "--check")
    assert argv.read_text().split() == []


def test_doctor_names_the_gpu_backend_of_the_libraries_llama_cpp_loads(here, capsys, monkeypatch):
    """On the card the CUDA build sits beside a CPU wheel, named by LLAMA_CPP_LIB_PATH: the doctor
    said "GPU backends: none (a CPU build)" there, looking only inside the wheel."""
    assert "GPU backends: none (a CPU build)" in doctor(capsys)
    build = here / "llama-cuda" / "bin"
    build.mkdir(parents=True)
    for name in ("libllama.so", "libggml-base.so", "libggml-cpu.so", "libggml-cuda.so"):
        (build / name).write_bytes(b"")
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(build))
    assert "GPU backends: cuda" in doctor(capsys)
