"""A served answer the loop guard stopped (issue 62): OpenAI's finish_reason is "stop" (the server's
own stop rule: "length" would tell a client the answer wants more), and the draftscope extension
names the engine's own reason, "loop"."""

from draftscope.engine.events import FinalEvent, MessageStats
from draftscope.server import responses as protocol


def test_a_loop_is_a_stop_to_openai_clients_and_a_loop_in_the_extension():
    final = FinalEvent("loop", "a lone owl, a lone owl,", [1, 2, 3], MessageStats(3, 1, 3.0, 10.0, 5.0, 0.3, None))
    reply = protocol.chat_response("id", "tiny", final, prompt_tokens=4)
    assert reply["choices"][0]["finish_reason"] == "stop"
    assert reply["draftscope"]["finish_reason"] == "loop"
    assert protocol.finish_reason("length") == "length" and protocol.finish_reason("eos") == "stop"
