"""Issue 67: the decoder runs on llama.cpp with torch hidden as if not installed (tests/no_torch's
sitecustomize on a child's PYTHONPATH, which notes every try of Draftscope's code to import torch):
a GGUF opened on llama.cpp answers plainly and with drafts (the context drafter, a draft model on
llama.cpp: the same GGUF drafting for itself), greedy and at T > 0, with logprobs and a JSON grammar,
and nothing of Draftscope's tries torch. Its answers are the ones this process (torch loaded) gets
from the same backend, and drafted answers are plain decoding's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf
from llama_helpers import assert_plain_or_near_tie, need_llama_cpp

need_llama_cpp()

HIDER = Path(__file__).parents[1] / "no_torch" / "sitecustomize.py"

# ``run(gguf, folder)``: the engine and its answers, plain and drafted, greedy and at T > 0, and one under a
# JSON grammar. The child runs it with torch hidden; this process runs the same code.
ANSWERS = r"""
import json, sys
from transformers import AutoTokenizer
from draftscope.drafters import ContextDrafter
from draftscope.drafters.model_drafter import ModelDrafter
from draftscope.engine.backends.llama.llamacpp import LlamaCppBackend
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.grammar import json_grammar
from draftscope.engine.sampling import SamplingParams

CASES = {
    "greedy": SamplingParams(),
    "t0.8": SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repetition_penalty=1.1, seed=5),
}


def run(gguf, folder):
    tokenizer = AutoTokenizer.from_pretrained(folder)
    engine = Engine(backend=LlamaCppBackend(gguf, tokenizer, context=512, threads=1))
    engine.eos_ids = set()
    draft = LlamaCppBackend(gguf, None, context=512, threads=1)
    prompt = tokenizer("def main():\n    print('hello world')\ndef main():", add_special_tokens=False)["input_ids"]
    out = {"prompt": prompt}
    for name, sampling in CASES.items():
        for drafted in (False, True):
            drafters = [ContextDrafter(), ModelDrafter(draft, max_tokens=3)] if drafted else []
            request = GenerationRequest(
                prompt_ids=prompt, max_new_tokens=24, sampling=sampling, drafters=drafters, logprobs=2,
                budget=6 if drafted else None,
            )
            final = list(engine.generate(request))[-1]
            assert final.error is None, final.error
            out[f"{name}-{'drafted' if drafted else 'plain'}"] = {
                "tokens": final.token_ids,
                "accepted": sum(final.stats.accepted_by_source.values()),
                "logprobs": [x.logprob for x in final.logprobs],
            }
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": False}
    request = GenerationRequest(
        prompt_ids=prompt, max_new_tokens=32, sampling=CASES["t0.8"], drafters=[ContextDrafter()],
        grammar=json_grammar(schema),
    )
    final = list(engine.generate(request))[-1]
    assert final.error is None, final.error
    out["json"] = {"text": final.text, "finish": final.finish_reason}
    draft.close()
    return engine, out


if __name__ == "__main__":
    engine, out = run(sys.argv[1], sys.argv[2])
    engine.close()
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory) -> Path:
    model = tiny_llama(len(tokenizer), seed=3, sharpen=4.0)
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", model, tokenizer_dir)


def hidden_answers(gguf: Path, tokenizer_dir: Path, tries: Path) -> dict:
    """The answers of a child with torch hidden; its tries of torch noted in ``tries``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HIDER.parent), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "DRAFTSCOPE_TORCH_TRIES": str(tries),
    }
    done = subprocess.run(
        [sys.executable, "-c", ANSWERS, str(gguf), str(tokenizer_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_llama_cpp_answers_with_torch_hidden_and_never_tries_it(gguf, tokenizer_dir, tmp_path):
    tries = tmp_path / "torch-tries.txt"
    child = hidden_answers(gguf, tokenizer_dir, tries)
    assert not tries.exists() or tries.read_text() == "", "torch was tried:\n" + tries.read_text()
    for name in ("greedy", "t0.8"):
        assert child[f"{name}-drafted"]["accepted"] > 0, f"{name}: no draft accepted, the drafted case proves little"
    said = child["json"]
    assert said["finish"] == "eos" and isinstance(json.loads(said["text"])["n"], int), said  # what the schema accepts
    namespace: dict = {"__name__": "answers"}
    exec(ANSWERS, namespace)
    engine, here = namespace["run"](str(gguf), str(tokenizer_dir))
    try:
        for name, params in namespace["CASES"].items():
            plain = here[f"{name}-plain"]
            assert child[f"{name}-plain"] == plain, (
                f"{name}: plain decoding without torch is not what torch's process gets"
            )
            assert len(plain["tokens"]) == 24
            for got in (here[f"{name}-drafted"], child[f"{name}-drafted"]):  # the drafted trees may differ: a slow
                # drafter sits out by its time (drafters/composite.py), and batch shape moves llama.cpp's logits
                assert len(got["tokens"]) == 24
                assert_plain_or_near_tie(engine, here["prompt"], plain["tokens"], got["tokens"], params, f"{name}: ")
    finally:
        engine.close()
