"""llama.cpp in the tests: where CI asks for it, a missing llama.cpp fails instead of skipping; and
the one rule its answers are held to (token identity, or a first divergence at a measured near-tie).

CI sets ``DRAFTSCOPE_REQUIRE_LLAMA_CPP=1`` (``.ci/run``): all llama.cpp coverage would otherwise
vanish, with CI green, the day llama-cpp-python failed to build or was uninstalled by the set-up
for not running on the CPU."""

from __future__ import annotations

import os

import pytest

REQUIRE_VAR = "DRAFTSCOPE_REQUIRE_LLAMA_CPP"


def llama_cpp_required() -> bool:
    return os.environ.get(REQUIRE_VAR, "") not in ("", "0")


def need_llama_cpp():
    """``llama_cpp``, imported; a skip where it is missing, a failure where it is required."""
    try:
        import llama_cpp
    except ImportError as exc:
        if llama_cpp_required():
            pytest.fail(
                f"llama-cpp-python is required here ({REQUIRE_VAR}=1) and does not import: {exc}", pytrace=False
            )
        pytest.skip(f"llama-cpp-python is not installed ({exc})", allow_module_level=True)
    return llama_cpp


def first_divergence(a, b) -> int | None:
    """The first answer position where ``a`` and ``b`` differ (None: the same tokens)."""
    k = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return k if k is not None or len(a) == len(b) else min(len(a), len(b))


def assert_plain_or_near_tie(engine, prompt: list[int], plain: list[int], got: list[int], params, what: str = ""):
    """``got`` is plain decoding's answer ``plain``, token for token, or its first divergence sits
    where plain decoding's two best scores (logits when greedy, log p plus the position's noise when
    sampling) lie within the noise that batch shape puts on llama.cpp's logits, as measured there
    (draftscope.bench.lossless.divergence). Returns that measurement, or None when identical."""
    from draftscope.bench.lossless import divergence

    if first_divergence(plain, got) is None:
        return None
    if len(got) < len(plain) and got == plain[: len(got)] or len(plain) < len(got) and plain == got[: len(plain)]:
        raise AssertionError(f"{what}one answer is the other cut short ({len(plain)} vs {len(got)} tokens)")
    found = divergence(engine, list(prompt), list(plain), list(got), params)
    assert found["within_noise"], (
        f"{what}diverged from plain decoding at answer token {found['position']}, where its two best scores were "
        f"{found['gap']:.2e} apart against a batch noise of {found['noise']:.2e}"
    )
    return found


def amx_faulting_selftest(tmp_path, monkeypatch, *, plain_runs: bool) -> None:
    """llama.cpp's self-test child replaced by one that dies of SIGSEGV with its weights on AMX (and,
    with ``plain_runs``, passes with them in their plain layout); verdicts kept apart from the suite's."""
    import sys
    import textwrap

    from draftscope import paths
    from draftscope.engine.backends.llama import selftest

    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, signal, sys
        print("kernels: AVX2,AVX512,AMX_INT8", flush=True)
        if "--plain-layout" in sys.argv and {plain_runs!r}:
            print("buffers: CPU_Mapped")
            print("stage: step")
            print("ok")
            sys.exit(0)
        print("buffers: CPU_Mapped,AMX", flush=True)
        print("stage: prompt", flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    """)
    )
    monkeypatch.setattr(selftest, "CHILD_COMMAND", [sys.executable, str(script)])
    monkeypatch.setattr(paths, "llama_verdict_file", lambda: tmp_path / "verdict.json")
