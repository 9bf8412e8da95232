"""The engine: a loaded model (its backend), the stepper that drives it (engine/stepper.py), and
``generate``: one answer's events as a generator, whichever face asks (the window, the terminal,
the server, the benchmarks). An answer is a state the stepper advances (engine/answer.py); plain
decoding is the same answer with an empty tree, so baseline and speculative runs share model,
cache and logit processing. What runs the target (torch or llama.cpp) sits behind
:mod:`draftscope.engine.backends`; nothing here asks which.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import time
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from draftscope.engine.answer import Answer
from draftscope.engine.auto_threads import ThreadsChoice, choose_for
from draftscope.engine.backends import open_backend, torch_backend_for
from draftscope.engine.backends.base import Backend
from draftscope.engine.budget import cost_context, measure_verify_costs
from draftscope.engine.detokenizer import Tokenizer
from draftscope.engine.event_feed import follow, follow_async
from draftscope.engine.events import Event, FinalEvent, StepEvent
from draftscope.engine.kv_disk import KvDiskStore
from draftscope.engine.load_spec import LoadSpec
from draftscope.engine.plain_rate import MIN_SPREAD, AnswerPlainSteps, PlainRate
from draftscope.engine.policy import Calibration
from draftscope.engine.request import GenerationRequest
from draftscope.engine.stages import MEASURING_COSTS, MEASURING_SPEED, Progress, StageClock
from draftscope.engine.stepper import Stepper
from draftscope.models.resolve import ModelSource

if TYPE_CHECKING:
    import torch

__all__ = ["Engine", "GenerationRequest", "PromptTooLongError"]

log = logging.getLogger(__name__)

MIN_HELD_FOR_BASELINE = 64  # a cache holding fewer tokens is measured on the fixed prompt instead
# Plain steps are also timed at a longer context (half the model's window, at most SLOPE_CONTEXT tokens), so
# the curve's slope is known before the first long answer: without it, plain decoding there was taken at
# the short prompt's rate (a drafted answer at 1,400 tokens, 2.4x plain, was shown as 1.1x).
# Reading there costs the load time: at most SLOPE_SECONDS as the verify costs forecast it (a verify of n
# nodes reads n + 1 tokens), none where that reaches less than MIN_SPREAD tokens further.
SLOPE_CONTEXT = 1024
SLOPE_SECONDS = 8.0
SLOPE_STEPS = 8  # plain steps timed there (a bucket's mean: one step's noise is no slope)


class PromptTooLongError(ValueError):
    pass


@functools.cache
def torch_default_threads() -> int:
    """The threads torch chose for this machine, read before anyone changed them (asked where torch
    is loaded)."""
    return sys.modules["torch"].get_num_threads()


def share_cores_with(backend: Backend, threads: int | None = None) -> bool:
    """torch's CPU threads, where torch is loaded; False where it is not (nothing to do, and nothing
    loaded: on llama.cpp the sampling is NumPy's). Beside llama.cpp, torch (a recurrent head, a torch
    draft model) gets one thread: its OpenMP threads spin between ops and take the cores llama.cpp's
    threads compute on (off a process's main thread a step cost 86-100 ms instead of 62, Qwen2.5-1.5B,
    2 cores). When a torch model runs, ``threads`` (Settings ▸ Generation ▸ Threads, --threads), else
    torch's own choice."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    default = torch_default_threads()
    torch.set_num_threads(1 if backend.kind == "llama.cpp" else threads or default)
    return True


class Engine:
    """``Engine(model, tokenizer)`` runs a torch model; ``Engine(backend=...)`` any backend
    (:func:`draftscope.engine.backends.open_backend` picks and opens one)."""

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        tokenizer: Tokenizer | None = None,
        *,
        name: str = "model",
        device: torch.device | str | None = None,
        backend: Backend | None = None,
        threads: int | None = None,
        kv_store: KvDiskStore | None = None,
    ) -> None:
        """``kv_store``: conversations' caches kept on disk."""
        if backend is None:
            backend = torch_backend_for(model, tokenizer, name=name, device=device)
        self.backend = backend
        backend.keep_on_disk(kv_store)
        # torch's threads set once it is loaded: here, or at the first answer after a torch drafter loaded it
        self._torch_threads_set = share_cores_with(backend, threads)
        # every backend's tokenizer is a Hugging Face one (base.py declares it an object)
        self.tokenizer = cast(Tokenizer, backend.tokenizer)
        self.name = backend.name
        self.dtype_reason = backend.precision_reason  # why this precision (shown in the status bar)
        self.vocab = backend.vocab
        self.max_context = backend.max_context
        self.eos_ids = backend.eos_ids
        self.verify_costs: dict[int, float] | None = None
        # One thread drives the model: each answer holds a slot (its own cache) while it runs, one on
        # a backend that holds one answer, several on llama.cpp or torch opened with slots (their
        # steps then share forwards); answers that find every slot busy wait their turn.
        self.stepper = Stepper(backend)
        # What the step policy learned of each drafter's acceptance (per source), kept across answers.
        self.calibration = Calibration()
        self.drafter_gates: dict[str, dict] = {}  # which slow drafters earn their time (CompositeDrafter)
        self.baseline_tokens_per_second: float | None = None  # the last measurement's plain rate (its context)
        self.baseline_measured_at: float | None = None  # time.monotonic() of the last measurement
        # plain decoding's step time by context, from every plain step (measurements and answers')
        self.plain_rate = PlainRate()
        self.threads_asked = threads  # None or 0: Automatic (measure chooses: engine/auto_threads.py)
        self.threads_choice: ThreadsChoice | None = None  # what Automatic chose, and why

    @property
    def model(self) -> torch.nn.Module | None:
        """The torch module (None on llama.cpp): the self:N draft model, head training, HF references."""
        return self.backend.model

    @property
    def device(self) -> object:
        return self.backend.device

    @property
    def dtype(self) -> torch.dtype | None:
        """The torch dtype, or None where the backend computes in the file's own formats."""
        return self.backend.dtype

    @property
    def precision(self) -> str:
        return self.backend.precision

    @classmethod
    def load(
        cls,
        spec: LoadSpec | ModelSource | str,
        *,
        measure: bool = True,
        baseline: bool = True,
        progress: Progress | None = None,
        **options: Any,
    ) -> Engine:
        """Open ``spec`` (a LoadSpec, or a model name with LoadSpec's fields as ``options``).
        ``progress(stage)`` hears each slow part of opening by name (engine/stages.py), with how far
        it is where that is known. ``measure``: the verify costs, and with ``baseline`` the plain
        speed (the window measures that after it opens, in the background)."""
        spec = LoadSpec.of(spec, **options)
        engine = cls(backend=open_backend(spec, progress=progress), threads=spec.threads)
        if measure:
            engine.measure(baseline=baseline, progress=progress)
        return engine

    def close(self) -> None:
        """Free the model now, not at garbage collection: its thread ended (an answer still running
        ends with an error), then its native memory given back (llama.cpp's context and weights, a
        torch cache). The engine answers no more. Every slot's cache is saved first, where caches
        are kept on disk (on the model's thread, between rounds)."""
        self.save_caches()
        if self.stepper.close():  # never under a forward still running on the thread
            self.backend.close()

    def save_caches(self) -> None:
        """Save every slot's conversation where caches are kept on disk (the app quitting, the engine
        closing), on the model's thread between rounds; a failure is a log line: unsaved is only slower."""
        if self.backend.kv_cache is None:
            return
        try:
            self.stepper.call(self.backend.save_slots)
        except Exception as exc:  # closing goes on: unsaved is only slower next time
            log.warning("the conversations' KV caches were not saved: %s", exc)

    # ------------------------------------------------------------------ measuring

    def measure(self, *, baseline: bool = True, progress: Progress | None = None) -> None:
        """Verify cost by tree size (for the adaptive budget) and, with ``baseline``, plain
        tokens/s; ``progress(stage)`` hears of each (engine/stages.py). Automatic threads are
        chosen first: every figure after depends on them."""
        if not self.threads_asked:
            self.threads_choice = self.stepper.call(lambda: choose_for(self.backend, progress=progress), exclusive=True)
        self.measure_costs(progress)
        if baseline:
            self.measure_baseline(progress=progress)
        self.stepper.reset_counts()  # answers per forward count the answers', not the measurements'

    def measure_costs(self, progress: Progress | None = None) -> dict[int, float]:
        """Seconds a verify takes by tree size, measured on the stepper's thread once no answer runs."""

        def measure() -> dict[int, float]:
            return measure_verify_costs(self.backend, progress=StageClock(MEASURING_COSTS, progress))

        self.verify_costs = self.stepper.call(measure, exclusive=True)
        self.plain_rate.costs_measured(self.verify_costs, cost_context(self.max_context))
        return self.verify_costs

    def measure_baseline(self, tokens: int = 32, *, progress: Progress | None = None) -> float | None:
        """Plain decoding speed after the first token (prefill excluded): on what the model's cache
        holds (the conversation so far), so measuring again keeps its cache for the next turn, or
        on a fixed prompt when it holds little; then, while the curve has no slope, a few steps at a
        longer context (:meth:`slope_prompt`). ``progress(stage)`` hears how far it is."""
        held = self.backend.held_tokens(0)
        fits = MIN_HELD_FOR_BASELINE <= len(held) < self.max_context - tokens - 1
        prompt = held if fits else list(range(10, 138))
        clock = StageClock(MEASURING_SPEED, progress)
        slope = self.slope_prompt(len(prompt) + tokens)
        share = self._short_share(tokens, len(slope))  # of the stage's time
        final = self._plain_steps(prompt, tokens, lambda done: clock(share * done))
        self.baseline_tokens_per_second = final.stats.decode_tokens_per_second
        self.baseline_measured_at = time.monotonic()
        if slope:
            read_on = [*prompt, *final.token_ids, *slope]  # the slot's cache kept: only the rest is read
            self._plain_steps(read_on, SLOPE_STEPS + 1, lambda d: clock(share + (1 - share) * d))
        return self.baseline_tokens_per_second

    def _short_share(self, tokens: int, read: int) -> float:
        """The share of the measurement's time ``tokens`` plain steps take beside reading ``read`` more
        tokens and SLOPE_STEPS steps there, as the verify costs forecast it (half before they are known)."""
        costs = self.plain_rate.tree_costs
        if not read or not costs or costs.get(0, 0.0) <= 0:
            return 1.0 if not read else 0.5
        most = max(costs)
        short, slope = tokens * costs[0], read * costs[most] / (most + 1) + SLOPE_STEPS * costs[0]
        return short / (short + slope)

    def slope_prompt(self, held: int) -> list[int]:
        """What a cache holding ``held`` tokens reads on to time plain steps at a longer context (half
        the model's window, at most SLOPE_CONTEXT, and what SLOPE_SECONDS read), kept from the
        conversation's cache by reading on from it; empty where the curve has a slope already, or
        the window or the time leaves no room for one."""
        long = min(self.max_context // 2, SLOPE_CONTEXT)
        costs = self.plain_rate.tree_costs
        if costs and (most := max(costs)) > 0 and costs[most] > 0:  # a verify of n nodes reads n + 1 tokens
            long = min(long, held + int(SLOPE_SECONDS * (most + 1) / costs[most]))
        if self.plain_rate.spread() >= MIN_SPREAD or long - held < MIN_SPREAD:
            return []
        return [10 + (i * 37) % max(1, self.vocab - 10) for i in range(long - held)]

    def _plain_steps(self, prompt: list[int], tokens: int, done: Callable[[float], None]) -> FinalEvent:
        """Plain decoding of ``tokens`` after ``prompt`` (its steps teach the curve as an answer's do);
        ``done(fraction)`` hears how far it is."""
        req = GenerationRequest(prompt_ids=prompt, max_new_tokens=tokens)
        for event in self.generate(req, _ignore_eos=True):
            done(event.tokens_total / tokens if isinstance(event, StepEvent) else 1.0)
        return cast(FinalEvent, event)  # generate's last event is the answer's FinalEvent

    def plain_tokens_per_second(
        self, context: float | None = None, around: AnswerPlainSteps | None = None
    ) -> float | None:
        """Plain decoding's rate at ``context`` cached tokens (engine/plain_rate.py), levelled by an
        answer's own plain steps (``around``); the last measurement's figure where the curve knows
        nothing yet or no context is given. None before any plain step."""
        if context is not None:
            curve = around if around is not None else self.plain_rate
            if rate := curve.tokens_per_second(context):
                return rate
        return self.baseline_tokens_per_second

    def speedup(
        self, decode_tps: float | None, context: float | None = None, around: AnswerPlainSteps | None = None
    ) -> float | None:
        """The writing rate as a multiple of plain decoding's at the same context (None until both
        are known)."""
        plain = self.plain_tokens_per_second(context, around)
        if not decode_tps or not plain:
            return None
        return decode_tps / plain

    # ------------------------------------------------------------------ prompts

    def encode_chat(self, messages: Sequence[dict], tools: Sequence[dict] | None = None) -> list[int]:
        """The conversation as the chat template renders it; ``tools`` (OpenAI's shape) shown to the model
        by the template's own words."""
        if getattr(self.tokenizer, "chat_template", None):
            extra = {"tools": list(tools)} if tools else {}
            text = self.tokenizer.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=True, **extra
            )
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        text = "\n\n".join(m["content"] for m in messages)
        return self.tokenizer(text)["input_ids"]

    def _prompt(self, request: GenerationRequest) -> list[int]:
        """The request's prompt token ids, refused in words when the model cannot take them."""
        prompt = (
            list(request.prompt_ids)
            if request.prompt_ids is not None
            else self.encode_chat(request.messages or [], request.tools)
        )
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) >= self.max_context:
            raise PromptTooLongError(
                f"the prompt has {len(prompt):,} tokens; {self.name} reads at most {self.max_context:,} "
                "(shorten the conversation or start a new one)"
            )
        if any(not 0 <= t < self.vocab for t in prompt):
            raise ValueError(f"prompt token ids must be in [0, {self.vocab})")
        return prompt

    # ------------------------------------------------------------------ answers

    def generate(self, request: GenerationRequest, *, _ignore_eos: bool = False) -> Iterator[Event]:
        """The answer's events, a StepEvent a step and a FinalEvent last, as the stepper makes them
        (ReadingEvents first, if the request asks: ``reading_progress``).
        Closing (or dropping) the generator before the end frees the answer's slot."""
        prompt = self._prompt(request)
        self.share_cores()
        yield from follow(self.stepper, Answer(self, request, prompt, ignore_eos=_ignore_eos))

    def share_cores(self) -> None:
        """torch's threads, the first time torch is found loaded (a recurrent head or a torch draft model
        beside llama.cpp loaded it after the model opened): at each answer, and by what tunes on torch."""
        if not self._torch_threads_set:
            self._torch_threads_set = share_cores_with(self.backend, self.threads_asked)

    async def generate_async(self, request: GenerationRequest) -> AsyncGenerator[Event, None]:
        """``generate`` for a reader on an asyncio event loop (the server): the events awaited there, fed
        from the stepper's thread (engine/event_feed.py), no thread of the reader's own. Closing it
        (``contextlib.aclosing``) before the end frees the answer's slot."""
        answer = Answer(self, request, self._prompt(request))
        self.share_cores()
        async with contextlib.aclosing(follow_async(self.stepper, answer)) as events:
            async for event in events:
                yield event
