"""Several answers on one engine at once, each on a thread of its own: the harness the parallel
tests on llama.cpp and on torch share (their prompts, samplings, a plain answer, answers side by
side, and a count of the answers each forward held)."""

from __future__ import annotations

import threading

from draftscope.drafters import ContextDrafter
from draftscope.engine.engine import GenerationRequest
from draftscope.engine.sampling import SamplingParams

# Prompts that repeat themselves: the conversation's drafts are accepted in every answer.
PROMPTS = [
    "one two three four five one two three four five one two",
    "red green blue red green blue red green",
    "a b c d e f a b c d e f a b c",
    "the cat sat on the mat the cat sat on the",
]
SAMPLED = [SamplingParams(temperature=0.9, top_p=0.95, seed=100 + i) for i in range(len(PROMPTS))]
GREEDY = [SamplingParams()] * len(PROMPTS)


def ids_of(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def answer(engine, ids, params, drafted: bool, tokens: int = 40):
    request = GenerationRequest(
        prompt_ids=ids,
        max_new_tokens=tokens,
        sampling=params,
        drafters=[ContextDrafter()] if drafted else [],
        budget=6 if drafted else None,
    )
    return list(engine.generate(request))[-1]


def side_by_side(engine, prompts, params, drafted=True, requests=None):
    """Every prompt answered at once, each on a thread of its own (``requests``, when given, are
    asked as they are instead of answer()'s)."""
    finals = [None] * len(prompts)
    start = threading.Barrier(len(prompts))

    def run(i):
        start.wait()
        if requests is None:
            finals[i] = answer(engine, prompts[i], params[i], drafted)
        else:
            finals[i] = list(engine.generate(requests[i]))[-1]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return finals


def forwards_seen(monkeypatch, backend_class) -> list[int]:
    """How many answers each of ``backend_class``'s forwards (decode_many) held."""
    sizes = []
    decode = backend_class.decode_many

    def counting(self, work):
        sizes.append(len(work))
        return decode(self, work)

    monkeypatch.setattr(backend_class, "decode_many", counting)
    return sizes


def fail_one_step_and_cancel(monkeypatch, backend_class, cancel: threading.Event) -> None:
    """``backend_class``'s 8th forward sets ``cancel``; its 12th fails one answer's step inside the
    shared forward (the others' results come back)."""
    decode = backend_class.decode_many
    forwards = []

    def failing(self, work):
        forwards.append(len(work))
        if len(forwards) == 12:
            victim = max(work)
            out = decode(self, {s: w for s, w in work.items() if s != victim})
            return {**out, victim: ValueError("this answer's step failed")}
        if len(forwards) == 8:
            cancel.set()
        return decode(self, work)

    monkeypatch.setattr(backend_class, "decode_many", failing)


def ending_requests(prompts, stop_text: str, cancel: threading.Event) -> list[GenerationRequest]:
    """Drafted, sampled requests of 40 tokens: the second stops at ``stop_text``, the third is
    cancelled by ``cancel``."""
    requests = [
        GenerationRequest(prompt_ids=ids, max_new_tokens=40, sampling=params, drafters=[ContextDrafter()], budget=6)
        for ids, params in zip(prompts, SAMPLED)
    ]
    requests[1].stop_strings = [stop_text]
    requests[2].cancel = cancel
    return requests
