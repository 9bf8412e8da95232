"""Do datastores get llama.cpp's own token ids? Tokenises Spec-Bench turns (and a chat-templated
prompt per question) with the tokenizer that builds datastores and with ``llama_tokenize`` on the
same GGUF, and prints how many agree, with the first disagreement.

    python scripts/check_llama_tokens.py --model qwen2.5-coder-1.5b --questions app/draftscope/bench/spec_bench_question.jsonl
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from draftscope.engine.engine import Engine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--questions", type=Path, required=True)
    args = ap.parse_args()
    engine = Engine.load(args.model, backend="llama.cpp", measure=False)
    tok, backend = engine.tokenizer, engine.backend
    texts = []
    for line in args.questions.read_text().splitlines():
        q = json.loads(line)
        texts.extend(q["turns"])
        texts.append(
            tok.apply_chat_template(
                [{"role": "user", "content": q["turns"][0]}], tokenize=False, add_generation_prompt=True
            )
        )
    differ = [t for t in texts if tok(t, add_special_tokens=False)["input_ids"] != backend.tokenize(t)]
    tokens = sum(len(backend.tokenize(t)) for t in texts)
    print(
        f"{engine.name}: {len(texts) - len(differ)} of {len(texts)} texts ({tokens:,} tokens) tokenised to "
        "the same ids by the datastore tokenizer and llama_tokenize"
    )
    if differ:
        t = differ[0]
        a, b = tok(t, add_special_tokens=False)["input_ids"], backend.tokenize(t)
        k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        print(f"first difference at token {k} of {t[:60]!r}...: {a[k : k + 5]} vs {b[k : k + 5]}")


if __name__ == "__main__":
    main()
