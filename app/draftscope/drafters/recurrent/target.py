"""What the recurrent head needs of its target model, whichever backend runs it.

A head reads the target's sizes and identity, its input embeddings (the tokens it drafts are fed
back through them), its output rows (a fresh head starts from them, training scores the draft
vocabulary with them) and, to be trained, the target's final hidden states and greedy next
tokens over whole sequences. ``TorchTarget`` reads them from a transformers model;
``GgufTarget`` from a GGUF file (embedding and output rows de-quantised on demand by the ``gguf``
package, as transformers does when it loads the same file) and from llama.cpp, which computes the
hidden states in the same decode as the logits. No torch copy of a GGUF model is made.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from draftscope.engine.backends.llama.gguf_check import gguf_reader

IDENTITY_ROWS = 64  # output rows hashed at each end of the vocabulary (files.target_identity)


class TorchTarget:
    def __init__(self, model) -> None:
        self.model = model
        cfg = model.config
        self.architecture = str(getattr(cfg, "model_type", ""))
        self.hidden = int(cfg.hidden_size)
        self.layers = int(getattr(cfg, "num_hidden_layers", 0))
        self.vocab = int(cfg.vocab_size)
        self.embed = model.get_input_embeddings()
        self.embed_width = int(self.embed.weight.shape[1])
        first = next(model.parameters())
        self.device, self.dtype = first.device, str(first.dtype).removeprefix("torch.")

    def output_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """The output layer's rows for token ``ids``, float32 [n, hidden], on the model's device."""
        return self.model.get_output_embeddings().weight.detach()[ids.to(self.device)].float()

    def edge_rows(self) -> torch.Tensor:
        lm = self.model.get_output_embeddings().weight.detach()
        return torch.cat([lm[:IDENTITY_ROWS], lm[-IDENTITY_ROWS:]]).float().cpu()

    def outputs(self, ids: torch.Tensor, *, greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Final hidden states [B, T, hidden] (float32) of token sequences ``ids`` [B, T] read from
        their start, and with ``greedy`` the model's most likely next token after each position."""
        self.model.eval()
        with torch.no_grad():
            out = self.model(
                input_ids=ids.to(self.device), output_hidden_states=True, logits_to_keep=0 if greedy else 1
            )
            return out.hidden_states[-1].float(), out.logits.argmax(-1) if greedy else None


class GgufRows(nn.Module):
    """A GGUF tensor's rows as an embedding: ``module(ids)`` de-quantises the rows asked for."""

    def __init__(self, tensor) -> None:
        super().__init__()
        self._tensor = tensor  # a gguf ReaderTensor: rows of the file, memory-mapped
        self.rows, self.width = int(tensor.shape[1]), int(tensor.shape[0])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        from gguf import dequantize  # noqa: PLC0415  # gguf: heavy (TID253's list), only for a GGUF model's head

        flat = ids.reshape(-1).cpu().numpy()
        unique, where = np.unique(flat, return_inverse=True)
        rows = dequantize(self._tensor.data[unique], self._tensor.tensor_type).reshape(len(unique), self.width)
        return torch.from_numpy(np.ascontiguousarray(rows[where], dtype=np.float32)).reshape(*ids.shape, self.width)


class GgufTarget:
    """A GGUF model on the llama.cpp backend. ``pool`` (the engine's slots): training reads its
    sequences in a slot of its own, waiting while every slot holds an answer."""

    def __init__(self, backend, pool=None) -> None:
        self.backend, self.pool = backend, pool
        reader = gguf_reader(backend.path)
        field = reader.fields["general.architecture"]
        self.architecture = bytes(field.parts[field.data[0]]).decode(errors="replace")
        blocks = reader.fields.get(f"{self.architecture}.block_count")
        self.layers = int(blocks.parts[blocks.data[0]][0]) if blocks is not None else 0
        self.hidden = int(backend.hidden_size)
        self.vocab = int(backend.vocab)
        tensors = {t.name: t for t in reader.tensors}
        self.embed = GgufRows(tensors["token_embd.weight"])
        # a file without an output layer ties it to the embeddings (transformers reads it the same way)
        self._output = GgufRows(tensors.get("output.weight", tensors["token_embd.weight"]))
        self.embed_width = self.embed.width
        self.device, self.dtype = torch.device("cpu"), str(backend.precision)

    def output_rows(self, ids: torch.Tensor) -> torch.Tensor:
        return self._output(ids.reshape(-1))

    def edge_rows(self) -> torch.Tensor:
        n = self._output.rows
        return self._output(torch.cat([torch.arange(IDENTITY_ROWS), torch.arange(n - IDENTITY_ROWS, n)]))

    def outputs(self, ids: torch.Tensor, *, greedy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """As TorchTarget.outputs, from llama.cpp: each sequence read in a slot of the engine's."""
        rows = [[int(t) for t in row] for row in ids.tolist()]
        if self.pool is None:
            read = [self.backend.read_rows(0, row, greedy=greedy) for row in rows]
        else:  # a slot of the model's own, read on its stepper's thread between the answers' rounds
            with self.pool.lease() as slot:
                read = [
                    self.pool.call(lambda row=row: self.backend.read_rows(slot, row, greedy=greedy)) for row in rows
                ]
        # llama.cpp's rows are NumPy's (the engine needs no torch for them): the head's are tensors
        hidden = torch.stack([torch.as_tensor(h) for h, _ in read])
        return hidden, torch.stack([torch.as_tensor(g) for _, g in read]) if greedy else None


def as_target(model_or_target):
    """A target view of a transformers model (or the target itself)."""
    return model_or_target if hasattr(model_or_target, "outputs") else TorchTarget(model_or_target)
