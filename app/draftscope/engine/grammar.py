"""Answers held to a grammar (a JSON schema, any JSON object): every token must keep the text a prefix
of the grammar's language. The grammar engine is llguidance (the one llama.cpp and vLLM use): plain
Python wheels with no torch, a mask of a 152k vocabulary in ~0.1 ms on a CPU.

Exactness: the grammar is part of the sampling rule. Each verify row's logits are masked with the
grammar's mask at that row's prefix (the answer so far, then the path to its node) before the one rule
(engine/sampling.py) picks its token, so the answer is the one plain decoding under the same mask
writes, for any drafts. Drafts the grammar forbids are cut before the forward: they could never be
accepted, and a forward spent on them is lost. Where the grammar forces the next tokens (a key, the quote
and colon after it, an enum's only continuation) they are drafted as a chain (``ForcedDrafts``), so one
forward can read a whole run of them; they are drafts like any other, checked by the same rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from draftscope.draft_tree import DraftSource, DraftTree, chain_tree, children_lists, subtree
from draftscope.engine import arrays as A

# JSON as json.dumps writes it (", " and ": ", no other whitespace): the grammar then fixes every byte
# between values, so a model's whitespace habits cannot run an answer into its length limit
JSON_STYLE: Any = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class GrammarError(ValueError):
    """A grammar or schema that cannot be used; its words name the problem."""


def json_grammar(schema: dict | None) -> str:
    """The grammar of JSON text matching ``schema`` (None: any JSON object, OpenAI's ``json_object``)."""
    from llguidance import LLMatcher

    if schema is not None and not isinstance(schema, dict):
        raise GrammarError(f"a JSON schema is an object, not {type(schema).__name__}")
    try:
        grammar = LLMatcher.grammar_from_json_schema({"type": "object"} if schema is None else schema, JSON_STYLE)
    except (ValueError, TypeError, RuntimeError) as exc:
        raise GrammarError(f"the JSON schema cannot be used: {exc}") from exc
    problem = LLMatcher.validate_grammar(grammar)
    if problem:
        raise GrammarError(f"the JSON schema cannot be used: {problem}")
    return grammar


def gbnf_grammar(text: str) -> str:
    """The grammar of a GBNF text (llama.cpp's grammar format, its rule ``root`` the answer; llguidance's
    own Lark is read too). One that cannot be compiled is a GrammarError, never an answer without it."""
    from llguidance import LLMatcher, grammar_from

    try:
        grammar = grammar_from("gbnf", text)
    except (ValueError, RecursionError) as exc:  # its converter's words, without its preamble
        problem = str(exc).removeprefix("Failed to convert the grammar from GBNF to Lark: ")
        raise GrammarError(f"the GBNF grammar cannot be used: {problem}") from exc
    problem = LLMatcher.validate_grammar(grammar)
    if problem:
        raise GrammarError(f"the GBNF grammar cannot be used: {problem}")
    return grammar


# llguidance's vocabularies, by tokenizer (its build serializes the tokenizer, ~0.25 s, then ~3 s for 152k
# tokens): a few models' worth, the tokenizer held so its id cannot be reused
_VOCABULARIES: dict[int, tuple[Any, tuple, Any]] = {}
_KEPT = 4


def vocabulary_of(tokenizer: Any, width: int, eos_ids: Iterable[int]) -> Any:
    """llguidance's view of the model's vocabulary (built once per model): ``width`` the logits' width
    (at least), ``eos_ids`` the tokens that end an answer (allowed once the text is complete)."""
    from llguidance import LLTokenizer

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise GrammarError("this model's tokenizer is not a fast tokenizer: grammars need one")
    ends = tuple(sorted(int(t) for t in eos_ids))
    if not ends and getattr(tokenizer, "eos_token_id", None) is not None:  # EOS ignored: the grammar still needs one
        ends = (int(tokenizer.eos_token_id),)
    # the tokenizer may know tokens past the logits (added ones): they stay masked, the logits lack them
    key = (max(int(width), int(backend.get_vocab_size(with_added_tokens=True))), ends)
    held = _VOCABULARIES.get(id(tokenizer))
    if held is not None and held[0] is tokenizer and held[1] == key:
        return held[2]
    try:
        vocabulary = LLTokenizer(backend.to_str(), n_vocab=key[0], eos_token=list(ends) or None)
    except (ValueError, RuntimeError) as exc:
        raise GrammarError(f"this model's tokenizer cannot be read for grammars: {exc}") from exc
    if len(_VOCABULARIES) >= _KEPT:
        _VOCABULARIES.pop(next(iter(_VOCABULARIES)))
    _VOCABULARIES[id(tokenizer)] = (tokenizer, key, vocabulary)
    return vocabulary


class Constraint:
    """One answer's place in its grammar: the masks its verify rows are sampled under, its drafts cut
    to what the grammar allows, and the tokens it said consumed."""

    def __init__(self, grammar: str, vocabulary: Any) -> None:
        from llguidance import LLMatcher

        self.matcher = LLMatcher(vocabulary, grammar, log_level=0)
        if self.matcher.is_error():
            raise GrammarError(f"the grammar cannot be used: {self.matcher.get_error()}")
        self.words = (vocabulary.vocab_size + 31) // 32
        self.ends = set(vocabulary.eos_tokens)  # the tokens that end an answer, allowed once the text is complete
        self._anything = np.full(self.words, 0xFFFFFFFF, dtype=np.uint32)

    def plan(self, tree: DraftTree) -> tuple[DraftTree, np.ndarray]:
        """The tree cut to the nodes the grammar allows down their paths, and each verify row's mask
        (the root's, then each kept node's, as uint32 words of allowed-token bits)."""
        masks = {-1: self._mask()}
        keep = np.zeros(len(tree), dtype=bool)
        consumed = 0
        kids, tokens, depth = children_lists(tree), tree.tokens.tolist(), tree.depth.tolist()
        stack = list(reversed(kids.get(-1, [])))
        try:
            while stack:
                node = stack.pop()
                parent = int(tree.parents[node])
                base = depth[parent] if parent >= 0 else 0
                self._rollback(consumed - base)
                consumed = base
                if not _allows(masks[parent], tokens[node]):
                    continue  # the node, and all below it, could never be accepted
                keep[node] = True
                if tokens[node] in self.ends:  # the answer ends here: its row is never sampled from
                    masks[node] = self._anything
                    continue
                if not self.matcher.consume_token(tokens[node]):
                    raise RuntimeError(f"the grammar refused a token it allowed: {self.matcher.get_error()}")
                consumed += 1
                masks[node] = self._mask()
                stack.extend(reversed(kids.get(node, [])))
        finally:
            self._rollback(consumed)
        rows = [masks[-1]] + [masks[i] for i in np.flatnonzero(keep).tolist()]
        return subtree(tree, keep), np.stack(rows)

    def consume(self, tokens: Sequence[int]) -> None:
        """The tokens the answer said (each sampled under its mask, so the grammar takes them); an end
        token is the answer's end, not the grammar's (which stopped when its text was complete)."""
        for token in tokens:
            if int(token) in self.ends:
                return
            if not self.matcher.consume_token(int(token)):
                raise RuntimeError(f"the grammar refused a token it allowed: {self.matcher.get_error()}")

    def _rollback(self, tokens: int) -> None:
        if tokens and not self.matcher.rollback(tokens):  # a wrong state would give wrong masks: never silently
            raise RuntimeError(f"the grammar could not step back {tokens} tokens: {self.matcher.get_error()}")

    def _mask(self) -> np.ndarray:
        return np.frombuffer(self.matcher.compute_bitmask(), dtype=np.uint32).copy()


class ForcedDrafts:
    """A drafter of the tokens the grammar forces next (what every sentence of it continues with, as
    the tokenizer writes it): a chain, proposed beside the request's drafters where an answer drafts.
    Drafts, not certainties: the model may spell the same bytes with other tokens, and the verify
    decides as for any draft."""

    name = "grammar"
    source = DraftSource.GRAMMAR
    wants_hidden = False

    def __init__(self, constraint: Constraint) -> None:
        self.constraint = constraint

    def propose(self, context_ids: Sequence[int], budget: int) -> DraftTree:
        forced = self.constraint.matcher.compute_ff_tokens()[: max(0, budget)]
        return chain_tree(forced, int(self.source)) if forced else DraftTree.empty()

    def set_sampling(self, params: Any, noise: Any) -> None:
        pass

    def reset(self, context_ids: Sequence[int]) -> None:
        pass

    def observe(self, accepted_ids: Sequence[int]) -> None:
        pass

    def set_hidden(self, hidden: Any) -> None:
        pass

    def feedback(self, tree: DraftTree, accepted_path: Sequence[int]) -> None:
        pass


def _allows(mask: np.ndarray, token: int) -> bool:
    return 0 <= token < mask.size * 32 and bool((int(mask[token >> 5]) >> (token & 31)) & 1)


def masked(logits: Any, masks: np.ndarray) -> Any:
    """Rows of logits (NumPy's or torch's) with every token the row's mask forbids at -inf (the
    vocabulary past the mask's bits too)."""
    bits = np.unpackbits(masks.view(np.uint8), axis=1, bitorder="little").astype(bool)
    width = logits.shape[-1]
    allowed = np.zeros((bits.shape[0], width), dtype=bool)
    shared = min(width, bits.shape[1])
    allowed[:, :shared] = bits[:, :shared]
    return A.masked_fill(logits, A.like(~allowed, logits), A.NEG_INF)
