"""The CPU bundle (packaging/draftscope.spec) leaves out torch, CUDA and the Qt the app does not use (issue
67: 4.3 GB before, under 600 MB the target), and keeps what the app runs: every PySide6 module it imports,
llama.cpp, the resources. The spec takes its excludes and its file filter from packaging/bundle_contents.py;
this reads both (the spec's text, since only PyInstaller can run it)."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "packaging" / "draftscope.spec"


def bundle_contents():
    spec = importlib.util.spec_from_file_location("bundle_contents", ROOT / "packaging" / "bundle_contents.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def qt_modules_the_app_imports() -> set[str]:
    found = set()
    for path in (ROOT / "app" / "draftscope").rglob("*.py"):
        found |= set(re.findall(r"(?:from|import) PySide6\.(Qt\w+)", path.read_text(encoding="utf-8")))
    return found


def test_the_spec_uses_the_excludes_and_the_filter():
    tree = ast.parse(SPEC.read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "bundle_contents"
                for a in n.names}  # fmt: skip
    assert {"excludes", "left_out"} <= imported
    analysis = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Analysis")
    given = {k.arg: k.value for k in analysis.keywords}
    assert isinstance(given["excludes"], ast.Call) and given["excludes"].func.id == "excludes"
    filtered = {t.attr for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets
                if isinstance(t, ast.Attribute) and "left_out" in ast.unparse(n.value)}  # fmt: skip
    assert filtered == {"datas", "binaries"}


def test_torch_cuda_and_the_unused_qt_are_excluded():
    excluded = set(bundle_contents().excludes())
    assert {"torch", "triton", "nvidia", "accelerate"} <= excluded
    for module in ("QtWebEngineCore", "QtWebEngineWidgets", "QtQml", "QtQuick", "Qt3DCore", "QtMultimedia",
                   "QtPdf", "QtDataVisualization"):  # fmt: skip
        assert f"PySide6.{module}" in excluded


def test_every_qt_module_the_app_imports_stays():
    used = qt_modules_the_app_imports()
    assert {"QtCore", "QtGui", "QtWidgets", "QtCharts"} <= used  # the scan finds them
    contents = bundle_contents()
    assert not {f"PySide6.{m}" for m in used} & set(contents.excludes())
    for module in used:  # nor are their libraries filtered out
        assert not contents.left_out(f"PySide6/Qt/lib/libQt6{module[2:]}.so.6")


@pytest.mark.parametrize(
    "dest",
    [
        "torch/lib/libtorch_cpu.so",
        "nvidia/cublas/lib/libcublas.so.13",
        "nvidia_cudnn_cu13-9.26.0.51.dist-info/METADATA",
        "triton/backends/nvidia/lib/libcupti.so",
        "PySide6/Qt/lib/libQt6WebEngineCore.so.6",
        "PySide6/Qt/lib/libQt6Quick.so.6",
        "PySide6/Qt/lib/libQt6Qml.so.6",
        "PySide6/Qt/lib/libQt63DRender.so.6",
        "PySide6/Qt/translations/qtbase_de.qm",
        "PySide6/Qt/qml/QtQuick/Controls/qmldir",
        "PySide6/Qt/plugins/imageformats/libqpdf.so",  # links Qt Pdf, which is out
        "transformers/models/llama/modeling_llama.py",
        "transformers/models/qwen2_vl/image_processing_qwen2_vl.py",
        "pyarrow/libarrow_flight.so.2600",
    ],
)
def test_these_files_stay_out(dest):
    assert bundle_contents().left_out(dest)


@pytest.mark.parametrize(
    "dest",
    [
        "llama_cpp/lib/libllama.so",
        "llama_cpp/lib/libggml-cpu.so",
        "PySide6/Qt/lib/libQt6Svg.so.6",
        "PySide6/Qt/lib/libQt6XcbQpa.so.6",
        "PySide6/Qt/lib/libQt6OpenGLWidgets.so.6",
        "PySide6/Qt/plugins/platforms/libqxcb.so",
        "draftscope/resources/icons/draftscope.svg",
        "tokenizers/tokenizers.abi3.so",
        "transformers/models/llama/tokenization_llama.py",  # a GGUF's tokenizer is read through these
        "transformers/models/llama/configuration_llama.py",
        "transformers/modeling_gguf_pytorch_utils.py",
        "transformers/models/auto/modeling_auto.py",  # the configurations' docstrings read its tables
        "pyarrow/libparquet.so.2600",  # a Parquet file of the user's, for a datastore
    ],
)
def test_what_the_app_runs_stays_in(dest):
    assert not bundle_contents().left_out(dest)


def test_transformers_model_code_leaves_the_archive_too():
    """The spec drops the compiled modules as well as their sources: by module name."""
    contents = bundle_contents()
    assert contents.torch_only_module("transformers.models.llama.modeling_llama")
    assert not contents.torch_only_module("transformers.models.llama.tokenization_llama")
    assert not contents.torch_only_module("transformers.modeling_utils")  # not under models/
