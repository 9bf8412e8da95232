"""The llama.cpp backend (llama-cpp-python's low-level API): a GGUF file opened as it is, with
no de-quantisation, and a whole draft tree verified in one ``llama_decode``.

How a tree becomes one batch: every leaf of the tree gets a sequence id; a node belongs to the
sequences of all leaves below it, and the root to every one. llama.cpp lets a token attend to
the cached cells that share its (first) sequence id and sit at an earlier or equal position, so
each node sees exactly the committed prefix (copied into every leaf's sequence first, which in a
unified KV cache only tags the cells), its ancestors and itself. Commit keeps the sequence of a
leaf below the last accepted node, cuts it after that node and makes it sequence 0 again.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import torch

from draftscope.draft_tree import DraftTree
from draftscope.engine.backends.base import Backend, Verified
from draftscope.engine.backends.llama_lib import LlamaCppError, last_error
from draftscope.engine.backends.llama_lib import lib as _lib

MAX_LEAVES = 64  # sequence ids per tree: a tree of the policy's largest size (64 nodes) fits
DEFAULT_CONTEXT = 4096  # as catalog.LLAMA_CONTEXT (the memory estimate)
PREFILL_BATCH = 512

def default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class LlamaCppBackend(Backend):
    kind = "llama.cpp"
    gives_hidden = False  # see Engine: the recurrent head asks for the torch backend

    def __init__(self, path: str | Path, tokenizer, *, name: str | None = None, context: int = DEFAULT_CONTEXT,
                 threads: int | None = None, gpu_layers: int = 0) -> None:
        L = _lib()
        self._L = L
        self.path = Path(path)
        self.tokenizer = tokenizer
        self.name = name or self.path.stem
        self.device = "cpu" if gpu_layers == 0 else "gpu"
        mparams = L.llama_model_default_params()
        mparams.n_gpu_layers = gpu_layers
        self._model = L.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self._model:
            raise LlamaCppError(f"llama.cpp could not load {self.path.name}: {last_error() or 'damaged file or unsupported model'}")
        self._vocab = L.llama_model_get_vocab(self._model)
        self.vocab = int(L.llama_vocab_n_tokens(self._vocab))
        trained = int(L.llama_model_n_ctx_train(self._model))
        trained = trained if trained > 0 else context  # a file may leave it out (0) or hold nonsense
        self.max_context = min(context, trained)
        self.threads = threads or default_threads()
        cparams = L.llama_context_default_params()
        # Room for a whole tree past the last position an answer may reach: tree siblings take
        # cells too. (llama.cpp also aborts on a context smaller than its sequence count.)
        cparams.n_ctx = self.max_context + MAX_LEAVES + 1
        cparams.n_batch = PREFILL_BATCH
        cparams.n_ubatch = PREFILL_BATCH
        cparams.n_seq_max = MAX_LEAVES
        cparams.kv_unified = True  # one cache whose cells carry sequence tags: copying a prefix is free
        cparams.n_threads = self.threads
        cparams.n_threads_batch = self.threads
        self._ctx = L.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            L.llama_model_free(self._model)
            self._model = None
            raise LlamaCppError(f"llama.cpp could not make a context of {self.max_context:,} tokens for {self.path.name} "
                                "(not enough memory?)")
        self._memory = L.llama_get_memory(self._ctx)
        self._batch = L.llama_batch_init(PREFILL_BATCH, 0, MAX_LEAVES)
        buf = ctypes.create_string_buffer(128)
        L.llama_model_desc(self._model, buf, len(buf))
        self.description = buf.value.decode(errors="replace")  # e.g. "qwen2 1.5B Q4_K - Medium"
        self.precision = _quantisation(self.path, self.description)
        self.precision_reason = "as stored in the GGUF file (llama.cpp computes with it directly)"
        self.eos_ids = {t for t in range(self.vocab) if L.llama_vocab_is_eog(self._vocab, t)}
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            self.eos_ids.add(eos)
        self._past = 0

    def describe(self) -> str:
        return f"llama.cpp · {self.precision} · {self.threads} threads"

    @property
    def cached(self) -> int:
        return self._past

    # ------------------------------------------------------------------ the loop's calls

    def start(self, prompt: list[int], *, want_hidden: bool = False) -> None:
        L = self._L
        L.llama_memory_clear(self._memory, False)
        self._past = 0
        prefix = prompt[:-1]
        for at in range(0, len(prefix), PREFILL_BATCH):
            chunk = prefix[at : at + PREFILL_BATCH]
            self._fill([(tok, at + k, (0,)) for k, tok in enumerate(chunk)], outputs=False)
            self._decode(len(chunk))
            self._past = at + len(chunk)
        return None

    def verify(self, root: int, tree: DraftTree, *, want_hidden: bool = False) -> Verified:
        L = self._L
        n = len(tree)
        seqs = _leaf_sequences(tree)
        leaves = sorted({s for node in seqs for s in node}) or [0]
        if len(leaves) > MAX_LEAVES:
            raise ValueError(f"a draft tree of {len(leaves)} leaves; llama.cpp verifies at most {MAX_LEAVES}")
        for s in leaves:
            if s != 0:  # every leaf's sequence starts from the committed prefix
                L.llama_memory_seq_rm(self._memory, s, -1, -1)
                L.llama_memory_seq_cp(self._memory, 0, s, -1, -1)
        entries = [(root, self._past, tuple(leaves))]
        entries += [(int(tree.tokens[i]), self._past + int(tree.depth[i]), seqs[i]) for i in range(n)]
        self._fill(entries, outputs=True)
        self._decode(n + 1)
        self._last_seqs = seqs
        rows = L.llama_get_logits(self._ctx)
        logits = np.ctypeslib.as_array(rows, shape=(n + 1, self.vocab)).copy()
        return Verified(torch.from_numpy(logits))

    def commit(self, path: list[int]) -> None:
        L = self._L
        keep = self._last_seqs[path[-1]][0] if path else 0
        L.llama_memory_seq_keep(self._memory, keep)  # drops every cell no longer on the kept branch
        L.llama_memory_seq_rm(self._memory, keep, self._past + 1 + len(path), -1)
        if keep != 0:
            L.llama_memory_seq_cp(self._memory, keep, 0, -1, -1)
            L.llama_memory_seq_rm(self._memory, keep, -1, -1)
        self._past += 1 + len(path)

    def truncate(self, length: int) -> None:
        L = self._L
        L.llama_memory_seq_keep(self._memory, 0)
        L.llama_memory_seq_rm(self._memory, 0, length, -1)
        self._past = min(self._past, length)

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

    def _fill(self, entries, *, outputs: bool) -> None:
        b = self._batch
        for i, (tok, pos, seq_ids) in enumerate(entries):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = len(seq_ids)
            for j, s in enumerate(seq_ids):
                b.seq_id[i][j] = s
            b.logits[i] = outputs
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


def _leaf_sequences(tree: DraftTree) -> list[tuple[int, ...]]:
    """For each node, the sequence ids of the leaves below it (leaf k in node order gets id k);
    a node's first id is the one llama.cpp masks it by, any of its leaves will do."""
    n = len(tree)
    below: list[list[int]] = [[] for _ in range(n)]
    for k, leaf in enumerate(tree.leaves()):
        node = int(leaf)
        while node != -1:
            below[node].append(k)
            node = int(tree.parents[node])
    return [tuple(s) for s in below]


def _quantisation(path: Path, description: str) -> str:
    """The quantisation as users know it from file names ("Q4_K_M"), else llama.cpp's words."""
    import re

    found = re.search(r"(?i)(?:^|[-_.])((?:I?Q\d(?:_[A-Z0-9]+)*)|F16|BF16|F32)(?=[-_.]|$)", path.stem)
    if found:
        return found.group(1).upper()
    return description.split(" ", 2)[-1] if description else "GGUF"
