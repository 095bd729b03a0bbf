"""The documentation site builds strictly, and every notebook runs top to bottom with its CI parameters.

`mkdocs build --strict` fails on a broken link or anchor, a page missing from the nav's files, or an
API reference (`::: module.name`) that does not resolve. Each notebook in notebooks/ is executed
with papermill: its `parameters` cell keeps its defaults (the small CI setting) unless
`CI_PARAMETERS` overrides them; an exception in any cell fails the test, and so do printed results
that differ from the committed outputs. The notebooks in `SLOW_NOTEBOOKS` run with the slow tests
(`scripts/test.sh --slow`). To save a fresh run's outputs in the notebooks instead:

    HFE_UPDATE_NOTEBOOKS=1 python -m pytest -m "" tests/test_docs.py -k notebook_runs
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.script_loader import load_script

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# notebook file name -> parameters injected for the test run (none: the defaults are the CI setting)
CI_PARAMETERS: dict[str, dict] = {}
# notebooks whose every step has tests of its own, so the default suite (under 15 minutes) leaves their runs to
# --slow: LoRA, distillation and inference cost (test_peft.py, test_distill.py), the speed grid and the quality
# matrix from Python (test_bench.py, test_quality.py)
SLOW_NOTEBOOKS = {"04_cheaper_still.ipynb", "05_choosing_a_family.ipynb"}


# the pages people write; docs/quality/ is bench-quality's output folder (its reports, and locally its checkpoints)
PAGES = sorted(page for page in (ROOT / "docs").rglob("*.md") if page.relative_to(ROOT / "docs").parts[0] != "quality")
LIST_ITEM = re.compile(r"^([-*+]|\d+\.)\s+\S")


def lists_without_blank_line(text: str) -> list[str]:
    """The lists that Python-Markdown renders as part of the paragraph above them.

    A top-level list item in a block (lines without a blank one between them) that did not start
    as a list: markdown needs a blank line (or a heading) before a list.
    """
    found, fenced, block_start = [], False, None
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced, block_start = not fenced, None
        elif fenced or not line.strip() or line.startswith("#"):
            block_start = None
        elif block_start is None:
            block_start = line
        elif LIST_ITEM.match(line) and not (LIST_ITEM.match(block_start) or block_start[0].isspace()):
            found.append(f"line {number}: {line[:70]}")
            block_start = line  # one report per list
    return found


def read_notebook(path: Path) -> dict:
    return json.loads(path.read_text())


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ holds no notebook"


def test_site_builds_strictly(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python", "mkdocs_jupyter"):
        pytest.importorskip(module)
    site = tmp_path / "site"
    # run from tmp_path: mkdocs-jupyter writes its conversion cache under the working directory
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-5000:]
    assert (site / "index.html").is_file()
    api = (site / "api" / "families" / "index.html").read_text()
    assert 'id="hf_efficient.models.families.register_families"' in api  # docstrings were collected
    for notebook in NOTEBOOKS:  # rendered with their committed outputs
        page = (site / "notebooks" / notebook.stem / "index.html").read_text()
        assert "jp-OutputArea" in page or "output_area" in page, notebook.name
    models = (site / "api" / "longformer" / "index.html").read_text()  # a family's classes, their forward
    for name in ("configuration_longformer.HfeLongformerConfig", "modeling_longformer.HfeLongformerModel",
                 "modeling_longformer.HfeLongformerForQuestionAnswering"):
        assert f'id="hf_efficient.models.{name}"' in models, name
    assert 'id="hf_efficient.models.modeling_longformer.HfeLongformerForQuestionAnswering.forward"' in models
    assert "global_attention_mask" in models and "Returns:" in models
    assert "DefaultGlobalAttention" not in models  # head mixins stay out of the reference
    home = (site / "index.html").read_text()
    for notebook in NOTEBOOKS:  # the home page links every notebook (docs/notebooks is a symbolic link)
        assert f'href="notebooks/{notebook.stem}/"' in home, f"the home page does not link {notebook.name}"
    assert 'href="quality/"' in home, "the home page does not link the quality page"
    assert 'href="decide/"' in home, "the home page does not link the decision page"
    benchmarks = (site / "benchmarks" / "index.html").read_text()  # it includes a table per length under each section
    toc = set(re.findall(r'<a href="#([^"]*)" class="md-nav__link">\s*<span class="md-ellipsis">\s*([^<]+?)\s*<',
                         benchmarks))
    assert len({title for _, title in toc}) == len(toc) > 10, "benchmarks.md's table of contents repeats a heading"
    quickstart = (site / "notebooks" / "01_quickstart" / "index.html").read_text()
    assert 'href="../../workflow/"' in quickstart and "../docs/" not in quickstart  # notebooks link the pages


def test_every_notebook_is_in_the_site_nav():
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1]
    for notebook in NOTEBOOKS:
        assert f"notebooks/{notebook.name}" in nav, f"{notebook.name} is not in mkdocs.yml's nav"


def test_the_list_check_finds_a_list_glued_to_its_paragraph():
    assert lists_without_blank_line("Text:\n- one\n- two\n") == ["line 2: - one"]
    assert lists_without_blank_line("Text:\n\n- one\n- two\n  more\n3. three\n") == []
    assert lists_without_blank_line("## Heading\n- one\n\n```\ntext\n- not a list\n```\n") == []


PAGE_IDS = [page.relative_to(ROOT / "docs").as_posix() for page in PAGES]


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_every_list_has_its_blank_line(page):
    assert not lists_without_blank_line(page.read_text()), lists_without_blank_line(page.read_text())


def plain_text_references(text: str) -> list[str]:
    """Mentions of a page (`docs/peft.md`, `workflow.md`) in running text, outside links and code."""
    found, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if fenced or line.lstrip().startswith(("```", "~~~", "--8<--")) or line.startswith("    "):
            continue
        prose = re.sub(r"\[[^\]]*\]\([^)]*\)", "", re.sub(r"`[^`]*`", "", line))
        found += [f"line {number}: {name}" for name in re.findall(r"(?<![\w/.-])(?:docs/)?[\w/-]+\.md\b", prose)]
    return found


def test_the_reference_check_finds_a_page_named_in_plain_text():
    assert plain_text_references("see docs/peft.md, section 3\n") == ["line 1: docs/peft.md"]
    assert plain_text_references("see [PEFT](peft.md) and `README.md`\n\n    a/b.md\n") == []


@pytest.mark.parametrize("page", PAGES, ids=PAGE_IDS)
def test_pages_link_the_pages_they_name(page):
    """A page that names another page links it: plain text is no cross-reference on the site."""
    assert not plain_text_references(page.read_text()), plain_text_references(page.read_text())


def test_the_readme_links_the_pages_it_names():
    text = (ROOT / "README.md").read_text()
    assert not plain_text_references(text), plain_text_references(text)


def test_the_architecture_page_names_every_workflow_module():
    page = (ROOT / "docs" / "architecture.md").read_text()
    paths = [path for folder in ("tasks", "training", "cli") for path in (ROOT / "hf_efficient" / folder).glob("*.py")]
    assert paths and not [path.name for path in paths if f"{path.name}`" not in page and path.name != "__main__.py"]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebooks_link_the_pages_they_name(notebook):
    """Notebooks link pages as `../docs/page.md` (Jupyter, GitHub; the site's hook points them at its pages)."""
    text = "\n".join("".join(cell["source"]) for cell in read_notebook(notebook)["cells"] if cell["cell_type"] == "markdown")
    assert not plain_text_references(text), plain_text_references(text)


def test_every_family_documents_its_config_and_models_for_the_api_reference():
    """Config fields as an `Args:` section; each model class and its `forward` documented, `global_attention_mask` too."""
    hf_efficient = pytest.importorskip("hf_efficient")
    from hf_efficient.models.configuration_base import HfeConfig
    from hf_efficient.models.families import FAMILIES

    shared = HfeConfig.__doc__
    assert "\n    Args:\n" in shared
    for family in FAMILIES.values():
        config = family.config_class
        assert config.__doc__ and (config is hf_efficient.HfeRobertaConfig or "\n    Args:\n" in config.__doc__), config
        for field in config.__dict__.get("__annotations__", {}):
            assert f"    {field} (" in config.__doc__ or f"    {field} (" in shared, f"{config.__name__}.{field}"
        for model in family.models.values():
            assert model.__doc__ and "Args:" in model.__doc__, model.__name__
            doc = model.forward.__doc__
            assert doc and "Args:" in doc and "Returns:" in doc and "global_attention_mask" in doc, model.__name__


def test_each_config_default_the_docs_state_is_the_field_the_mechanisms_read():
    """A default is written once, as the config's field: mechanisms read `config_defaults` from it (`defaults_of`),
    and each docstring's "defaults to X" is checked against it here."""
    pytest.importorskip("hf_efficient")
    from hf_efficient.models.attention import ATTENTION_REGISTRY
    from hf_efficient.models.configuration_base import HfeConfig
    from hf_efficient.models.families import FAMILIES

    stated = re.compile(r"^ {8}(\w+) \(.*defaults to (.+)\):$", re.MULTILINE)
    checked = 0
    for config in {HfeConfig, *(family.config_class for family in FAMILIES.values())}:
        for field, value in stated.findall(config.__doc__):
            assert ast.literal_eval(value) == getattr(config, field), f"{config.__name__}.{field}"
            checked += 1
    assert checked > 40
    configs = [family.config_class for family in FAMILIES.values()]
    for mechanism in ATTENTION_REGISTRY.values():  # the defaults a mechanism falls back on are its family config's
        for field, value in mechanism.config_defaults.items():
            declared = [config for config in configs if field in vars(config).get("__annotations__", {})]
            assert declared or field == "is_decoder", f"{mechanism.__name__}.{field} is no family config's field"
            assert all(getattr(config, field) == value for config in declared), f"{mechanism.__name__}.{field}"


# each measured table and the name pages include it by (relative to docs/, or else to the repository root)
MEASURED = {
    table: table.relative_to(ROOT / "docs").as_posix() for table in sorted((ROOT / "docs" / "measured").glob("*.md"))
}
MEASURED[ROOT / "hf_efficient" / "data" / "long_tasks.md"] = "hf_efficient/data/long_tasks.md"
# an include, maybe indented (in a list or a note), of a whole file or of a section of it (`"file.md:section"`)
INCLUDE = re.compile(r'^ *--8<-- "([^":]+)(?::[a-z][-_0-9a-z]*)?"', re.MULTILINE)


def test_every_measured_table_is_included_and_never_retyped():
    """A measured table has one file (docs/measured/, the data's); pages include it (pymdownx.snippets), never copy it.

    So a page cannot show other numbers than the file: a copied row, or a table no page includes, fails.
    """
    assert MEASURED, "docs/measured/ holds no table"
    pages = {page: page.read_text() for page in PAGES if "measured" not in page.relative_to(ROOT / "docs").parts}
    included = {name for text in pages.values() for name in INCLUDE.findall(text)}
    for table, name in MEASURED.items():
        assert name in included, f"no page includes {name}"
        rows = [line for line in table.read_text().splitlines() if line.startswith("|") and "---" not in line]
        for page, text in pages.items():
            copied = [row for row in rows[1:] if row in text.splitlines()]
            assert not copied, f"{page.name} retypes rows of {name} instead of including it: {copied[:2]}"


# a ratio ("0.85x", "3-5x", "18x"), a memory figure ("1,984 MiB", "2.3 GiB") or a time ("0.61 ms", "1.2 s") typed
TYPED_FIGURE = re.compile(r"\b\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?x\b|\b\d[\d,.]* ?[KMG]iB\b|\b\d+(?:\.\d+)? ?m?s\b")
SPEED_PAGES = [*sorted((ROOT / "docs" / "families").glob("*.md")), ROOT / "docs" / "benchmarks.md",
               ROOT / "docs" / "accelerators.md"]


@pytest.mark.parametrize("page", SPEED_PAGES, ids=lambda page: page.stem)
def test_speed_pages_take_their_figures_from_the_measured_tables(page):
    """A speed or memory figure on the benchmarks, accelerators or a family page is in an included table, never retyped.

    So the prose cannot disagree with the tables (it says "cheaper", "about the windows' cost" and names the column).
    """
    typed = TYPED_FIGURE.findall(INCLUDE.sub("", page.read_text()))
    assert not typed, f"{typed[:3]} typed into {page.name}: include docs/measured/ or point at its table instead"


def test_the_typed_figure_check_finds_ratios_memory_and_times():
    assert TYPED_FIGURE.findall("1.18x faster, 2.3 GiB, 0.61 vs 0.52 ms, 40 s to compile") == [
        "1.18x", "2.3 GiB", "0.52 ms", "40 s"]
    assert not TYPED_FIGURE.findall("batch 4 x 256 tokens, within 1%, lr 3e-5, 2 steps")


def test_the_api_reference_documents_every_public_model_and_config():
    """Each `Hfe*Config`, `Hfe*Model` and `Hfe*For*` the package exposes has its `:::` entry in docs/api/."""
    hf_efficient = pytest.importorskip("hf_efficient")
    entries = {line.split()[1] for page in (ROOT / "docs" / "api").glob("*.md")
               for line in page.read_text().splitlines() if line.startswith("::: ")}
    public = [getattr(hf_efficient, name) for name in dir(hf_efficient)
              if re.fullmatch(r"Hfe\w*(?:Config|Model|For\w+)", name)]
    assert len(public) > 6
    missing = [f"{cls.__module__}.{cls.__name__}" for cls in public if f"{cls.__module__}.{cls.__name__}" not in entries]
    assert not missing, f"not in docs/api/: {missing}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_names_its_kernel(notebook):
    """`papermill notebook.ipynb out.ipynb` (no `-k`) and Jupyter find the kernel in the notebook.

    The jupytext metadata filter keeps `kernelspec`, so a notebook re-synced from text keeps it too.
    """
    metadata = read_notebook(notebook)["metadata"]
    assert metadata.get("kernelspec", {}).get("name") == "python3", "metadata.kernelspec.name is not python3"
    assert metadata["kernelspec"].get("language") == "python"
    jupytext_filter = metadata.get("jupytext", {}).get("notebook_metadata_filter", "")
    assert "-all" not in jupytext_filter.split(",") or "kernelspec" in jupytext_filter.split(","), (
        f"the jupytext filter {jupytext_filter!r} would strip the kernelspec")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_notebook_is_committed_with_the_outputs_of_a_clean_run(notebook):
    """Every code cell was executed, in order, in one run, and none raised."""
    cells = [cell for cell in read_notebook(notebook)["cells"] if cell["cell_type"] == "code"]
    parameters = [cell for cell in cells if "parameters" in cell.get("metadata", {}).get("tags", [])]
    assert len(parameters) == 1, "exactly one cell tagged `parameters` (papermill)"
    counts = [cell["execution_count"] for cell in cells if "".join(cell["source"]).strip()]
    assert None not in counts, "a code cell has not been executed"
    assert counts == list(range(counts[0], counts[0] + len(counts))), f"cells not run in order: {counts}"
    for cell in cells:
        for output in cell.get("outputs", []):
            assert output["output_type"] != "error", "".join(cell["source"])[:200]
            text = "".join(output.get("text", ""))
            assert not re.search(r"/tmp/|/work/|/home/", text), f"a local path in the outputs: {text[:300]}"


RESULT = re.compile(r"accuracy|loss|parameters|macro-f1|perplexity|->|documents|tokens|size", re.IGNORECASE)
MEASURED_COST = re.compile(r"\d[\d.,]*(?= ?(?:CPU-s|s\b|min\b|MiB))")


def printed_results(notebook: dict) -> list[str]:
    """The printed lines that state a result (sizes, losses, accuracies), with times and memory masked.

    Trainer log dicts (they hold runtimes) and tables whose cost columns carry no unit are left out;
    what a run measures of its machine (seconds, MiB) may differ from run to run, the rest may not.
    """
    lines = []
    for cell in notebook["cells"]:
        # a cell's outputs joined, so that a line the kernel flushed in two stream outputs (as it may when the machine
        # is busy: `print("input:", shape)` writes its words one by one) is read whole
        text = "".join("".join(output["text"]) if output["output_type"] == "stream"
                       else "".join(output.get("data", {}).get("text/plain", "")) + "\n"
                       for output in cell.get("outputs", []))
        lines += [MEASURED_COST.sub("<measured>", line.rstrip()) for line in text.splitlines()
                  if RESULT.search(line) and not line.lstrip().startswith(("{", "|"))]
    return lines


NUMBER = re.compile(r"\d+(?:\.\d+)?")


def differing_results(fresh: list[str], saved: list[str]) -> list[tuple[str, str]]:
    """The (fresh, saved) line pairs that differ in their words or by more than 2% (0.01) in a number: the float
    sums of another CPU differ in the last bits, and a few training steps carry that into the printed digits."""
    pairs = list(itertools.zip_longest(fresh, saved, fillvalue=""))
    return [(a, b) for a, b in pairs if NUMBER.sub("#", a) != NUMBER.sub("#", b) or not all(
        math.isclose(float(x), float(y), rel_tol=0.02, abs_tol=0.01) for x, y in zip(NUMBER.findall(a), NUMBER.findall(b), strict=True))]


def test_printed_results_mask_costs_and_keep_results():
    cell = {"outputs": [{"output_type": "stream", "text": [
        "{'loss': '1.2', 'train_runtime': '3.4'}\n", "adapt: MLM loss 6.9 -> 6.7 (2.9 CPU-s)\n", "| accuracy | 0.5 |\n",
        "fwd 0.134 s  71 MiB\n", "test accuracy"]}, {"output_type": "stream", "text": [" 0.579 in 14.9 min\n"]}]}
    assert printed_results({"cells": [cell]}) == [
        "adapt: MLM loss 6.9 -> 6.7 (<measured> CPU-s)", "test accuracy 0.579 in <measured> min"]
    assert not differing_results(["loss 10.918 -> 9.699", "accuracy 0.579"], ["loss 10.864 -> 9.665", "accuracy 0.584"])
    assert differing_results(["teacher 0.667, student 0.708"], ["teacher 0.667, student 0.625"])
    assert differing_results(["accuracy 0.5"], ["macro-f1 0.5"]) and differing_results(["a 1"], [])


@pytest.mark.parametrize("notebook", [pytest.param(path, id=path.stem, marks=[pytest.mark.slow] * (path.name in SLOW_NOTEBOOKS))
                                      for path in NOTEBOOKS])
def test_notebook_runs(notebook, tmp_path, monkeypatch):
    """It runs as committed, and prints the results its saved outputs show (HFE_UPDATE_NOTEBOOKS=1 saves them)."""
    papermill = pytest.importorskip("papermill")
    pytest.importorskip("ipykernel")
    monkeypatch.delenv("HF_TOKEN", raising=False)  # the local Hub stand-in, never the real Hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    papermill.execute_notebook(
        str(notebook), str(tmp_path / notebook.name), parameters=CI_PARAMETERS.get(notebook.name, {}),
        # no kernel_name: the kernel comes from the notebook's metadata, as it does for a user
        cwd=str(tmp_path), progress_bar=False, log_output=False,
    )
    executed = read_notebook(tmp_path / notebook.name)
    if os.environ.get("HFE_UPDATE_NOTEBOOKS") == "1":
        nbformat = pytest.importorskip("nbformat")
        relative = notebook.relative_to(ROOT).as_posix()
        executed["metadata"]["papermill"].update(input_path=relative, output_path=relative)
        nbformat.write(nbformat.from_dict(executed), notebook)
        return
    stale = differing_results(printed_results(executed), printed_results(read_notebook(notebook)))
    assert not stale, (f"the saved outputs of {notebook.name} are not this code's (printed {stale[0][0]!r}, saved "
                       f"{stale[0][1]!r}): HFE_UPDATE_NOTEBOOKS=1 saves a fresh run")


def finetune_run(seed: int, accuracy: float) -> dict:
    scores = {"accuracy": accuracy, "macro_f1": accuracy / 2}
    return {"stage": "finetune", "test_accuracy": accuracy, "test_macro_f1": accuracy / 2, "probe_accuracy": 0.5,
            "probe_macro_f1": 0.25, "majority_accuracy": 0.3, "majority_macro_f1": 0.05, "global_step": 10,
            "trainable_parameters": 25, "total_parameters": 100, "process_cpu_seconds": 12.4,
            "settings": {"seed": seed, "kept": "fine-tuned"},
            "baselines": {"validation": {"fine_tuned": scores, "probe": {"accuracy": 0.5, "macro_f1": 0.25}}}}


def test_runs_table_writes_each_run_and_the_mean_over_seeds(tmp_path):
    """The docs' accuracy tables: a row per run folder as the run wrote it, then each label's mean ± std."""
    runs_table = load_script("runs_table")
    for seed, accuracy in ((0, 0.8), (1, 0.6)):
        (tmp_path / f"s{seed}").mkdir()
        (tmp_path / f"s{seed}" / "hfe_stage.json").write_text(json.dumps(finetune_run(seed, accuracy)))
    runs = [runs_table.read_run(f"full={tmp_path / f's{seed}'}") for seed in (0, 1)]
    lines = runs_table.runs_table(runs).splitlines()
    assert "| full | 0 | 25 (25.00%) | 0.800 | 0.400 | 0.400 / 0.250 | fine-tuned | 10 | 12 |" in lines
    assert lines[-1] == "| full | 2 | 0.700 ± 0.141 (0.600-0.800) | 0.350 ± 0.071 (0.300-0.400) | 0.500 / 0.250 | 0.300 / 0.050 |"
    with pytest.raises(ValueError, match="expected LABEL=FOLDER"):
        runs_table.read_run(str(tmp_path / "s0"))
    with pytest.raises(ValueError, match="not found"):
        runs_table.read_run(f"x={tmp_path}")


def test_runs_table_writes_distillation_runs_with_the_teacher_and_the_cache(tmp_path):
    runs_table = load_script("runs_table")
    distilled = {"stage": "distill", "test_accuracy": 0.6, "test_macro_f1": 0.3, "teacher_test_accuracy": 0.5,
                 "kept_fraction_of_teacher_accuracy": 1.2, "student_parameters": 1_470_000, "global_step": 100,
                 "process_cpu_seconds": 20.2, "log_history": [{"loss": 1.0}, {"train_runtime": 22.25}],
                 "teacher_output_cache": {"seconds": 41.04, "bytes": 1_050_000}}
    assert runs_table.runs_table([("cached", distilled)]).splitlines()[-1] == (
        "| cached | 1.47 M | 0.500 | 0.600 | 0.300 | 120% | 100 | 20 | 22.2 | 41.0 s, 1.05 MB |")
    with pytest.raises(ValueError, match="not both"):
        runs_table.runs_table([("cached", distilled), ("full", finetune_run(0, 0.8))])


def test_choosing_table_sorts_each_family_by_its_range_against_the_windows(tmp_path):
    """The bench's Markdown (a length per heading, `**N tokens**` or `### N tokens`); a range per family over tables."""
    choosing = load_script("choosing_table")
    header = "| model | fwd s | fwd+bwd / windows |\n|---|---|---|\n"
    (tmp_path / "benchmark.md").write_text(
        f"**1024 tokens**\n\n{header}| hfe_bigbird | 0.3 | 0.91x |\n| no attention (floor) | 0.1 | 0.46x |\n\n"
        f"**2048 tokens**\n\n{header}| hfe_roberta | 0.300 | 1.46x |\n| hfe_linformer | failed: out of memory ||\n"
        "| hfe_bigbird | 0.5 | 0.90x |\n")
    (tmp_path / "minilm.md").write_text(f"### 1024 tokens\n\n{header}| hfe_bigbird | 0.9 | 0.98x |\n")
    (tmp_path / "long.md").write_text(f"### 8192 tokens\n\n{header}| hfe_bigbird | 1.0 | 1.06x |\n")
    ratios: dict = {}
    for name in ("benchmark", "minilm", "long"):
        choosing.read_ratios(tmp_path / f"{name}.md", ratios)
    lines = choosing.choosing_table(ratios).splitlines()
    assert "below 0.95x or above 1.05x" in lines[0]
    assert lines[-3:] == [
        "| 1024 | - | BigBird-style 0.91-0.98x | - | dense over the whole input |",
        "| 2048 | BigBird-style 0.90x | - | dense over the whole input 1.46x | - |",
        "| 8192 | - | - | BigBird-style 1.06x | dense over the whole input |",
    ]
    (tmp_path / "new.md").write_text(f"### 8192 tokens\n\n{header}| hfe_new | 0.1 | 0.50x |\n")
    with pytest.raises(ValueError, match="'hfe_new' is in neither FAMILIES nor LEFT_OUT"):
        choosing.read_ratios(tmp_path / "new.md", ratios)
    (tmp_path / "nolength.md").write_text(f"{header}| hfe_bigbird | 0.1 | 0.50x |\n")
    with pytest.raises(ValueError, match="no 'N tokens' heading"):
        choosing.read_ratios(tmp_path / "nolength.md", ratios)


def test_decision_table_labels_a_quality_cell_by_the_fewest_seeds_it_shows(tmp_path, monkeypatch):
    """A task's label counts the seeds of the rows its cell prints (long, truncated, windows): not TF-IDF's none, nor
    an equal-compute twin's or a variant's seeds; a task missing from the first table comes from the next."""
    decision = load_script("decision_table")

    def row(task: str, name: str, seeds: int, length: int = 512) -> dict:
        return {"task": task, "row": name, "seeds": seeds, "length": length, "metric_mean": 10.0}

    long_qa = [row("long_qa", "hfe_longformer 2048", 3, 2048), row("long_qa", decision.TRUNCATED_ROW, 2),
               row("long_qa", decision.WINDOWS_ROW, 3), row("long_qa", "TF-IDF", 1),
               row("long_qa", "hfe_longformer 2048 at the windows' CPU-s", 1, 2048)]
    far_qa = [row("far_qa", "hfe_longformer 2048", 3, 2048), row("far_qa", decision.TRUNCATED_ROW, 3),
              row("far_qa", decision.WINDOWS_ROW, 3), row("far_qa", "TF-IDF", 1)]
    (tmp_path / "first.json").write_text(json.dumps({"budget": {"num_train_epochs": 3}, "table": long_qa}))
    (tmp_path / "second.json").write_text(json.dumps({"budget": {"num_train_epochs": 1}, "table": long_qa + far_qa}))
    monkeypatch.setattr(decision, "DOCS", tmp_path)
    monkeypatch.setattr(decision, "QUALITY", {"first.json": ("a.md#first",) * 2, "second.json": ("a.md#second",) * 2})
    by_task = decision.quality_by_task()
    assert by_task["long_qa"][1].endswith("2,048 tokens, 3 epochs, 2 seeds](a.md#first)")
    assert by_task["far_qa"][1].endswith("2,048 tokens, 1 epoch, 3 seeds](a.md#second)")


@pytest.mark.parametrize("page_name, script", [
    ("benchmarks.md", "choosing_table"), ("measurements/quality.md", "learning_curve"), ("decide.md", "decision_table"),
    ("convert.md", "recipe_table"),
    pytest.param("measurements/quality.md", "far_qa_probe", marks=pytest.mark.slow),  # embeds every far_qa question
])
def test_a_summary_table_is_what_its_command_writes(page_name, script, tmp_path, monkeypatch):
    """docs/measured/choosing_a_family.md and decision.md (from the measured tables), recipe.md (from the code's
    settings), docs/quality/learning_curve.md (from the kept quality runs) and docs/quality/far_qa_probe.md (from the
    shipped far_qa) are regenerated by the command their page shows, and the page includes what it writes."""
    page = (ROOT / "docs" / page_name).read_text()
    found = re.search(rf"python (scripts/{script}\.py [^`]+?)(?:`|\n\n)", page)
    assert found, f"{page_name} shows no {script}.py command"
    arguments = shlex.split(found[1].replace("\\\n", " "))[1:]
    target = arguments.index("--markdown") + 1
    assert arguments[target].removeprefix("docs/") in INCLUDE.findall(page), f"{page_name} does not include {arguments[target]}"
    committed = (ROOT / arguments[target]).read_text()
    arguments[target] = str(tmp_path / "table.md")
    monkeypatch.chdir(ROOT)
    assert load_script(script).main(arguments) == 0
    assert (tmp_path / "table.md").read_text() == committed, "rerun the command: the table is out of date"


def test_learning_curve_tables_each_row_run_at_two_sizes(tmp_path):
    """Each row at each size over the seeds asked for (mean ± std, as bench-quality reports it); a row run at one size
    only (an ablation) is left out; two folders at one size must not both count."""
    learning_curve = load_script("learning_curve")

    def folder(name: str, train: int, runs: list[tuple[str, int | None, float]]) -> Path:
        for row, seed, metric in runs:
            path = tmp_path / name / "runs" / "long_qa" / (f"{row}.json" if seed is None else f"{row}/{seed}.json")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"task": "long_qa", "row": row, "mode": "tfidf" if seed is None else "long", "family": "hfe_longformer",
                                        "length": 2048, "peak_mib": None if seed is None else 100.0, "seed": seed, "metric": metric,
                                        "cpu_seconds": 10.0 * train + (seed or 0),
                                        "global_step": None if seed is None else train // 4}))
        (tmp_path / name / "budget.json").write_text(json.dumps({"train": train}))
        return tmp_path / name

    small = folder("small", 200, [("long", 0, 10.0), ("long", 1, 12.0), ("long", 2, 99.0), ("ablation", 0, 5.0),
                                  ("TF-IDF", None, 7.0)])
    large = folder("large", 400, [("long", 0, 20.0), ("TF-IDF", None, 7.5)])
    lines = learning_curve.markdown(learning_curve.curve([small, large], seeds=[0, 1]), seeds=[0, 1]).splitlines()
    assert lines[0].startswith("Seeds 0, 1 where run")
    assert lines[-4:] == ["| long_qa | long | 200 | 50 | test F1 | 11.0 ± 1.4 | 2000.5 | 2 |",
                          "| long_qa | long | 400 | 100 | test F1 | 20.0 | 4000.0 | 1 |",
                          "| long_qa | TF-IDF | 200 | - | test F1 | 7.0 | 2000.0 | 1 |",
                          "| long_qa | TF-IDF | 400 | - | test F1 | 7.5 | 4000.0 | 1 |"]
    with pytest.raises(ValueError, match="both ran long on long_qa at 200"):
        learning_curve.curve([small, folder("again", 200, [("long", 0, 11.0)])], seeds=[0])
    with pytest.raises(ValueError, match="no budget.json"):
        learning_curve.curve([tmp_path], seeds=[0])
