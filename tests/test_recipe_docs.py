"""Every page, notebook and docstring that states the recommended recipe states the one the code runs.

The recipe's settings come from `scripts/recipe_table.py` (`hf_efficient/recipes.py` and the defaults of
`long-context` and `bench-quality`), which writes docs/measured/recipe.md. A sentence that speaks of the recipe and
names a window, a batch, a learning rate, a position table or adapt steps must name the recipe's. The measurement
pages (docs/measurements/, the ablations measured against the recipe), the measured files and sentences about
Longformer's paper or an ablation are not read.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from tests.script_loader import load_script

ROOT = Path(__file__).resolve().parent.parent
RECIPE = load_script("recipe_table").recipe()
# what a sentence about the recipe may state -> the pattern that finds it (its value in group 1)
STATED = {
    "attention_window": re.compile(r"attention_window\W{0,3}(\d+)|\bwindows? of (\d+)\b(?! tokens? shar)"),
    "batch": re.compile(r"\bbatch(?:es)?(?: size)?(?: of)? (\d+)\b(?! x)|per_device_train_batch_size\W{0,3}(\d+)|"
                        r"long_batch_size\W{0,3}(\d+)"),
    "learning rate": re.compile(r"(?:learning[ _]rate|\blr)\W{0,3}(\d[\d.]*(?:e-?\d+)?)"),
    "positions": re.compile(r"positions\W{0,3}(tile|interpolate)\b"),
    "adapt": re.compile(r"adapt_steps\W{0,3}(\d+)"),
}
RECIPE_WORD = re.compile(r"\brecipe\b")  # the recipe, the recipe's; not recipes.py, the module of every setting
SENTENCE = re.compile(r"(?<=[.!?;:])\s+(?=[A-Z`(*\[])|\n\s*\n|\n\s*[-*] ")


def recipe_value(setting: str, stated: str) -> bool:
    """Whether `stated` (a value a sentence gives `setting`) is the recipe's."""
    if setting == "learning rate":
        return float(stated) == float(RECIPE[setting])
    if setting == "positions":
        return f"`{stated}`" == RECIPE[setting]
    if setting == "adapt":
        return (stated == "0") == (RECIPE[setting] == "none")
    return stated == RECIPE[setting]


def other_recipes(text: str) -> list[str]:
    """The sentences of `text` that speak of the recipe and state another setting than the recipe's."""
    found = []
    for sentence in SENTENCE.split(text):
        lower = sentence.lower()
        # Longformer's paper has its own recipe; an ablation (a `--variants` row) changes the recipe on purpose
        if not RECIPE_WORD.search(lower) or any(word in lower for word in ("paper", "variant", "ablation")):
            continue
        for setting, pattern in STATED.items():
            for match in pattern.finditer(sentence):
                stated = next(group for group in match.groups() if group)
                if not recipe_value(setting, stated):
                    found.append(f"{setting} {stated}: {' '.join(sentence.split())[:160]}")
    return found


def pages() -> list[Path]:
    skipped = ("measured", "measurements", "quality", "api")
    return [ROOT / "README.md", *(page for page in sorted((ROOT / "docs").rglob("*.md"))
                                  if page.relative_to(ROOT / "docs").parts[0] not in skipped)]


def notebook_markdown(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "\n\n".join("".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown")


def docstrings(path: Path) -> str:
    tree = ast.parse(path.read_text())
    nodes = [tree, *(node for node in ast.walk(tree)
                     if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))]
    return "\n\n".join(ast.get_docstring(node) or "" for node in nodes)


SOURCES = {
    **{path.relative_to(ROOT).as_posix(): path.read_text for path in pages()},
    **{path.relative_to(ROOT).as_posix(): (lambda path=path: notebook_markdown(path))
       for path in sorted((ROOT / "notebooks").glob("*.ipynb"))},
    **{path.relative_to(ROOT).as_posix(): (lambda path=path: docstrings(path))
       for path in sorted((ROOT / "hf_efficient").rglob("*.py"))},
}


@pytest.mark.parametrize("name", SOURCES)
def test_every_page_notebook_and_docstring_states_the_recipe_the_code_runs(name):
    assert not other_recipes(SOURCES[name]()), f"{name} states another recipe than docs/measured/recipe.md"


def test_the_recipe_check_finds_another_window_batch_and_learning_rate():
    assert RECIPE["attention_window"] == "128" and not other_recipes(
        f"The recipe's window of {RECIPE['attention_window']} and batch {RECIPE['batch']}.")
    stated = other_recipes("The recipe converts with attention_window=512. The recipe trains in batches of 64, lr 3e-5. "
                           "Longformer's paper has its own recipe: batch 64. The recipe's baseline, windows of 512 "
                           "tokens sharing 128.")
    assert [line.split(":")[0] for line in stated] == ["attention_window 512", "batch 64", "learning rate 3e-5"]
