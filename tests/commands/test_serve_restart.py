"""``draftscope serve`` stopped as a service manager stops it (SIGTERM) saves its conversations'
caches, and the server started again restores one instead of reading it again (issue 61): real
processes, SmolLM2 on llama.cpp, a real HTTP client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx2 as httpx
import pytest

from draftscope.bench.serve_clients import _free_port

DOCUMENT = "The boiler is serviced every 18 months by a registered engineer; the warranty needs it. " * 12


def start(home, port: int) -> subprocess.Popen:
    env = {**os.environ, "DRAFTSCOPE_DATA_DIR": str(home / "data"), "DRAFTSCOPE_CONFIG_DIR": str(home / "config")}
    command = [sys.executable, "-m", "draftscope", "serve", "--model", "default", "--port", str(port)]
    server = subprocess.Popen([*command, "--parallel", "1", "--no-history", "--drafters", "none"], env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert server.poll() is None, "the server ended while starting"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.3)
    server.kill()
    raise AssertionError("the server did not come up")


def ask(port: int, messages: list[dict]) -> dict:
    body = {"model": "default", "messages": messages, "max_tokens": 4, "temperature": 0}
    reply = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=300)
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.mark.network
def test_a_server_stopped_by_sigterm_restores_the_conversation_when_started_again(tmp_path):
    port = _free_port()
    turn = [{"role": "user", "content": f"{DOCUMENT}\nHow often is the boiler serviced?"}]
    server = start(tmp_path, port)
    try:
        first = ask(port, turn)
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0, "SIGTERM is a stop, not a crash"
    assert list((tmp_path / "data" / "kv-caches").glob("*.kvc")), "the conversation's cache was saved"

    server = start(tmp_path, port)
    try:
        follow_up = [*turn, first["choices"][0]["message"], {"role": "user", "content": "Who services it?"}]
        again = ask(port, follow_up)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= first["usage"]["prompt_tokens"] - 1, "the first turn came back from disk, not read again"
