"""No import circles in the package or the scripts, and no module of the package importing a layer above its own:
every module's imports, lazy ones inside functions included, the package root (`hf_efficient/__init__.py`) too.

The layers and their order are docs/architecture.md's table "Layers, lowest first" (`declared_layers`), so the page
and this test cannot disagree. `test_the_checker_sees_an_upward_import` shows the check failing on an upward import
added to a graph.
"""

from __future__ import annotations

import ast
import re
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
    assert "hf_efficient.tasks.task" in graph["hf_efficient.tasks.classification"]  # the parser resolves `from . import`
    assert cycle(graph) is None, f"import circle: {' -> '.join(cycle(graph))}"


def declared_layers() -> list[tuple[str, ...]]:
    """The modules of each layer, lowest first, as docs/architecture.md's "Layers, lowest first" table lists them (its
    second column: the layer's modules and packages in backticks)."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    table = next(block for block in page.split("## Layers, lowest first", 1)[1].split("\n\n") if block.startswith("|"))
    rows = [line for line in table.splitlines() if line.startswith("|") and "---" not in line][1:]
    return [tuple(re.findall(r"`([\w.]+)`", row.split("|")[2])) for row in rows]


def layer_of(module: str, layers: list[tuple[str, ...]]) -> int | None:
    """The index of the layer that holds `module`: the one naming it or, else, the package nearest above it (the
    package root names only itself); None when none does."""
    holders = [(len(name), index) for index, names in enumerate(layers) for name in names
               if module == name or (module.startswith(f"{name}.") and name != "hf_efficient")]
    return max(holders)[1] if holders else None


def upward_imports(graph: dict[str, set[str]], layers: list[tuple[str, ...]]) -> list[str]:
    """Every import in `graph` of a module in a higher layer than the importing one's, as "a -> b"."""
    return [f"{module} -> {target}" for module, targets in sorted(graph.items()) for target in sorted(targets)
            if layer_of(target, layers) > layer_of(module, layers)]


def package_graph() -> dict[str, set[str]]:
    known = {name: path for name, path in module_names().items() if name.split(".")[0] == "hf_efficient"}
    return {name: imported(name, path, known) for name, path in known.items()}


def test_the_checker_sees_an_upward_import():
    layers = [("p.low",), ("p.high",)]
    assert upward_imports({"p.low.a": {"p.low.b"}, "p.low.b": set(), "p.high": {"p.low.a"}}, layers) == []
    assert upward_imports({"p.low.a": {"p.high"}, "p.high": set()}, layers) == ["p.low.a -> p.high"]
    # the package itself, with one upward import added: the graph test below would fail on it
    graph = package_graph()
    graph["hf_efficient.tasks.task"].add("hf_efficient.training.stage")
    assert upward_imports(graph, declared_layers()) == ["hf_efficient.tasks.task -> hf_efficient.training.stage"]


def test_every_module_of_the_package_is_in_a_layer_and_imports_none_above_its_own():
    layers, graph = declared_layers(), package_graph()
    assert layers[0] == ("hf_efficient.models",) and len(layers) > 5, layers
    assert not [module for module in graph if layer_of(module, layers) is None], "a module in no layer of the page"
    assert upward_imports(graph, layers) == []
