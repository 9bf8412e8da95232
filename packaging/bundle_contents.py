"""What the CPU bundle (packaging/draftscope.spec) leaves out, in one place the spec and its test read.

A GGUF model on llama.cpp needs no PyTorch, so the bundle carries none: not torch, not the NVIDIA libraries
its CUDA build brings (2.7 GB of the 4.3 GB bundle torch made), not torch.compile's triton, not the
packages that are only torch's helpers. Of Qt it keeps the modules the app imports (the window's widgets,
its SVG icons, the speed-up chart); the rest of PySide6 (WebEngine alone is hundreds of MB) and Qt's
translations, which the app does not load, stay out."""

from __future__ import annotations

# torch and what only serves it: accelerate and the nvidia-* packages (cuBLAS, cuDNN, NCCL...) load it
TORCH_PACKAGES = ("torch", "torchvision", "torchaudio", "triton", "accelerate", "nvidia")

# test runners and type checkers (pydantic's plugins name them), notebooks, plotting and training tools the
# app never runs; the AWS SDK (accelerate's SageMaker helper); Pillow, which only image models and pypdf's
# image extraction use (pypdf reads text without it); libcst and werkzeug, for transformers' and websockets'
# command-line and routing tools; transformers' command line (its `serve` and model templates) and test
# helpers; pyarrow's network file systems and Flight RPC (it reads a local Parquet or Arrow file without them)
TOOLS_NOT_USED = (
    "tkinter", "_tkinter", "IPython", "jupyter", "notebook", "matplotlib", "pytest", "_pytest", "pytestqt",
    "hypothesis", "mypy", "ast_serialize", "tensorboard", "boto3", "botocore", "PIL", "libcst", "werkzeug",
    "transformers.cli", "transformers.testing_utils", "pyarrow.flight", "pyarrow._flight", "pyarrow._s3fs",
    "pyarrow.tests", "pyarrow.conftest", "pyarrow.cuda", "pyarrow._cuda",
)  # fmt: skip

# pyarrow's libraries for those (Flight is 31 MB, S3 17 MB); nothing else links them
PYARROW_LIBS_NOT_USED = ("libarrow_flight", "libarrow_python_flight", "libarrow_s3")

# transformers' model code that only runs on torch (the modeling files are most of its 117 MB) and its
# image, video and audio front ends; a GGUF's tokenizer needs its tokenization and configuration files, and
# models/auto/ whole (the configurations' docstrings read its model tables, which import no torch)
TRANSFORMERS_TORCH_ONLY = ("modeling_", "modular_", "image_processing", "video_processing", "feature_extraction")

# the PySide6 modules the app imports (grep "from PySide6" app/): every other one is left out
QT_USED = ("QtCore", "QtGui", "QtWidgets", "QtSvg", "QtCharts")

# the rest of PySide6 6.11's modules; the Qt libraries behind them are filtered by name below as well,
# since a plugin can still link one in
QT_NOT_USED = (
    "Qt3DAnimation", "Qt3DCore", "Qt3DExtras", "Qt3DInput", "Qt3DLogic", "Qt3DRender", "QtBluetooth",
    "QtCanvasPainter", "QtConcurrent", "QtDataVisualization", "QtDesigner", "QtGraphs", "QtGraphsWidgets",
    "QtHelp", "QtHttpServer", "QtLocation", "QtMultimedia", "QtMultimediaWidgets", "QtNetworkAuth", "QtNfc",
    "QtPdf", "QtPdfWidgets", "QtPositioning", "QtQml", "QtQuick", "QtQuick3D", "QtQuickControls2",
    "QtQuickTest", "QtQuickWidgets", "QtRemoteObjects", "QtScxml", "QtSensors", "QtSerialBus", "QtSerialPort",
    "QtSpatialAudio", "QtSql", "QtStateMachine", "QtSvgWidgets", "QtTest", "QtTextToSpeech", "QtUiTools",
    "QtWebChannel", "QtWebEngineCore", "QtWebEngineQuick", "QtWebEngineWidgets", "QtWebSockets", "QtWebView",
    "QtXml",
)  # fmt: skip

# Qt libraries (libQt6<name>...) no kept module needs, matched by prefix: Quick also drops QuickControls2 etc.
QT_LIBS_NOT_USED = (
    "WebEngine", "WebChannel", "WebView", "WebSockets", "Qml", "Quick", "3D", "Multimedia", "SpatialAudio",
    "Pdf", "DataVisualization", "Graphs", "Designer", "Help", "Location", "Positioning", "Sensors",
    "TextToSpeech", "RemoteObjects", "Scxml", "StateMachine", "Bluetooth", "Nfc", "SerialBus", "SerialPort",
    "HttpServer", "NetworkAuth", "Sql", "Test", "UiTools", "CanvasPainter", "ShaderTools", "Labs",
    "VirtualKeyboard",
)  # fmt: skip

# plugins that link a library left out above (the on-screen keyboard's links Qml and Quick, the PDF image
# format's Qt Pdf): Qt would fail to load them
QT_PLUGINS_NOT_USED = ("platforminputcontexts/libqtvirtualkeyboardplugin.so", "imageformats/libqpdf.so")


def excludes() -> list[str]:
    """The module names PyInstaller's analysis must not follow into the bundle."""
    return [*TORCH_PACKAGES, *TOOLS_NOT_USED, *(f"PySide6.{name}" for name in QT_NOT_USED)]


def torch_only_module(name: str) -> bool:
    """Whether a module (``transformers.models.llama.modeling_llama``) or its source file in the bundle
    (``transformers/models/llama/modeling_llama.py``) is transformers' torch-only code."""
    parts = name.removesuffix(".py").replace("/", ".").split(".")
    if len(parts) != 4 or parts[:2] != ["transformers", "models"] or parts[2] == "auto":
        return False
    return parts[3].startswith(TRANSFORMERS_TORCH_ONLY)


def excluded(name: str) -> bool:
    """Whether a module is one of :func:`excludes` or inside one (collect_submodules still lists them)."""
    return any(name == e or name.startswith(e + ".") for e in excludes())


def left_out(dest: str) -> bool:
    """Whether a collected file (its path inside the bundle) stays out: anything of torch's that a hook
    still brings, transformers' torch-only sources, Qt's translations and QML, the unused Qt and pyarrow
    libraries and plugins, and the headers, static libraries and CMake files nothing loads at run time."""
    d = dest.replace("\\", "/")
    top = d.split("/", 1)[0]
    if top in TORCH_PACKAGES or top.startswith(("nvidia_", "torch-", "triton-")) or torch_only_module(d):
        return True
    if d.startswith(("PySide6/Qt/translations/", "PySide6/Qt/qml/", "PySide6/Qt/resources/qtwebengine")):
        return True
    if d.startswith("PySide6/Qt/plugins/") and d.endswith(QT_PLUGINS_NOT_USED):
        return True
    name = d.rsplit("/", 1)[-1]
    if name.startswith("libQt6") and name[len("libQt6") :].startswith(QT_LIBS_NOT_USED):
        return True
    if name.startswith(PYARROW_LIBS_NOT_USED):
        return True
    if "/include/" in d and d.endswith((".h", ".hpp", ".cuh", ".inl", ".hxx")):
        return True
    return d.endswith((".a", ".lib", ".cmake"))
