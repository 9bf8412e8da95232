"""What a second thread calling llama.cpp costs the first (issue 53's bench gpu finding): one-token
decodes timed on a thread after another thread (here the main one) has decoded, against the same on
threads alone. llama.cpp's OpenMP threads belong to the thread that calls it, so the app keeps every
computation on the engine's one thread (llama_thread.serialised hops other threads' calls there).

    python scripts/probe_llama_threads.py MODEL.gguf [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time


def open_context(L, model, threads: int):
    params = L.llama_context_default_params()
    params.n_threads = params.n_threads_batch = threads
    params.n_ctx, params.n_batch, params.n_ubatch = 4096, 512, 256
    return L.llama_init_from_model(model, params)


def decode_ms(L, model, threads: int, prompt: int = 119, steps: int = 64) -> float:
    """Median milliseconds of a one-token decode after a ``prompt``-token one, on a fresh context."""
    ctx = open_context(L, model, threads)
    batch = L.llama_batch_init(512, 0, 1)

    def decode(tokens: list[int], first: int) -> None:
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, first + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, i == len(tokens) - 1
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    decode(list(range(100, 100 + prompt)), 0)
    times = []
    for k in range(steps):
        t0 = time.perf_counter()
        decode([200 + k], prompt + k)
        times.append((time.perf_counter() - t0) * 1000)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    return statistics.median(times)


def on_a_new_thread(fn) -> float:
    out = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    worker.join()
    return out[0]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    from draftscope.engine.backends.llama.llama_lib import lib

    L = lib()
    model = L.llama_model_load_from_file(args.model.encode(), L.llama_model_default_params())
    if not model:
        raise SystemExit(f"llama.cpp could not load {args.model}")

    def run() -> float:
        return decode_ms(L, model, args.threads)

    print(f"a thread alone:                       {on_a_new_thread(run):6.2f} ms a token")
    print(f"another thread alone:                 {on_a_new_thread(run):6.2f} ms a token")
    print(f"the main thread:                      {run():6.2f} ms a token")
    print(f"a thread after the main one decoded:  {on_a_new_thread(run):6.2f} ms a token")


if __name__ == "__main__":
    main()
