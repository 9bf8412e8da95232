"""Time to first token and tokens/s through ``draftscope serve`` (the official openai client,
streaming, over HTTP on this machine) against the same answers in process (ChatSession.run), for
the same prompts, greedy, alternating which goes first.

    python scripts/bench_server.py --questions app/draftscope/bench/spec_bench_question.jsonl --prompts 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="default")
    p.add_argument("--questions", required=True, help="Spec-Bench questions (jsonl)")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--drafters", default="context")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)

    import openai

    from draftscope.core.runtime import load_runtime
    from draftscope.core.session import ChatSession
    from draftscope.server import ServerThread, create_app
    from draftscope.storage import Settings

    questions = [json.loads(line)["turns"][0] for line in open(args.questions, encoding="utf-8")][: args.prompts]
    switches = {
        name: name in args.drafters.split(",") for name in ("retrieval", "learned", "context", "model", "recurrent")
    }
    runtime = load_runtime(
        Settings(model=args.model, max_new_tokens=args.max_tokens, temperature=0.0, drafters=switches)
    )
    engine = runtime.engine
    server = ServerThread(create_app(runtime), port=0).start()
    client = openai.OpenAI(base_url=server.url, api_key="unused")

    def in_process(q: str) -> tuple[float, float, int, str]:
        session = ChatSession(runtime)
        session.say(q)
        t0 = time.perf_counter()
        first = []
        session.events.step.connect(lambda _ev: first or first.append(time.perf_counter()))
        final = session.run(session.request(), keep=False)
        total = time.perf_counter() - t0
        return first[0] - t0, final.stats.tokens / total, final.stats.tokens, final.text

    def served(q: str) -> tuple[float, float, int, str]:
        t0 = time.perf_counter()
        first, text, tokens = None, [], 0
        for chunk in client.chat.completions.create(
            model=engine.name,
            messages=[{"role": "user", "content": q}],
            max_tokens=args.max_tokens,
            temperature=0,
            stream=True,
        ):
            ext = (chunk.model_extra or {}).get("draftscope") or {}
            if first is None and ext.get("tokens"):
                first = time.perf_counter()
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
            tokens = ext.get("stats", {}).get("tokens", tokens)
        total = time.perf_counter() - t0
        return first - t0, tokens / total, tokens, "".join(text)

    served(questions[0])  # warm both paths
    in_process(questions[0])
    rows = {"in process": [], "server": []}
    same = 0
    for r in range(args.rounds):
        for i, q in enumerate(questions):
            order = [("in process", in_process), ("server", served)]
            if (i + r) % 2:
                order.reverse()
            texts = {}
            for name, fn in order:
                ttft, tps, tokens, text = fn(q)
                rows[name].append((ttft, tps, tokens))
                texts[name] = text
            same += texts["in process"] == texts["server"]
    server.stop()
    n = len(rows["server"])
    print(
        f"{engine.name} on {engine.backend.describe()}, drafters {args.drafters}, "
        f"{len(questions)} Spec-Bench first turns x {args.rounds} rounds, greedy, max {args.max_tokens} tokens; "
        f"Python {sys.version.split()[0]}"
    )
    print("| path | time to first token, median ms | tokens/s, median | tokens/s, mean |")
    print("|---|---:|---:|---:|")
    for name, values in rows.items():
        ttft = statistics.median(v[0] for v in values) * 1000
        tps = [v[1] for v in values]
        print(f"| {name} | {ttft:.1f} | {statistics.median(tps):.1f} | {statistics.mean(tps):.1f} |")
    a = statistics.median(v[1] for v in rows["server"]) / statistics.median(v[1] for v in rows["in process"])
    print(f"\nserver / in process tokens/s: {a:.3f}; same text in {same}/{n} answers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
