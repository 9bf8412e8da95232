"""The llama.cpp backend (llama-cpp-python's low-level API): a GGUF file opened as it is, with
no de-quantisation, and a whole draft tree verified in one ``llama_decode``.

How a tree becomes one batch: every leaf of the tree gets a sequence id; a node belongs to the
sequences of all leaves below it, and the root to every one. llama.cpp lets a token attend to
the cached cells that share its (first) sequence id and sit at an earlier or equal position, so
each node sees exactly the committed prefix (copied into every leaf's sequence first, which in a
unified KV cache only tags the cells), its ancestors and itself. Commit keeps the sequence of a
leaf below the last accepted node, cuts it after that node and makes it sequence 0 again.

Several answers at once (``slots``): answer slot k owns the sequence ids [k·L, (k+1)·L), L leaves
each, and its own share of the cache's cells; ``decode_many`` puts the prefill chunks and draft
trees of several slots in one ``llama_decode`` (the stepper, engine/stepper.py, gathers them). The
single-answer calls (start, verify, commit, truncate) are slot 0's, through the one slot view
(engine/backends/base.py's SlotView).

Token ids must be the ones datastores hold: the backend tokenizes with the Hugging Face tokenizer
converted from the GGUF (the one datastores are built with); ``tokenize`` gives llama.cpp's own, to
check that the two agree.
"""

from __future__ import annotations

import ctypes
import re
from pathlib import Path

import numpy as np

from draftscope.draft_tree import leaves_below
from draftscope.engine.backends.base import Backend, Verified
from draftscope.engine.backends.held import HeldTokens, KeepsPrefixes
from draftscope.engine.backends.llama import llama_state
from draftscope.engine.backends.llama.llama_batching import MAX_SEQUENCES, batch_sizes, work_problem
from draftscope.engine.backends.llama.llama_cores import ChangesThreads
from draftscope.engine.backends.llama.llama_lib import LlamaCppError, last_error
from draftscope.engine.backends.llama.llama_lib import lib as _lib
from draftscope.engine.backends.llama.llama_thread import default_threads, serialised
from draftscope.engine.backends.llama.rpc import (
    THIS_COMPUTER,
    connect_workers,
    gguf_layers,
    layer_split,
    memory_per_machine,
)
from draftscope.engine.backends.work import MAX_TREE, PREFILL_BATCH, Prefill
from draftscope.rules import LLAMA_CONTEXT

DEFAULT_CONTEXT = LLAMA_CONTEXT


class LlamaCppBackend(ChangesThreads, KeepsPrefixes, Backend):
    kind = "llama.cpp"
    leaves: int  # set at load (batch_sizes): every slot has its sequences
    batch_capacity: int
    gives_hidden = True  # final hidden states in the same decode as the logits (embeddings, pooling none)
    reads_in_chunks = True

    def __init__(
        self,
        path: str | Path,
        tokenizer,
        *,
        name: str | None = None,
        context: int = DEFAULT_CONTEXT,
        threads: int | None = None,
        gpu_layers: int = 0,
        slots: int = 1,
        workers: list[str] | None = None,
        repacked: bool = True,
    ) -> None:
        """``repacked``: let llama.cpp copy the weights at load into the layouts of this CPU's fastest
        kernels (AMX tiles, interleaved AVX rows); off where those kernels crash (llama_verdict)."""
        if not 1 <= slots <= MAX_SEQUENCES:
            raise ValueError(f"slots (answers at once) must be between 1 and {MAX_SEQUENCES}, not {slots}")
        L = _lib()
        self._L = L
        self.path = Path(path)
        self.tokenizer = tokenizer
        self.name = name or self.path.stem
        self.device = "cpu" if gpu_layers == 0 else "gpu"
        self.offload = None  # where the layers on a card went (gpu_offload.open_on_card sets it)
        self.offload_notice: str | None = None
        self._load_model(gpu_layers, workers, repacked)
        self._read_model_sizes(context)
        self.threads = threads or default_threads()
        cells = self._size_slots_and_batches(slots)
        self._open_context(cells)
        self._memory = L.llama_get_memory(self._ctx)
        self._batch = L.llama_batch_init(self.batch_capacity, 0, self.leaves)
        self._describe_model()
        self._collect_end_tokens(tokenizer)
        self._past = [0] * slots  # positions each slot's cache holds
        self.held = HeldTokens(slots)  # the tokens at those positions: a new prompt keeps what it shares
        self._last_seqs: list[list[tuple[int, ...]] | None] = [None] * slots

    def _load_model(self, gpu_layers: int, workers: list[str] | None, repacked: bool) -> None:
        L = self._L
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = gpu_layers
        mparams.use_extra_bufts = repacked
        self.repacked = repacked
        self.split: dict[str, int] = {}  # layers per machine, when workers share the model
        if workers:
            self._offload_to_workers(mparams, workers)
        self._model = L.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self._model:
            raise LlamaCppError(
                f"llama.cpp could not load {self.path.name}: {last_error() or 'damaged file or unsupported model'}"
            )

    def _read_model_sizes(self, context: int) -> None:
        L = self._L
        self._vocab = L.llama_model_get_vocab(self._model)
        self.vocab = int(L.llama_vocab_n_tokens(self._vocab))
        self.hidden_size = int(L.llama_model_n_embd(self._model))
        trained = int(L.llama_model_n_ctx_train(self._model))
        trained = trained if trained > 0 else context  # a file may leave it out (0) or hold nonsense
        self.max_context = min(context, trained)

    def _size_slots_and_batches(self, slots: int) -> int:
        """Sets the slot, tree and batch sizes; returns the context's cells."""
        self.slots = slots
        self._sizes = batch_sizes(slots, self.max_context)
        self.leaves, self.batch_capacity = self._sizes.leaves, self._sizes.batch_capacity
        self.prefill_batch, self.max_tree = self._sizes.prefill_batch, self._sizes.max_tree
        return self._sizes.cells

    def _describe_model(self) -> None:
        buf = ctypes.create_string_buffer(128)
        self._L.llama_model_desc(self._model, buf, len(buf))
        self.description = buf.value.decode(errors="replace")  # e.g. "qwen2 1.5B Q4_K - Medium"
        self.precision = _quantisation(self.path, self.description)
        self.precision_reason = "as stored in the GGUF file (llama.cpp computes with it directly)"

    def _collect_end_tokens(self, tokenizer) -> None:
        self.eos_ids = {t for t in range(self.vocab) if self._L.llama_vocab_is_eog(self._vocab, t)}
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            self.eos_ids.add(eos)

    def _open_context(self, cells: int) -> None:
        L = self._L
        cparams = L.llama_context_default_params()
        cparams.n_ctx = cells
        cparams.n_batch = self.batch_capacity
        cparams.n_ubatch = PREFILL_BATCH
        cparams.n_seq_max = self.slots * self.leaves
        cparams.kv_unified = True  # one cache whose cells carry sequence tags: copying a prefix is free
        cparams.pooling_type = L.LLAMA_POOLING_TYPE_NONE  # hidden states, when asked for, per token
        cparams.n_threads = self.threads
        cparams.n_threads_batch = self.threads
        self._ctx = L.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            L.llama_model_free(self._model)
            self._model = None
            raise LlamaCppError(
                f"llama.cpp could not make a context of {self.max_context:,} tokens for {self.path.name} "
                "(not enough memory?)"
            )

    def _offload_to_workers(self, mparams, workers: list[str]) -> None:
        """The model's layers shared between this computer and llama.cpp RPC workers (equal shares)."""
        devices = connect_workers(workers)
        layers = gguf_layers(self.path)
        remote, shares = layer_split(layers, devices)
        self._devices = (ctypes.c_void_p * (len(devices) + 1))(*[d.device for d in devices], None)
        self._tensor_split = (ctypes.c_float * max(len(devices), int(self._L.llama_max_devices())))(*shares)
        mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        mparams.n_gpu_layers = remote
        mparams.tensor_split = self._tensor_split
        self.split = {THIS_COMPUTER: layers - remote}
        per_device = _spread(remote, len(devices))
        for d, n in zip(devices, per_device):
            self.split[d.endpoint] = self.split.get(d.endpoint, 0) + n
        self.device = "cpu + workers"

    def describe(self) -> str:
        where = ""
        if self.split:
            try:  # the KV cache of every slot's positions, as the context holds them
                memory = memory_per_machine(self.path, self.split, self.slots * (self.max_context + MAX_TREE + 1))
            except Exception:  # an estimate only; the split itself is still shown
                memory = {}
            where = " · layers " + ", ".join(
                f"{n} on {m}" + (f" (~{_size(memory[m])})" if m in memory else "") for m, n in self.split.items()
            )
        kernels = "" if self.repacked else " · without repacked kernels"
        card = f" · {self.offload.words()}" if self.offload else ""
        return f"llama.cpp · {self.precision}{card} · {self.threads} threads{kernels}{where}"

    def brief(self) -> str:
        card = f" · {self.offload.brief()}" if self.offload else ""
        return f"llama.cpp · {self.precision}{card}"

    # ------------------------------------------------------------------ slots

    def slot_cached(self, slot: int) -> int:
        return self._past[slot]

    def _seq(self, slot: int, leaf: int = 0) -> int:
        return slot * self.leaves + leaf

    @serialised
    def clear_slot(self, slot: int) -> None:
        """Forget the slot's answer: every cell tagged with one of its sequences is freed."""
        for leaf in range(self.leaves):
            self._L.llama_memory_seq_rm(self._memory, self._seq(slot, leaf), -1, -1)
        self._past[slot] = 0
        self._last_seqs[slot] = None
        self.held.clear(slot)

    copies_slots = True

    @serialised
    def copy_slot(self, source: int, target: int, length: int) -> None:
        """In the unified cache a copy only tags ``source``'s first ``length`` cells with ``target``'s sequence."""
        if not 0 <= length <= self._past[source] or source == target:
            raise ValueError(
                f"slot {source} holds {self._past[source]} positions: {length} cannot be copied to {target}"
            )
        self.clear_slot(target)
        self._L.llama_memory_seq_cp(self._memory, self._seq(source), self._seq(target), 0, length)
        self._past[target] = length
        self.held.copy(source, target, length)

    @serialised
    def decode_many(self, work: dict) -> dict:
        """One ``llama_decode`` for several slots' Prefill and Verify items; a Verified for each
        Verify (the Prefill items' positions join their slot's cache). An item that cannot be
        decoded gets its error as its result; the others are decoded without it."""
        L = self._L
        entries: list[tuple] = []  # (token, position, sequences, wants a row out)
        outputs: dict[int, tuple[int, int]] = {}  # slot -> (its first entry, its rows)
        failed: dict[int, Exception] = {}
        for slot, item in work.items():
            problem = work_problem(slot, item, self._past[slot], self.slots, self._sizes)
            if problem is not None:
                failed[slot] = ValueError(problem)
        work = {slot: item for slot, item in work.items() if slot not in failed}
        hidden = any(item.want_hidden for item in work.values())
        if hidden:
            work = self._last_tokens_apart(work, failed)
        for slot, item in work.items():
            base = self._past[slot]
            if isinstance(item, Prefill):
                if item.want_hidden:  # its last token's row: the hidden state asked for
                    outputs[slot] = (len(entries) + len(item.tokens) - 1, 1)
                entries += [
                    (tok, base + k, (self._seq(slot),), item.want_hidden and k == len(item.tokens) - 1)
                    for k, tok in enumerate(item.tokens)
                ]
                continue
            outputs[slot] = (len(entries), len(item.tree) + 1)
            entries += self._tree_entries(slot, item, base)
        if not entries:
            return failed
        if len(entries) > self.batch_capacity:
            raise ValueError(f"{len(entries)} tokens in one forward; this context takes at most {self.batch_capacity}")
        self._fill(entries)
        if hidden:  # llama.cpp then outputs every token of the batch: logits and final hidden states
            L.llama_set_embeddings(self._ctx, True)
        try:
            self._decode(len(entries))
        finally:
            if hidden:
                L.llama_set_embeddings(self._ctx, False)
        for slot, item in work.items():
            if isinstance(item, Prefill):
                self.held.read(slot, item.start, item.tokens)
                self._past[slot] += len(item.tokens)
        out: dict[int, np.ndarray | Verified] = {}
        for slot, (first, rows) in outputs.items():
            # llama.cpp numbers output rows by the batch tokens that asked for logits, in order (all, with hidden states)
            row = first if hidden else sum(1 for e in entries[:first] if e[3])
            if isinstance(work[slot], Prefill):
                out[slot] = self._rows(L.llama_get_embeddings, row, 1, self.hidden_size)[0]
                continue
            states = self._rows(L.llama_get_embeddings, row, rows, self.hidden_size) if work[slot].want_hidden else None
            out[slot] = Verified(self._rows(L.llama_get_logits, row, rows, self.vocab), states)
        return {**out, **failed}

    def _tree_entries(self, slot: int, item, base: int) -> list[tuple]:
        """The batch entries of a slot's root and tree: every leaf's sequence first gets the committed
        prefix, and each node goes in the sequences of the leaves below it."""
        L, tree = self._L, item.tree
        seqs = leaves_below(tree)
        leaves = sorted({s for node in seqs for s in node}) or [0]
        for leaf in leaves:
            if leaf != 0:
                L.llama_memory_seq_rm(self._memory, self._seq(slot, leaf), -1, -1)
                L.llama_memory_seq_cp(self._memory, self._seq(slot), self._seq(slot, leaf), -1, -1)
        mine = [tuple(self._seq(slot, leaf) for leaf in node) for node in seqs]
        self._last_seqs[slot] = mine
        self.held.verifying(slot, item.root, tree.tokens)
        return [
            (item.root, base, tuple(self._seq(slot, leaf) for leaf in leaves), True),
            *((int(tree.tokens[i]), base + int(tree.depth[i]), mine[i], True) for i in range(len(tree))),
        ]

    @serialised
    def read_rows(self, slot: int, tokens: list[int], *, greedy: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """The final hidden state of every token of ``tokens`` [T, hidden] (float32), read from the start
        in ``slot`` (its answer is forgotten, before and after), and with ``greedy`` the most likely next
        token after each [T] (int64): what training a recurrent head reads of the model."""
        L = self._L
        if not tokens or len(tokens) > self.max_context:
            raise ValueError(f"a sequence of {len(tokens)} tokens; between 1 and {self.max_context} can be read")
        hidden, best = [], []
        self.clear_slot(slot)
        L.llama_set_embeddings(self._ctx, True)
        try:
            for at in range(0, len(tokens), self.prefill_batch):
                chunk = tokens[at : at + self.prefill_batch]
                self._fill([(tok, at + k, (self._seq(slot),), True) for k, tok in enumerate(chunk)])
                self._decode(len(chunk))
                hidden.append(self._rows(L.llama_get_embeddings, 0, len(chunk), self.hidden_size))
                if greedy:  # read in place: a chunk's logits are ~0.6 MB a token for a 152k vocabulary
                    pointer = ctypes.cast(L.llama_get_logits(self._ctx), ctypes.POINTER(ctypes.c_float))
                    logits = np.ctypeslib.as_array(pointer, shape=(len(chunk), self.vocab))
                    best.append(logits.argmax(-1).astype(np.int64))
                self._past[slot] += len(chunk)
        finally:
            L.llama_set_embeddings(self._ctx, False)
            self.clear_slot(slot)
        return np.concatenate(hidden), np.concatenate(best) if greedy else None

    def _last_tokens_apart(self, work: dict, failed: dict) -> dict:
        """Prompt chunks that want their last token's hidden state are read without it first, but for
        that token: with hidden states on llama.cpp computes every token's logits, a chunk's worth."""
        ahead = {
            slot: Prefill(item.tokens[:-1], item.start)
            for slot, item in work.items()
            if isinstance(item, Prefill) and item.want_hidden and len(item.tokens) > 1
        }
        if not ahead:
            return work
        failed.update({slot: e for slot, e in self.decode_many(ahead).items() if isinstance(e, Exception)})
        return {
            slot: (
                Prefill(item.tokens[-1:], item.start + len(item.tokens) - 1, want_hidden=True)
                if slot in ahead
                else item
            )
            for slot, item in work.items()
            if slot not in failed
        }

    def _rows(self, getter, first: int, rows: int, width: int) -> np.ndarray:
        """Rows of the last decode's logits or hidden states (``getter``), float32, copied out of
        llama.cpp's buffer (which the next decode reuses) straight into an array: np.ctypeslib's array
        view cost a tenth of a millisecond a step."""
        out = np.empty((rows, width), dtype=np.float32)
        # the buffer is there after a decode that asked for these rows (None: a NULL pointer)
        source = ctypes.cast(getter(self._ctx), ctypes.c_void_p).value + first * width * 4  # type: ignore[operator]
        ctypes.memmove(out.ctypes.data, source, rows * width * 4)
        return out

    @serialised
    def commit_slot(self, slot: int, path: list[int]) -> None:
        """Keep the slot's verified root and ``path``: every other branch of its tree goes (other
        slots are untouched), and the kept branch becomes the slot's first sequence again."""
        L = self._L
        seqs, past = self._last_seqs[slot], self._past[slot]
        self.held.committed(slot, past, path)
        self._past[slot] = past + 1 + len(path)
        self._last_seqs[slot] = None
        keep = seqs[path[-1]][0] if path else self._seq(slot)  # type: ignore[index]  # a path: after its verify
        base = self._seq(slot)
        used = {s for node in seqs for s in node} | {base} if seqs else {base}
        for s in used:
            if s != keep:
                L.llama_memory_seq_rm(self._memory, s, -1, -1)
        L.llama_memory_seq_rm(self._memory, keep, past + 1 + len(path), -1)
        if keep != base:
            L.llama_memory_seq_cp(self._memory, keep, base, -1, -1)
            L.llama_memory_seq_rm(self._memory, keep, -1, -1)

    @serialised
    def truncate_slot(self, slot: int, length: int) -> None:
        L = self._L
        base = self._seq(slot)
        for leaf in range(1, self.leaves):
            L.llama_memory_seq_rm(self._memory, self._seq(slot, leaf), -1, -1)
        L.llama_memory_seq_rm(self._memory, base, length, -1)
        self._past[slot] = min(self._past[slot], length)
        self._last_seqs[slot] = None
        self.held.cut(slot, length)

    # ------------------------------------------------------------------ caches on disk (llama_state.py)

    saves_slots = True

    def cache_identity(self) -> dict:
        return llama_state.llama_identity(self)

    @serialised
    def export_slot(self, slot: int) -> bytes | None:
        return llama_state.export_state(self, slot)

    @serialised
    def import_slot(self, slot: int, tokens: list[int], positions: int, state: bytes) -> bool:
        return llama_state.import_state(self, slot, tokens, positions, state)

    # ------------------------------------------------------------------ tokens (llama.cpp's own)

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """llama.cpp's own ids for ``text`` (no BOS added): what datastores' ids are checked against."""
        data = text.encode()
        size = len(data) + 8
        buf = (self._L.llama_token * size)()
        n = self._L.llama_tokenize(self._vocab, data, len(data), buf, size, False, special)
        if n < 0:
            buf = (self._L.llama_token * -n)()
            n = self._L.llama_tokenize(self._vocab, data, len(data), buf, -n, False, special)
        return list(buf[:n])

    # ------------------------------------------------------------------ internals

    def _fill(self, entries) -> None:
        b = self._batch
        for i, (tok, pos, seq_ids, wants_logits) in enumerate(entries):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = len(seq_ids)
            for j, s in enumerate(seq_ids):
                b.seq_id[i][j] = s
            b.logits[i] = wants_logits
        b.n_tokens = len(entries)

    def _decode(self, n: int) -> None:
        code = self._L.llama_decode(self._ctx, self._batch)
        if code == 1:
            raise LlamaCppError(f"the llama.cpp context ({self.max_context:,} tokens) is full")
        if code != 0:
            raise LlamaCppError(f"llama_decode failed (code {code}) on a batch of {n} tokens")

    def close(self) -> None:
        L = self._L
        if getattr(self, "_batch", None) is not None:
            L.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "_ctx", None):
            L.llama_free(self._ctx)
            self._ctx = None
        if getattr(self, "_model", None):
            L.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _size(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


def _spread(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` whole numbers as equal as can be."""
    return [total // parts + (1 if k < total % parts else 0) for k in range(parts)]


def _quantisation(path: Path, description: str) -> str:
    """The quantisation as users know it from file names ("Q4_K_M"), else llama.cpp's words."""
    found = re.search(r"(?i)(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|F16|BF16|F32)(?=[-_.]|$)", path.stem)
    if found:
        return found.group(1).upper()
    return description.split(" ", 2)[-1] if description else "GGUF"
