"""No import circles in the package or the scripts: every module's imports, lazy ones inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_names() -> dict[str, Path]:
    """Dotted name -> file of every module of hf_efficient/ and scripts/ (a script by its file name, as it imports)."""
    names = {".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
             for path in (ROOT / "hf_efficient").rglob("*.py")}
    names.update({path.stem: path for path in (ROOT / "scripts").glob("*.py")})
    return names


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that `path` (module `name`) imports by name; a package's submodules count as modules."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[:len(parts) - node.level + 1], *filter(None, [node.module])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found.update(target for target in targets if target in known and target != name)
    return found


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of `graph` as its modules in order (the first repeated at the end), or None."""
    done, path = set(), []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return [*path[path.index(module):], module]
        if module in done:
            return None
        path.append(module)
        for target in sorted(graph[module]):
            found = visit(target)
            if found:
                return found
        path.pop()
        done.add(module)
        return None

    return next(filter(None, map(visit, sorted(graph))), None)


def test_the_finder_sees_a_circle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_in_the_package_or_the_scripts():
    known = module_names()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert "hf_efficient.workflow.stage" in graph["hf_efficient.workflow.classify"]  # the parser resolves `from . import`
    assert cycle(graph) is None, f"import circle: {' -> '.join(cycle(graph))}"
