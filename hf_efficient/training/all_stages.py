"""`workflow` / `demo`: general MLM pretraining -> domain-adaptive MLM -> fine-tuning, in one run.

Each stage's output folder is the next stage's input (`<output_dir>/1-pretrain`, `2-adapt`,
`3-finetune`); `<output_dir>/report` gets the summary JSON and the figures. With `--resume`,
finished stages are skipped and an interrupted one continues from its last checkpoint; a finished
run is reported, not rerun, unless `--overwrite_output_dir` starts it over.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from accelerate import PartialState
from transformers import TrainingArguments

from ..recipes import family_settings
from ..tasks.classification import check_head_options
from ..tasks.task_data import check_files, load_task
from . import finetuning, mlm, stage
from .report import summary_table, write_workflow_report

# Sizes and steps per preset (docs/workflow.md has the measured runs and their cost). Fine-tuning: a new head on a
# briefly pretrained encoder learns within an epoch or two only with mean pooling, small batches and its own, larger
# learning rate; the first-token head at batch 8 and one learning rate stays far behind. The presets keep the random
# head and the last epoch's model they were measured with, not the package defaults (head from the probe, best epoch
# restored).
DEMO = {
    "size": "mini", "max_length": 1024, "vocab_size": 8000, "max_train_documents": None,
    "classifier_pooling": "mean", "classifier_learning_rate": 3e-2, "classifier_init": "random",
    "pretrain": {"max_steps": 50, "learning_rate": 1e-3, "eval_strategy": "steps", "eval_steps": 25},
    "adapt": {"max_steps": 50, "learning_rate": 1e-3, "eval_strategy": "steps", "eval_steps": 25},
    "finetune": {"num_train_epochs": 2, "learning_rate": 1e-3, "per_device_train_batch_size": 2,
                 "load_best_model_at_end": False},
}
# "small": the demo at 2048 tokens with twice the MLM steps.
LONGER_MLM = {"max_steps": 100, "learning_rate": 1e-3, "eval_strategy": "steps", "eval_steps": 50}
PRESETS = {"demo": DEMO, "small": {**DEMO, "max_length": 2048, "pretrain": LONGER_MLM, "adapt": LONGER_MLM}}
STAGE_DIRS = {"pretrain": "1-pretrain", "adapt": "2-adapt", "finetune": "3-finetune"}


@dataclass
class WorkflowArguments(stage.OutputArguments):
    model_type: str = field(default_factory=mlm.default_model_type, metadata={"help": "family (registered model_type)"})
    preset: str = field(default="demo", metadata={"help": f"sizes and steps: {', '.join(PRESETS)}"})
    size: str | None = field(default=None, metadata={"help": f"model size ({', '.join(mlm.SIZES)}; default: the preset's)"})
    config_overrides: str | None = field(default=None, metadata={"help": "config fields, e.g. 'num_hidden_layers=4'"})
    max_length: int | None = field(default=None, metadata={"help": "tokens per sequence in every stage (default: the preset's)"})
    general_files: list[str] | None = field(default=None, metadata={"help": "general text (default: embedded general corpus)"})
    domain_files: list[str] | None = field(default=None, metadata={"help": "domain text (default: embedded kernel docs)"})
    train_file: str | None = field(default=None, metadata={"help": "classification training file (default: embedded kernel_docs)"})
    validation_file: str | None = field(default=None, metadata={"help": "classification validation file"})
    test_file: str | None = field(default=None, metadata={"help": "classification test file"})
    text_column: str = field(default="text", metadata={"help": "column holding the text"})
    label_column: str = field(default="label", metadata={"help": "column holding the class"})
    vocab_size: int | None = field(default=None, metadata={"help": "BPE vocabulary to train (default: the preset's)"})
    classifier_pooling: str | None = field(default=None, metadata={"help": "what the classifier reads: cls or mean (default: the preset's)"})
    classifier_learning_rate: float | None = field(default=None, metadata={"help": "learning rate of the classification head (default: the preset's)"})
    max_documents: int | None = field(default=None, metadata={"help": "use at most this many documents/examples per stage (quick runs)"})
    resume: bool = field(default=False, metadata={"help": "skip finished stages, continue an interrupted one"})


def stage_training_args(defaults: dict, preset: dict, given: dict, output_dir: Path) -> TrainingArguments:
    """A stage's TrainingArguments: the stage defaults, then the preset's, then what the user gave."""
    return stage.training_arguments({**defaults, **preset}, {**given, "output_dir": str(output_dir)})


def pretrain_overrides(args: WorkflowArguments) -> dict:
    """The new model's config fields: the family's recipe settings (recipes.py), its layer pattern fitted to the
    model's layers, under --config_overrides."""
    overrides = stage.parse_overrides(args.config_overrides, "--config_overrides")
    size = args.size or PRESETS[args.preset]["size"]
    layers = overrides.get("num_hidden_layers", mlm.size_fields(size)["num_hidden_layers"])
    if not isinstance(layers, int):  # the config names the bad value
        return overrides
    return {**family_settings(args.model_type, layers), **overrides}


def run_workflow(args: WorkflowArguments, given: dict) -> list[dict]:
    """Run (or resume) the three stages; `given` are TrainingArguments fields applied to every stage."""
    if args.preset not in PRESETS:
        raise ValueError(f"unknown --preset {args.preset!r}; choose from {sorted(PRESETS)}")
    preset = PRESETS[args.preset]
    root = Path(given.get("output_dir") or f"hfe-workflow-{args.preset}")
    max_length = preset["max_length"] if args.max_length is None else args.max_length
    dirs = {name: root / folder for name, folder in STAGE_DIRS.items()}
    documents = args.max_documents or preset["max_train_documents"]
    head = {name: preset[name] if getattr(args, name) is None else getattr(args, name)
            for name in ("classifier_pooling", "classifier_learning_rate")}
    common = {"text_column": args.text_column, "max_length": max_length, "resume": args.resume,
              "overwrite_output_dir": args.overwrite_output_dir, "auto_fit_batch": args.auto_fit_batch}
    plan = [
        ("pretrain", mlm.MLM_DEFAULTS, lambda: mlm.PretrainArguments(
            model_type=args.model_type, size=args.size or preset["size"], config_overrides=pretrain_overrides(args),
            vocab_size=args.vocab_size or preset["vocab_size"], train_files=args.general_files, dataset="general",
            max_train_documents=documents, **common), mlm.pretrain),
        ("adapt", mlm.MLM_DEFAULTS, lambda: mlm.AdaptArguments(
            model_name_or_path=str(dirs["pretrain"]), train_files=args.domain_files, dataset="domain",
            max_train_documents=documents, **common), mlm.adapt),
        ("finetune", finetuning.FINETUNE_DEFAULTS, lambda: finetuning.FinetuneArguments(
            model_name_or_path=str(dirs["adapt"]), train_file=args.train_file, validation_file=args.validation_file,
            test_file=args.test_file, label_column=args.label_column, max_train_samples=args.max_documents,
            max_eval_samples=args.max_documents, classifier_init=preset["classifier_init"], **head, **common),
         finetuning.finetune),
    ]
    # Check what can be checked before the first stage trains: the model, classifier options, input files.
    config = mlm.new_config(plan[0][2]())
    check_head_options(plan[-1][2](), config)
    for files in (args.general_files, args.domain_files):
        if files:
            check_files(files)
    if args.train_file:
        load_task(args.train_file, args.validation_file, args.test_file, "kernel_docs",
                                        args.text_column, args.label_column)

    stage.check_output_arguments(args)
    summary = root / "report" / "summary.json"
    if args.overwrite_output_dir:  # each stage clears its own folder when it starts
        if PartialState().is_main_process:
            shutil.rmtree(root / "report", ignore_errors=True)
    elif summary.is_file():  # finished: say so, keep its recorded figures
        recorded = json.loads(summary.read_text())
        if PartialState().is_main_process:
            print(f"{root} holds a finished workflow run ({recorded['model_type']}, preset {recorded['preset']}, "
                  f"{recorded['minutes']:.1f} min); report in {root / 'report'}. Pass --overwrite_output_dir to start "
                  f"over.\n{summary_table(recorded['stages'])}", flush=True)
        return recorded["stages"]
    elif not args.resume and any(stage.holds_run(folder) for folder in dirs.values()):
        raise ValueError(f"{root} holds an unfinished workflow run: pass --resume to continue it, "
                         "--overwrite_output_dir to start over, or choose another --output_dir")

    start, results, skipped = time.time(), [], 0
    for name, defaults, make_args, function in plan:
        done = stage.finished_stage(dirs[name]) if args.resume else None
        if done is not None:
            print(f"== {name}: already finished in {dirs[name]}, skipped (--resume)", flush=True)
            results.append(done)
            skipped += 1
            continue
        print(f"== {name} -> {dirs[name]}", flush=True)
        results.append(function(make_args(), stage_training_args(defaults, preset[name], given, dirs[name])))
    minutes = (time.time() - start) / 60
    if not PartialState().is_main_process:
        return results
    write_workflow_report(root / "report", results, {"model_type": args.model_type, "preset": args.preset,
                                                     "max_length": max_length, "minutes": minutes,
                                                     "stages_resumed_finished": skipped})
    took = f"{minutes:.1f} min" + (f" (this run; {skipped} finished stage(s) skipped)" if skipped else "")
    print(f"\nWorkflow of {args.model_type} (preset {args.preset}, {max_length} tokens) in {took}; "
          f"report in {root / 'report'}\n{summary_table(results)}", flush=True)
    return results
