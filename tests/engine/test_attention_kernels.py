"""Each torch step runs on an attention kernel the backend chose: on CUDA, plain steps and prefill
on flash attention and tree steps on the math kernel, never cuDNN's (which plans per shape: 0.5-1.2 s
at every new cache length on an H100), except in steps replayed as graphs, whose shapes are fixed. Read off the dispatch flags at each attention call, not
off timings; and the answers stay plain decoding's."""

import pytest
import torch
from engine_fixtures import tiny_llama
from torch.nn.attention import SDPBackend

from draftscope.draft_tree import chain_tree
from draftscope.drafters import ContextDrafter
from draftscope.engine.backends.pytorch.attention import kernel_names, kernels_for
from draftscope.engine.backends.pytorch.torch_backend import TorchBackend
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams


def test_the_kernel_table():
    assert kernels_for("cuda", tree=False)[0] == SDPBackend.FLASH_ATTENTION
    assert kernels_for("cuda", tree=True) == [SDPBackend.MATH]
    for tree in (False, True):
        assert SDPBackend.CUDNN_ATTENTION not in kernels_for("cuda", tree=tree)
        assert kernels_for("cpu", tree=tree) is None, "the CPU keeps PyTorch's own choice"
    assert kernel_names("cuda") == "flash attention, math for trees"
    # steps replayed as graphs have one shape each: cuDNN plans once, at capture; math is the fallback
    assert kernels_for("cuda", tree=True, graph=True) == [SDPBackend.CUDNN_ATTENTION, SDPBackend.MATH]
    assert kernels_for("cpu", tree=True, graph=True) is None


class Dispatch:
    """Which SDPA kernels were allowed at each attention call, and with how many queries."""

    def __init__(self, monkeypatch) -> None:
        self.calls = []
        real = torch.nn.functional.scaled_dot_product_attention

        def spy(query, key, value, attn_mask=None, *args, **kwargs):
            allowed = {
                name
                for name, on in (
                    ("flash", torch.backends.cuda.flash_sdp_enabled()),
                    ("efficient", torch.backends.cuda.mem_efficient_sdp_enabled()),
                    ("math", torch.backends.cuda.math_sdp_enabled()),
                    ("cudnn", torch.backends.cuda.cudnn_sdp_enabled()),
                )
                if on
            }
            self.calls.append((query.shape[-2], attn_mask is not None, allowed))
            return real(query, key, value, attn_mask, *args, **kwargs)

        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)


@pytest.fixture
def cuda_policy_backend(tokenizer):
    """A CPU model whose backend follows CUDA's kernel policy (the choice is made by device type;
    the CPU runs every kernel the policy may name but cuDNN)."""
    model = tiny_llama(len(tokenizer), seed=2, sharpen=4.0)
    assert model.config._attn_implementation == "sdpa"
    backend = TorchBackend(model, tokenizer, name="tiny")
    backend.kernel_device = "cuda"
    return backend


def test_plain_steps_and_prefill_on_flash_tree_steps_on_math(cuda_policy_backend, monkeypatch):
    dispatch = Dispatch(monkeypatch)
    backend = cuda_policy_backend
    backend.start(list(range(5, 25)))
    prefill = list(dispatch.calls)
    dispatch.calls.clear()
    backend.verify(30, chain_tree([]))
    backend.commit([])
    plain = list(dispatch.calls)
    dispatch.calls.clear()
    backend.verify(31, chain_tree([40, 41, 42]))
    tree = list(dispatch.calls)
    assert prefill and plain and tree
    assert all(q == 19 and "flash" in allowed and "cudnn" not in allowed for q, _, allowed in prefill)
    assert all(q == 1 and "flash" in allowed and "cudnn" not in allowed for q, _, allowed in plain)
    assert all(q == 4 and has_mask and allowed == {"math"} for q, has_mask, allowed in tree)
    # outside a step the process's own settings are back
    assert torch.backends.cuda.cudnn_sdp_enabled() and torch.backends.cuda.flash_sdp_enabled()


@pytest.mark.parametrize("params", [SamplingParams(), SamplingParams(temperature=0.9, seed=4)], ids=["greedy", "T0.9"])
def test_answers_on_the_chosen_kernels_are_plain_decodings(cuda_policy_backend, tokenizer, params):
    """fp32: token for token, with drafts accepted."""
    engine = Engine(backend=cuda_policy_backend)
    engine.eos_ids = set()
    ids = tokenizer("def main():\n    print('hello world')\n" * 3, add_special_tokens=False)["input_ids"]
    plain = list(engine.generate(GenerationRequest(prompt_ids=ids, max_new_tokens=40, sampling=params)))[-1]
    drafted = list(
        engine.generate(
            GenerationRequest(
                prompt_ids=ids, max_new_tokens=40, sampling=params, drafters=[ContextDrafter()], budget=12
            )
        )
    )[-1]
    assert drafted.token_ids == plain.token_ids
    if params.greedy:
        assert drafted.stats.accepted_by_source.get("context", 0) > 0
