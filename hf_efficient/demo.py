"""`demo`, the main job (scripts/demo.sh): what the package is for, on the embedded data, in about 10 minutes.

A real pretrained encoder, all-MiniLM-L6-v2, converted to Longformer-style at 2048 tokens (the pretrained-start
recipe, recipes.py) and fine-tuned on the embedded long-document look-up questions (`long_qa`), side by side with the
same start over dense 512-token sliding windows, truncated to 512, and TF-IDF. It is `hf-efficient bench-quality` at
the budget of `PRESET` (one seed, two workers): one table of test F1, training CPU-seconds and peak MiB per row,
written with its plot into the run's folder. `--from_scratch` runs the three-stage workflow instead (all_stages.py:
a small model pretrained from scratch, adapted, fine-tuned), for users who pretrain their own encoder.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

from transformers import TrainingArguments

from .bench import quality
from .training import all_stages, stage

# The demo's whole budget: bench-quality's options, by its names (each can be given to `demo` to change it). Sized for
# about 10 minutes on 2 idle cores by the number of training questions, the same for every row: the windows row, the
# longest run, sets the wall time. The README states the wall time measured at these values, which every run records
# in its FINISHED file. Adapt steps: all-MiniLM-L6-v2 ships no MLM head, so domain MLM would first train a new LM head
# (tied to the word embeddings) with the encoder; off, as in bench-quality's table, until an adapt row is measured
# there (docs/measurements/quality.md, "Not measured yet").
PRESET = {"start": "minilm", "tasks": ["long_qa"], "seeds": [0], "max_train_samples": 80, "max_eval_samples": 80,
          "learning_rate": 2e-4, "batch_size": 4, "long_batch_size": 2, "num_train_epochs": 1.0, "max_steps": -1, "adapt_steps": 0,
          "workers": 2}
OUTPUT_DIR = "hfe-demo"  # the long demo's default folder; --from_scratch keeps the workflow's hfe-workflow-demo
FINISHED = "demo.json"  # written last: the demo's wall time, and the mark that the folder holds a finished run
SUMMARY = "demo.md"  # the wall time and the table, as a page can include it (docs/measured/demo.md is one such run)
RUN_OPTIONS = ("output_dir", "resume", "overwrite_output_dir")  # the options of both demos that are not the budget


def workflow_options() -> set[str]:
    """The options `hf-efficient workflow` takes: its own and every TrainingArguments field."""
    return {f.name for kind in (all_stages.WorkflowArguments, TrainingArguments) for f in dataclasses.fields(kind)}


def bench_command(options: dict) -> list[str]:
    """`options` (bench-quality's names) as its command line."""
    argv = []
    for name, value in options.items():
        argv += [f"--{name}", *map(str, value if isinstance(value, list) else [value])]
    return argv


def check_options(given: set[str], from_scratch: bool) -> None:
    """One line for an option the chosen demo does not take (it would otherwise be silently ignored)."""
    long_only = sorted(set(PRESET) - workflow_options())
    wrong = sorted(given & set(long_only) if from_scratch else given - set(PRESET) - set(RUN_OPTIONS))
    if wrong and from_scratch:
        raise ValueError(f"--{wrong[0]} is an option of the long-document demo, not of --from_scratch")
    if wrong:
        raise ValueError(f"--{wrong[0]} is an option of the three-stage demo: add --from_scratch (the long-document "
                         f"demo takes --{', --'.join([*RUN_OPTIONS, *PRESET])})")


def demo(options: dict, output_dir: str | None = None, resume: bool = False, overwrite_output_dir: bool = False) -> dict:
    """Run the long-document demo (`PRESET` updated with `options`) into `output_dir`; returns bench-quality's report.

    A finished run there is reported, not rerun; an unfinished one needs `resume` (bench-quality reuses every
    finished recipe and run) or `overwrite_output_dir` (what bench-quality wrote is deleted first)."""
    stage.check_output_arguments(stage.OutputArguments(resume=resume, overwrite_output_dir=overwrite_output_dir))
    out = Path(output_dir or OUTPUT_DIR)
    stage.lock_output_dir(str(out))
    finished = out / FINISHED
    if overwrite_output_dir:
        for name in (*quality.OUTPUTS, FINISHED, SUMMARY):
            path = out / name
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
    elif finished.is_file():
        run = json.loads(finished.read_text())
        (out / SUMMARY).write_text(summary(run, out))
        print(f"{out} holds a finished demo run ({run['minutes']:.1f} min); report in {out} (quality.md, quality.png). "
              f"Pass --overwrite_output_dir to start over.\n\n{(out / SUMMARY).read_text()}", flush=True)
        return json.loads((out / "quality.json").read_text())
    elif not resume and any((out / name).exists() for name in quality.OUTPUTS):
        raise ValueError(f"{out} holds an unfinished demo run: pass --resume to continue it, --overwrite_output_dir to "
                         "start over, or choose another --output_dir")
    command = bench_command({**PRESET, **options, "output_dir": str(out)})
    print(f"== the demo: the long model beside 512-token windows, truncation and TF-IDF, as\n"
          f"   hf-efficient bench-quality {' '.join(command)}", flush=True)
    parser = argparse.ArgumentParser()
    quality.add_arguments(parser)
    started = time.time()
    report = quality.bench_quality(parser.parse_args(command))
    minutes = (time.time() - started) / 60
    run = {"minutes": minutes, "resumed": resume, "command": command, "cpu_count": os.cpu_count()}
    (out / SUMMARY).write_text(summary(run, out))
    print(published_beside(report["table"]), flush=True)
    finished.write_text(json.dumps(run, indent=2))
    took = f"{minutes:.1f} min" + (" (this invocation; --resume)" if resume else "")
    print(f"Demo finished in {took}; report in {out}: quality.md (the table above), quality.png, quality.json", flush=True)
    return report


def summary(run: dict, out: Path) -> str:
    """A finished run (`FINISHED`'s record) in `out`: how long it took, on how many cores, with what command; its
    table; and the published table's rows of its tasks beside it. A rerun writes it again, so a folder of an earlier
    version gets it too."""
    where = f" on {run['cpu_count']} CPU cores" if run.get("cpu_count") else ""
    took = f"{run['minutes']:.1f} minutes of wall time{where}" + (" (the last invocation of a resumed run)"
                                                                   if run["resumed"] else "")
    table = (out / "quality.md").read_text()
    beside = published_beside(json.loads((out / "quality.json").read_text())["table"])
    return (f"`hf-efficient demo` took {took}, running `hf-efficient bench-quality {' '.join(run['command'])}`."
            f"\n\n{table}{beside}")


def published_beside(own: list[dict]) -> str:
    """The published table's rows (over seeds, at bench-quality's default budget) of the tasks of the run's table
    `own`, labelled as not this run: a one-seed demo at its small budget may leave a row unlearnt; "" when this
    install has no published table."""
    table, source = quality.load_published()
    tasks = {row["task"] for row in own}
    rows = [row for row in table or [] if row["task"] in tasks]
    if not rows:
        return ""
    lines = ["", f"Not this run: the published table of the same tasks ({source}). Its budget is not this run's: every "
                 f"row moves with the number of training examples, {quality.TFIDF}'s too (its IDF is fitted on the "
                 f"training contexts).", "",
             "| task | row | mean ± std | training CPU-s | seeds |", "|---|---|---|---|---|"]
    lines += [f"| {row['task']} | {quality.row_label(row)} | {quality.mean_and_spread(row)} | {row['cpu_seconds']:.1f} | "
              f"{row['seeds']} |" for row in rows]
    return "\n".join(lines) + "\n"
