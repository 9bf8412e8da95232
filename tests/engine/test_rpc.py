"""Models bigger than one machine (issue 33): a GGUF's layers split between this computer and
llama.cpp RPC workers (``draftscope worker``, a real llama.cpp RPC server, on localhost here).
The answer is the model's own; a worker that cannot be reached, is not a llama.cpp worker, stops
answering or dies mid-answer gives a message naming it, the app's process lives on, the answer so
far stays, and the next answer opens the model again."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from llama_helpers import assert_plain_or_near_tie, llama_cpp_required, need_llama_cpp

need_llama_cpp()

from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf

from draftscope.drafters import ContextDrafter
from draftscope.engine.backends import open_backend
from draftscope.engine.backends.llama.isolated import IsolatedLlamaBackend
from draftscope.engine.backends.llama.llama_lib import LlamaCppError
from draftscope.engine.backends.llama.rpc import WorkerError, parse_workers, rpc_supported
from draftscope.engine.engine import Engine, GenerationRequest
from draftscope.engine.sampling import SamplingParams
from draftscope.storage import Settings

PROMPT = "one two three four five one two three four five one two"


def need_rpc():
    if not rpc_supported():
        if llama_cpp_required():
            pytest.fail(
                "llama-cpp-python was built without RPC (scripts/setup.sh builds it with GGML_RPC=ON)", pytrace=False
            )
        pytest.skip("llama-cpp-python was built without RPC")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_worker(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "draftscope", "worker", "--port", str(port), "--threads", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"draftscope worker exited: {proc.stdout.read()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.1)
    proc.kill()
    pytest.fail("draftscope worker did not listen")


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    model = tiny_llama(len(tokenizer), seed=3, sharpen=32.0, layers=4)  # peaked: sampled answers repeat too
    return write_tiny_gguf(tmp_path_factory.mktemp("rpc") / "tiny-F32.gguf", model, tokenizer_dir)


@pytest.fixture
def worker():
    need_rpc()
    port = free_port()
    proc = start_worker(port)
    yield f"127.0.0.1:{port}", proc
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)


def ids_of(tokenizer):
    return tokenizer(PROMPT, add_special_tokens=False)["input_ids"]


def run(engine, ids, params, drafted=True, tokens=32):
    request = GenerationRequest(
        prompt_ids=ids,
        max_new_tokens=tokens,
        sampling=params,
        drafters=[ContextDrafter()] if drafted else [],
        budget=6 if drafted else None,
    )
    return list(engine.generate(request))


# ---------------------------------------------------------------- addresses


def test_worker_addresses_are_read_and_bad_ones_refused_in_words():
    assert parse_workers(" 10.0.0.2:50052, box.local:6000 ") == ["10.0.0.2:50052", "box.local:6000"]
    assert parse_workers("") == [] and parse_workers(None) == []
    for bad, words in [
        ("10.0.0.2", "not a worker address"),
        ("host:0", "not a worker address"),
        ("host:99999", "not a worker address"),
        ("a:1,a:1", "listed twice"),
        ("ho st:5", "not a worker address"),
    ]:
        with pytest.raises(WorkerError, match=words):
            parse_workers(bad)
    assert any(p.startswith("workers must be host:port") for p in Settings(workers="nonsense").problems())
    assert Settings(workers="127.0.0.1:50052").problems() == []


def test_workers_for_a_model_that_opens_on_torch_are_refused_in_words(gguf):
    with pytest.raises(ValueError, match="workers share a model's layers on llama.cpp"):
        open_backend(str(gguf), backend="torch", workers=["127.0.0.1:50052"])


def test_the_memory_each_machine_holds_is_estimated_from_the_gguf(gguf):
    """Its layers' tensors as stored, their f16 KV cache; on this computer also the embeddings and output."""
    from gguf import GGUFReader

    from draftscope.engine.backends.llama.rpc import memory_per_machine

    reader = GGUFReader(str(gguf))
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    layer = [sum(n for name, n in sizes.items() if name.startswith(f"blk.{i}.")) for i in range(4)]
    rest = sum(sizes.values()) - sum(layer)
    fields = {
        k: int(f.parts[-1][0]) for k, f in reader.fields.items() if k.startswith("llama.") and len(f.parts[-1]) == 1
    }
    kv = (
        100
        * fields["llama.attention.head_count_kv"]
        * 2
        * (fields["llama.embedding_length"] // fields["llama.attention.head_count"])
        * 2
    )
    memory = memory_per_machine(gguf, {"this computer": 1, "a:1": 2, "b:2": 1}, positions=100)
    assert memory == {"this computer": layer[0] + kv + rest, "a:1": layer[1] + layer[2] + 2 * kv, "b:2": layer[3] + kv}
    assert rest > 0 and min(layer) > 0


# ---------------------------------------------------------------- a real worker


@pytest.mark.parametrize(
    "params", [SamplingParams(), SamplingParams(temperature=0.9, top_p=0.95, seed=7)], ids=["greedy", "T0.9"]
)
def test_a_model_split_with_a_worker_answers_as_the_model_does_alone(gguf, tokenizer, worker, params):
    endpoint, _ = worker
    alone = Engine(backend=open_backend(str(gguf), backend="llama.cpp"))
    split = Engine(backend=open_backend(str(gguf), backend="llama.cpp", workers=[endpoint]))
    try:
        assert isinstance(split.backend, IsolatedLlamaBackend)
        assert split.backend.split == {"this computer": 2, endpoint: 2}
        assert re.search(
            rf"layers 2 on this computer \(~\d+ MB\), 2 on {re.escape(endpoint)} \(~\d+ MB\)", split.backend.describe()
        ), split.backend.describe()
        ids = ids_of(tokenizer)
        plain = run(alone, ids, params, drafted=False)[-1]
        final = run(split, ids, params)[-1]
        assert final.error is None and len(final.token_ids) == 32
        if params.greedy:  # the greedy answer repeats itself: the conversation's drafts are accepted
            assert final.stats.accepted_by_source.get("context", 0) > 0, "no drafts accepted on the split model"
        assert_plain_or_near_tie(alone, ids, plain.token_ids, final.token_ids, params)
    finally:
        alone.backend.close()
        split.backend.close()


def test_a_worker_that_dies_mid_answer_ends_it_in_words_and_the_answer_so_far_stays(gguf, tokenizer, worker):
    endpoint, proc = worker
    engine = Engine(backend=open_backend(str(gguf), backend="llama.cpp", workers=[endpoint]))
    try:
        events = []
        request = GenerationRequest(prompt_ids=ids_of(tokenizer), max_new_tokens=400, sampling=SamplingParams())
        for ev in engine.generate(request):
            events.append(ev)
            if len(events) == 5:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
        final = events[-1]
        assert final.finish_reason == "error" and len(final.token_ids) >= 5, final
        assert final.text and "llama.cpp stopped" in final.error and endpoint in final.error, final.error
        assert "opens again for the next answer" in final.error
        # the app lives on: with the worker back, the next answer opens the model again
        port = int(endpoint.rsplit(":", 1)[1])
        again = start_worker(port)
        try:
            final = run(engine, ids_of(tokenizer), SamplingParams(), drafted=False, tokens=8)[-1]
            assert final.error is None and len(final.token_ids) == 8
        finally:
            again.terminate()
            again.wait(10)
    finally:
        engine.backend.close()


def test_an_unreachable_worker_is_named_and_the_process_lives_on(gguf):
    need_rpc()
    port = free_port()  # nothing listens there
    with pytest.raises(LlamaCppError) as err:
        open_backend(str(gguf), backend="llama.cpp", workers=[f"127.0.0.1:{port}"])
    assert f"127.0.0.1:{port}" in str(err.value) and "connect" in str(err.value).lower(), str(err.value)


class _Silent:
    """A TCP server that accepts and says nothing, or (``garbage``) answers nonsense: not a
    llama.cpp worker, or one that stopped answering."""

    def __init__(self, garbage: bool) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.garbage, self.conns = garbage, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            if self.garbage:
                conn.sendall(os.urandom(64))
                conn.close()

    def close(self):
        self.sock.close()
        for c in self.conns:
            c.close()


def test_a_server_that_is_not_a_llama_cpp_worker_is_refused_in_words(gguf):
    need_rpc()
    fake = _Silent(garbage=True)
    try:
        with pytest.raises(LlamaCppError) as err:
            open_backend(str(gguf), backend="llama.cpp", workers=[f"127.0.0.1:{fake.port}"])
        text = str(err.value)
        assert f"127.0.0.1:{fake.port}" in text and "llama.cpp stopped" in text, text
    finally:
        fake.close()


def test_a_worker_that_never_answers_times_out_instead_of_hanging(gguf, tokenizer):
    need_rpc()
    silent = _Silent(garbage=False)
    try:
        t0 = time.monotonic()
        with pytest.raises(LlamaCppError, match="no answer within 5 s"):
            IsolatedLlamaBackend(gguf, tokenizer, workers=[f"127.0.0.1:{silent.port}"], load_timeout_s=5)
        assert time.monotonic() - t0 < 30
    finally:
        silent.close()


def test_two_workers_hold_layers_and_a_trees_logits_match_the_whole_model(gguf, tokenizer):
    import numpy as np

    from draftscope.draft_tree import DraftSource, DraftTree

    need_rpc()
    ports = [free_port(), free_port()]
    procs = [start_worker(p) for p in ports]
    endpoints = [f"127.0.0.1:{p}" for p in ports]
    whole = open_backend(str(gguf), backend="llama.cpp")
    split = open_backend(str(gguf), backend="llama.cpp", workers=endpoints)
    try:
        # 4 layers over three machines: 1 here (equal shares, rounded), 3 on the workers
        assert split.split == {"this computer": 1, endpoints[0]: 2, endpoints[1]: 1}, split.split
        ids = ids_of(tokenizer)
        tree = DraftTree(
            np.array([11, 12, 13, 14, 15]),
            np.array([-1, 0, 0, 1, -1], np.int32),
            np.array([1, 2, 2, 3, 1], np.int32),
            np.ones(5, np.float32),
            np.full(5, DraftSource.RETRIEVAL, np.int8),
        )
        rows = []
        for backend in (whole, split):
            backend.start(ids)
            rows.append(backend.verify(ids[-1], tree).logits)
            backend.commit([0, 1])
            rows.append(backend.verify(12, tree).logits)  # after a commit: the kept branch, the next tree
        for a, b in ((rows[0], rows[2]), (rows[1], rows[3])):
            assert a.shape == b.shape == (6, whole.vocab)
            assert isinstance(b, np.ndarray), "the child's rows are NumPy's, as llama.cpp's are"
            assert float(np.abs(a - b).max()) < 1e-3 * float(np.abs(a).max()), "the split model's logits differ"
    finally:
        whole.close()
        split.close()
        for p in procs:
            p.terminate()
            p.wait(10)
