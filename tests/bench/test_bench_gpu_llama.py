"""`draftscope bench gpu --backend llama.cpp` on the CPU, on a tiny GGUF written here: the GGUF opens
as the app opens it, the cost curve reads its bytes from the file's own tensor sizes, the plain loop
runs without HF generate (torch's), and the peer section puts llama.cpp's own llama-bench and
llama-server beside our plain loop where they are built, and says why not where they are not. What
cannot run is refused in words before a model opens; scripts/gpu_measure.sh refuses a part it does
not know before running any."""

import json
import re
import subprocess
from pathlib import Path

import pytest
from llama_helpers import need_llama_cpp

need_llama_cpp()

from engine_fixtures import tiny_llama
from gguf_fixtures import write_tiny_gguf

from draftscope.bench.gpu_peer import find_llama_bench
from draftscope.cli import main

ROOT = Path(__file__).parents[2]
PEER = "llama.cpp's own programs"


def sections_of(out: str) -> dict[str, str]:
    parts = re.split(r"^== \d\. (.+) ==$", out, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def json_lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def gguf(tokenizer, tokenizer_dir, tmp_path_factory):
    model = tiny_llama(len(tokenizer), seed=3, sharpen=4.0, max_positions=1024)
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-F32.gguf", model, tokenizer_dir)


def bench_gpu(gguf, *extra) -> int:
    return main(
        [
            "bench",
            "gpu",
            "--backend",
            "llama.cpp",
            "--model",
            str(gguf),
            "--device",
            "cpu",
            "--tokens",
            "8",
            "--contexts",
            "32",
            "--reps",
            "1",
            *extra,
        ]
    )


def tiny_weights_bytes(vocab: int) -> int:
    """The tiny llama's weights as the F32 GGUF stores them, the token embeddings left out (looked up a
    row at a time): 2 layers of q, k, v, o (4 heads of 16 over 2 KV heads), gate/up/down (64 -> 128)
    and two norms, then the output head and its norm."""
    hidden, ffn, kv = 64, 128, 32
    layer = 2 * hidden * hidden + 2 * kv * hidden + 3 * hidden * ffn + 2 * hidden
    return 4 * (2 * layer + vocab * hidden + hidden)


def test_the_cost_curve_and_the_plain_loop_run_on_llama_cpp(gguf, tokenizer, tmp_path, capsys):
    out_file = tmp_path / "gpu.jsonl"
    code = bench_gpu(gguf, "--sections", "verify,plain", "--json", str(out_file))
    out = capsys.readouterr().out
    assert code == 0, out
    head = out.splitlines()[0]
    assert f"model {gguf} on " in head and "llama-cpp-python " in head and "backend llama.cpp · F32" in head
    text = sections_of(out)
    assert list(text) == ["verify cost curve", "plain decoding vs HF generate"]
    curve = text["verify cost curve"]
    assert "bandwidth bound: none known for this device" in curve and "context 32:" in curve
    for tree in ("chain 0", "chain 1", "chain 64", "wide 64 (8 x chain of 8)"):
        assert re.search(rf"{re.escape(tree)} +\d+\.\d+ ms +\d+\.\d+x +[\d.]+ GB/s", curve), tree
    plain = text["plain decoding vs HF generate"]
    assert "HF generate        skipped: HF generate runs a torch model; llama.cpp has none" in plain
    assert re.search(r"engine plain loop +[\d.]+ tokens/s \(\d+ tokens\)", plain)

    rows = json_lines(out_file)
    header = rows[0]
    assert header["section"] == "header" and header["gpu_layers"] == 0 and header["llama_cpp_python"]
    curve_rows = [r for r in rows if r["section"] == "verify cost curve" and "ms" in r]
    assert len(curve_rows) == 9 and all(r["ms"] > 0 for r in curve_rows)
    # on the CPU a step reads every layer, the head and the KV cache (2 layers x 2 KV heads x (16 + 16)
    # f16 values a position) of the context (its last token the tree's root) and the tree; not the token
    # embeddings
    weights = tiny_weights_bytes(len(tokenizer))
    for r in curve_rows:
        assert r["bytes_read"] - weights == 2 * 128 * (r["context"] + r["nodes"]), r
    assert [r["tokens_per_s"] > 0 for r in rows if r.get("method") == "engine plain"] == [True]


def test_the_peer_section_puts_llama_bench_and_llama_server_beside_ours(gguf, tmp_path, capsys):
    bench, why = find_llama_bench(None)
    if bench is None:
        pytest.skip(why)
    out_file = tmp_path / "peer.jsonl"
    code = bench_gpu(gguf, "--sections", "peer", "--json", str(out_file))
    out = capsys.readouterr().out
    assert code == 0, out
    peer = sections_of(out)[PEER]
    assert "the same GGUF, 0 layers on the card (-ngl 0)" in peer
    assert re.search(r"ours, plain loop +writing +[\d.]+ tokens/s +whole answer +[\d.]+ tokens/s \(8 tokens\)", peer)
    assert re.search(
        r"llama-bench tg +writing +[\d.]+ tokens/s ± [\d.]+ \(tg 8 after \d+ in the context; ran on CPU\) +ours [\d.]+x",
        peer,
    )
    rows = {r["program"]: r for r in json_lines(out_file) if r["section"] == PEER}
    assert rows["llama-bench"]["path"] == bench and rows["llama-bench"]["ours_over"] > 0
    assert rows["ours"]["writing_tokens_per_s"] > 0
    server = rows["llama-server"]
    if "skipped" in server:  # llama-bench without llama-server beside it, and none elsewhere
        return
    assert server["whole_tokens_per_s"] > 0 and server["ours_over_whole"] > 0
    # llama.cpp's plain decoding twice over on an F32 model: the same tokens (no near-ties to flip)
    assert server["identical"], peer


def test_without_llama_cpps_programs_the_peers_are_skipped_saying_why(gguf, tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    monkeypatch.setenv("DRAFTSCOPE_LLAMA_SERVER", str(tmp_path / "no-llama-server"))
    code = bench_gpu(gguf, "--sections", "peer")
    out = capsys.readouterr().out
    assert code == 0, out
    peer = sections_of(out)[PEER]
    assert re.search(r"ours, plain loop +writing +[\d.]+ tokens/s", peer)
    assert "llama-bench        skipped: llama-bench not found (DRAFTSCOPE_LLAMA_SERVER=" in peer
    assert "give --llama-bench PATH" in peer and "llama-server       skipped: DRAFTSCOPE_LLAMA_SERVER=" in peer


def test_a_llama_bench_that_is_not_there_is_an_error_before_the_model_opens(gguf, tmp_path, capsys):
    missing = tmp_path / "no-such-llama-bench"
    code = bench_gpu(gguf, "--sections", "verify,peer", "--llama-bench", str(missing))
    captured = capsys.readouterr()
    assert code == 2 and f"--llama-bench {missing}: no such file" in captured.err
    assert "Traceback" not in captured.err and "verify cost curve" not in captured.out


@pytest.fixture(scope="module")
def model_folder(tokenizer, tokenizer_dir, tmp_path_factory):
    import shutil

    folder = tmp_path_factory.mktemp("hf") / "tiny-model"
    shutil.copytree(tokenizer_dir, folder)
    tiny_llama(len(tokenizer), seed=1).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--model", "FOLDER"], "tiny-model is not a GGUF file: llama.cpp runs GGUF models; use the torch backend"),
        (["--model", "GGUF", "--dtype", "float32", "--cache", "static"], "--dtype, --cache: the torch backend's"),
    ],
    ids=["not-a-gguf", "torch-options"],
)
def test_what_llama_cpp_cannot_run_is_refused_in_words(argv, words, gguf, model_folder, capsys):
    argv = [{"FOLDER": str(model_folder), "GGUF": str(gguf)}.get(a, a) for a in argv]
    code = main(["bench", "gpu", "--backend", "llama.cpp", "--device", "cpu", *argv])
    err = capsys.readouterr().err
    assert code == 2 and words in err and "Traceback" not in err, err


def test_gpu_measure_refuses_an_unknown_part_before_running_any(tmp_path):
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_measure.sh"), str(tmp_path / "out"), "env", "llama", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unknown part nope (parts: env s15" in done.stderr and "llama-qwen llama-smol" in done.stderr
    assert not (tmp_path / "out" / "env.txt").exists()  # nothing ran


def test_a_shape_runs_on_llama_cpp_as_a_random_gguf_in_the_real_files_block_types(tmp_path, monkeypatch, capsys):
    """No model file reaches the GPU machines: --shape writes one of the shape with random blocks, which
    runs to --tokens (its end token is never chosen) and is written once."""
    import gguf as gguf_package

    from draftscope.bench import gpu_shape_gguf
    from draftscope.bench.gpu_models import SHAPES

    written = tmp_path / "tiny-random-Q4_1.gguf"
    monkeypatch.setattr(gpu_shape_gguf, "shape_gguf_path", lambda shape: written)
    argv = ["bench", "gpu", "--backend", "llama.cpp", "--shape", "tiny", "--device", "cpu", "--tokens", "8"]
    code = main([*argv, "--contexts", "32", "--reps", "1", "--sections", "verify,plain"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"shape tiny ({written.name}) on " in out and "backend llama.cpp · Q4_1" in out
    assert "random weights: these figures measure costs, not acceptance" in out
    assert re.search(r"engine plain loop +[\d.]+ tokens/s \(8 tokens\)", out)  # room for 128 + 8 tokens
    types = {t.name: t.tensor_type.name for t in gguf_package.GGUFReader(str(written)).tensors}
    assert types["token_embd.weight"] == "Q8_0" and types["output.weight"] == "Q8_0"
    assert types["blk.0.attn_q.weight"] == "Q4_1" and types["blk.1.ffn_down.weight"] == "Q4_1"
    # Qwen2.5-1.5B's and 7B's rows are whole K-quant blocks: Q4_K_M, as their published files
    assert [gpu_shape_gguf.file_types(SHAPES[s]).name for s in ("qwen2.5-1.5b", "qwen2.5-7b")] == ["Q4_K_M"] * 2
    assert gpu_shape_gguf.file_types(SHAPES["smollm2-135m"]).name == "Q4_1"
    stamp = written.stat().st_mtime_ns
    assert main([*argv, "--contexts", "32", "--reps", "1", "--sections", "verify"]) == 0
    assert written.stat().st_mtime_ns == stamp  # written once


def test_gpu_measures_llama_parts_run_bench_gpu_on_llama_cpp_with_every_layer_on_the_card(tmp_path):
    """`llama` is llama-qwen and llama-smol: the GGUF named (QWEN_GGUF, SMOL_GGUF), else the shape with
    random weights; each part's command written to OUT/PART.txt (here echoed, not run: no card)."""
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "PYTHON": "echo", "SMOL_GGUF": "/models/smol.gguf", "LLAMA_BENCH": "/l/llama-bench"}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_measure.sh"), str(out), "llama"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    qwen, smol = (out / "llama-qwen.txt").read_text(), (out / "llama-smol.txt").read_text()
    common = "-m draftscope bench gpu --device cuda --backend llama.cpp --gpu-layers all"
    assert qwen.startswith(f"{common} --shape qwen2.5-1.5b --contexts 256,2000,7000 --reps 3 ")
    assert smol.startswith(f"{common} --model /models/smol.gguf --contexts 256,2000,7000 --reps 3 ")
    for name, text in (("llama-qwen", qwen), ("llama-smol", smol)):
        assert f"--sections verify,plain,peer --json {out}/{name}.jsonl --llama-bench /l/llama-bench" in text
        assert "rc 0 after" in text


def test_every_section_computes_on_the_engine_s_one_thread(gguf, monkeypatch, capsys):
    """llama.cpp's OpenMP threads belong to the thread that calls it: once a second thread had decoded,
    the engine's later steps ran 40-70% slower, and the bench's first llama.cpp figures put our plain loop
    at 0.61x llama-bench for it (docs/benchmarks.md, issue 53 item 3). The sections that time the backend
    directly run on the engine's thread, as the app's own measurements do."""
    import threading

    import llama_cpp

    real, callers = llama_cpp.llama_decode, set()

    def traced(ctx, batch):
        callers.add(threading.current_thread().name)
        return real(ctx, batch)

    monkeypatch.setattr(llama_cpp, "llama_decode", traced)
    code = bench_gpu(gguf, "--sections", "verify,worst,plain,oracle")
    assert code == 0, capsys.readouterr().out
    assert len(callers) == 1 and next(iter(callers)).startswith("llama.cpp stepper"), callers
