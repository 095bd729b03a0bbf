"""The repository's scripts/ as modules, for the tests of their functions (scripts/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py, loaded afresh; its sibling scripts import by name, as when it runs."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = sys.modules[name] = importlib.util.module_from_spec(spec)  # as imported: dataclasses look it up
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPTS))
    return module
