"""What a caller asks of the engine for one answer: :class:`GenerationRequest` (``Engine.generate`` takes
it; engine/answer.py reads it). Here, below both, so an answer's types name it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from draftscope.engine.drafting import Drafting
from draftscope.rules import SamplingParams


@dataclass
class GenerationRequest:
    prompt_ids: Sequence[int] | None = None
    messages: Sequence[dict] | None = None  # rendered with the chat template when prompt_ids is None
    tools: Sequence[dict] | None = None  # shown to the model by the chat template with ``messages``
    max_new_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    drafters: Sequence[Drafting] = ()  # empty: plain decoding
    budget: int | None = None  # nodes per step; None = adaptive
    stop_strings: Sequence[str] = ()
    cancel: threading.Event | None = None
    # keep what the cache shares with the prompt (the conversation so far) and read only the rest;
    # False reads the whole prompt again (benchmarks that time prompt reading alike for every method)
    keep_cache: bool = True
    # ReadingEvents while the prompt is read (a long prompt then reads in parts of READ_CHUNK tokens):
    # for a face that shows it (the window); off, the events are StepEvents and a FinalEvent only
    reading_progress: bool = False
    # a read ahead (max_new_tokens 0, before Send): the lowest priority on the stepper; any other answer
    # takes its slot within one reading chunk, and what it read stays in the slot's cache
    background: bool = False
    # end the answer when its tail repeats one unit verbatim (engine/loop_guard.py): finish "loop", every token
    # before the stop plain decoding's. Off here (benchmarks and measurements see the bare engine); the
    # faces ask for it from Settings ▸ Generation (stop_loops)
    stop_loops: bool = False
    # a grammar every token keeps valid (llguidance's; engine/grammar.py's json_grammar makes one from a JSON
    # schema): verify rows are sampled under its masks, drafts it forbids cut. None: free text
    grammar: str | None = None
    # the model's own logprob of each said token and of this many most likely ones at its position
    # (engine/logprobs.py: the raw logits', the same with drafting on or off); None: none computed
    logprobs: int | None = None
