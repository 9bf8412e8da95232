"""The extension's type stubs (_retriever.pyi) cannot drift from the built module: the same
classes, methods, properties, functions and parameter names on both sides."""

import ast
import inspect
from pathlib import Path

from draftscope import _retriever

STUB = Path(__file__).resolve().parents[2] / "app" / "draftscope" / "_retriever.pyi"


def stub_names():
    tree = ast.parse(STUB.read_text())
    classes, functions = {}, {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            members = {}
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    members[item.name] = [a.arg for a in item.args.args if a.arg != "self"]
            classes[node.name] = members
        elif isinstance(node, ast.FunctionDef):
            functions[node.name] = [a.arg for a in node.args.args]
    return classes, functions


def runtime_params(obj) -> list[str]:
    return [p for p in inspect.signature(obj).parameters if p != "self"]


def test_every_class_and_function_of_the_module_is_in_the_stub_and_back():
    classes, functions = stub_names()
    runtime_classes = {n for n, v in vars(_retriever).items() if isinstance(v, type)}
    runtime_functions = {n for n, v in vars(_retriever).items() if callable(v) and not isinstance(v, type)}
    assert set(classes) == runtime_classes
    assert set(functions) == runtime_functions
    for name, params in functions.items():
        assert runtime_params(getattr(_retriever, name)) == params, name


def test_methods_properties_and_parameters_match():
    classes, _ = stub_names()
    for cls_name, members in classes.items():
        cls = getattr(_retriever, cls_name)
        if issubclass(cls, BaseException):
            assert not members, f"{cls_name}: exceptions carry no members in the stub"
            continue
        runtime = {n for n in vars(cls) if not n.startswith("__")}
        stub = {n for n in members if n != "__init__"}
        assert stub == runtime, f"{cls_name}: stub only {stub - runtime}, module only {runtime - stub}"
        for name, params in members.items():
            attr = vars(cls)[name] if name != "__init__" else cls
            if isinstance(attr, property) or type(attr).__name__ == "getset_descriptor":
                continue
            assert runtime_params(attr) == params, f"{cls_name}.{name}"
