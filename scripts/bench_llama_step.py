"""Where a plain step's time goes on llama.cpp (issue 40): the engine's plain loop on a fixed prompt,
the time inside ``llama_decode`` taken apart from the rest of the step (``decode_many``: the batch,
the logits copy; then choosing the token and the commit; then events). ``--reference main`` then runs
llama-cpp-python's own loop from the main thread (a second OpenMP team in the process, as bench spec's
reference did), ``--reference ours`` on the thread that drives our model (its stepper), and times our steps after it (one per process: a
team, once made, stays).

    python scripts/bench_llama_step.py [--model qwen2.5-coder-1.5b] [--rounds 3] [--reference main|ours]
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="qwen2.5-coder-1.5b")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--reference", choices=("main", "ours"), default=None)
    args = p.parse_args()

    from draftscope.engine.backends.llama import llamacpp
    from draftscope.engine.engine import Engine, GenerationRequest

    engine = Engine.load(args.model, backend="llama.cpp", measure=False)
    inner: list[float] = []
    decode = llamacpp.LlamaCppBackend._decode

    def timed(self, n):
        t0 = time.perf_counter()
        try:
            return decode(self, n)
        finally:
            inner.append(time.perf_counter() - t0)

    llamacpp.LlamaCppBackend._decode = timed
    calls: list[float] = []  # decode_many as the stepper calls it: the batch, llama_decode, the logits copy
    forward = llamacpp.LlamaCppBackend.decode_many

    def timed_forward(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            return forward(self, *a, **kw)
        finally:
            calls.append(time.perf_counter() - t0)

    llamacpp.LlamaCppBackend.decode_many = timed_forward
    prompt = list(range(1000, 1120))

    def ours(label: str) -> None:
        inner.clear()
        calls.clear()
        t0 = time.perf_counter()
        events = list(engine.generate(GenerationRequest(prompt_ids=prompt, max_new_tokens=args.tokens)))
        total = time.perf_counter() - t0
        steps = [e for e in events[:-1] if hasattr(e, "total_ms")]
        print(
            f"{label}: {len(prompt) - 1}-token prompt {inner[0] * 1000:.0f} ms; a step: llama_decode "
            f"{statistics.median(inner[1:]) * 1000:.2f} ms, decode_many {statistics.median(calls[1:]) * 1000:.2f} ms, "
            f"after choosing and commit {statistics.median(e.verify_ms for e in steps):.2f} ms, "
            f"whole step {statistics.median(e.total_ms for e in steps):.2f} ms; "
            f"answer {total * 1000:.0f} ms for {len(events[-1].token_ids)} tokens",
            flush=True,
        )

    for r in range(args.rounds):
        ours(f"round {r + 1}")
    if args.reference is None:
        return
    import llama_cpp

    backend = engine.backend
    options = dict(
        model_path=str(backend.path),
        n_ctx=backend.max_context,
        n_threads=backend.threads,
        n_threads_batch=backend.threads,
        verbose=False,
    )

    def reference(llm) -> float:
        t0 = time.perf_counter()
        llm.reset()
        llm.eval(prompt)
        for _ in range(args.tokens):
            llm.eval([int(llm.sample(top_k=1))])
        return time.perf_counter() - t0

    if args.reference == "main":
        seconds = reference(llama_cpp.Llama(**options))
    else:
        seconds = engine.stepper.call(lambda: reference(llama_cpp.Llama(**options)))  # the model's own thread
    print(
        f"llama-cpp-python's loop ({args.tokens} tokens) from the {args.reference} thread: {seconds * 1000:.0f} ms",
        flush=True,
    )
    for r in range(args.rounds):
        ours(f"ours after it, round {r + 1}")


if __name__ == "__main__":
    main()
