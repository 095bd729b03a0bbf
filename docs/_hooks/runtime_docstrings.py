"""Griffe extension: the API reference shows the docstrings that hf_efficient.models composes at import time.

Every family's model classes get their docstring from `register_model`, and the shared `forward` methods theirs
from `forward_docstring` (one text for every family, not pasted into each file). Static analysis reads only
literal docstrings, so for an object of `hf_efficient.models` that has none in its source this extension imports
it and takes its runtime `__doc__`. Likewise each config class gets its runtime `__init__` signature: a config is a
dataclass made by huggingface_hub's `@strict`, which griffe does not recognise (it knows `dataclasses.dataclass`),
so without it the fields its `Args:` document would not be parameters. Everything else is analysed statically.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import griffe

PACKAGE = "hf_efficient.models."


def runtime_object(path: str):
    """The object at a dotted `path` (module, then attributes), or None when it cannot be imported."""
    parts = path.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for name in parts[split:]:
            obj = getattr(obj, name, None)
        return obj
    return None


class RuntimeDocstrings(griffe.Extension):
    def on_class(self, *, cls: griffe.Class, loader: griffe.GriffeLoader, **kwargs) -> None:
        self.fill(cls, loader)
        self.dataclass_init(cls)

    def on_function(self, *, func: griffe.Function, loader: griffe.GriffeLoader, **kwargs) -> None:
        self.fill(func, loader)

    @staticmethod
    def fill(obj: griffe.Object, loader: griffe.GriffeLoader) -> None:
        if obj.docstring is not None or not obj.path.startswith(PACKAGE):
            return
        doc = getattr(runtime_object(obj.path), "__doc__", None)
        if doc:  # parsed as the loader parses every other docstring (the site's docstring style and options)
            obj.docstring = griffe.Docstring(inspect.cleandoc(doc), parent=obj, parser=loader.docstring_parser,
                                             parser_options=loader.docstring_options)

    @staticmethod
    def dataclass_init(cls: griffe.Class) -> None:
        if "__init__" in cls.members or not cls.path.startswith(PACKAGE):
            return
        runtime = runtime_object(cls.path)
        if not (isinstance(runtime, type) and dataclasses.is_dataclass(runtime)):
            return
        # Names and kinds only: each field's default is in the docstring's "defaults to", which the tests check.
        parameters = [griffe.Parameter(name, kind=griffe.ParameterKind(parameter.kind.description))
                      for name, parameter in inspect.signature(runtime).parameters.items()]
        self_parameter = griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)
        cls.set_member("__init__", griffe.Function("__init__", parent=cls,
                                                   parameters=griffe.Parameters(self_parameter, *parameters)))
