"""What every stage shares: command-line arguments, checkpoint checks, resumable Trainer runs, results files.

A stage is one `transformers.Trainer` run writing one output folder: the final model and tokenizer at
its top, `checkpoint-N/` folders while it trains, `report/` (metrics JSON and plots) and
`hfe_stage.json` once it has finished (the mark that `--resume` of a whole workflow skips it).
"""

from __future__ import annotations

import ast
import atexit
import dataclasses
import fcntl
import json
import math
import os
import re
import resource
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import datasets
import torch
from accelerate import Accelerator, PartialState
from transformers import (
    AutoConfig,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)
from transformers.trainer import TRAINER_STATE_NAME
from transformers.trainer_callback import ExportableState
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ..hub import check_files
from ..models.families import FAMILIES
from ..tasks.task import head_of
from .memory_fit import fit_batch
from .peft_recipe import save_model, trainable_summary
from .report import write_stage_report

STAGE_FILE = "hfe_stage.json"
LOCK_FILE = "hfe_run.lock"


class Interrupted(RuntimeError):
    """Training stopped on SIGINT/SIGTERM after saving a checkpoint; rerun with `--resume`."""


@dataclasses.dataclass
class OutputArguments:
    """The options of every stage's run: what it does with an --output_dir that already holds a run (see
    `resume_checkpoint`), and whether it fits its batch to the memory there is (`memory_fit`)."""

    resume: bool = dataclasses.field(default=False, metadata={"help": "continue from the last checkpoint in --output_dir"})
    overwrite_output_dir: bool = dataclasses.field(default=False, metadata={
        "help": "start over: delete the checkpoints, results and report of the run in --output_dir"})
    auto_fit_batch: bool = dataclasses.field(default=True, metadata={
        "help": "before training, measure one step and, when the batch would not fit in memory, train with a smaller "
                "--per_device_train_batch_size and more --gradient_accumulation_steps (the same effective batch), or "
                "stop naming what fits"})


def training_arguments(defaults: dict, given: dict) -> TrainingArguments:
    """TrainingArguments from a stage's defaults, overridden by what the user gave."""
    merged = {**defaults, **given}
    evaluation = merged.get("eval_strategy", "no")
    if "load_best_model_at_end" not in given and (evaluation == "no" or evaluation != merged.get("save_strategy", "steps")):
        # a default that would clash with the evaluation or saving the user chose gives way (the best model can only
        # be restored when every evaluation has its checkpoint)
        merged["load_best_model_at_end"] = False
    if not merged.get("output_dir"):
        raise ValueError("give an output folder with --output_dir")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        # torchrun on a machine without GPUs: accelerate runs multi-process on CPU (gloo) only when asked to
        merged.setdefault("use_cpu", True)
    return TrainingArguments(**merged)


def parse_overrides(pairs: str | Sequence[str] | None, option: str = "config override") -> dict:
    """FIELD=VALUE pairs -> {field: value}: every option that takes them (`--config_overrides`,
    `--student_config_overrides`, `--variants`, `convert --set`) reads them here.

    `pairs`: one string of comma-separated pairs (a comma inside brackets belongs to its list, so per-layer and
    per-head fields can be given: `"hidden_size=128,attention_window=[64,128]"`), or a list of pairs, one each (a
    repeated option, e.g. `--set`). A value is a Python literal or JSON (`True` / `true`, `None` / `null`, numbers,
    lists), else the text itself."""
    items = re.split(r",(?![^\[\]]*\])", pairs or "") if isinstance(pairs, str) else list(pairs or [])
    values = {}
    for item in filter(None, (part.strip() for part in items)):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"{option} expects FIELD=VALUE pairs; {item!r} is not key=value")
        values[key.strip()] = literal(value.strip())
    return values


def literal(text: str):
    """`text` as a Python literal, else as JSON, else the text itself."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pass
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


# ----------------------------------------------------------------------------------------- checks
def checkpoint_config(path: str | None, allowed_heads: tuple[str, ...], stage: str) -> PreTrainedConfig:
    """The config of the hf_efficient checkpoint in `path`, or a clear error if it is not one `stage` can start from."""
    if not path:
        raise ValueError(f"{stage} needs a checkpoint: give --model_name_or_path FOLDER")
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"checkpoint folder {folder} does not exist")
    if not (folder / "config.json").is_file():
        raise ValueError(f"{folder} is not a model checkpoint (it has no config.json)")
    check_files(folder)
    config = AutoConfig.from_pretrained(folder)
    if config.model_type not in FAMILIES:
        raise ValueError(
            f"{folder} holds a {config.model_type!r} model, not one of the hf_efficient families {sorted(FAMILIES)}; "
            "convert RoBERTa/BERT checkpoints to a family first"
        )
    heads = [head_of(name) for name in (config.architectures or [])]
    wrong = [name for name, head in zip(config.architectures or [], heads, strict=True) if head not in allowed_heads]
    if wrong:
        raise ValueError(
            f"{folder} is a checkpoint of another task ({', '.join(wrong)}); {stage} starts from a model with "
            f"one of the heads {', '.join(allowed_heads)}"
        )
    return config


def check_max_length(max_length: int, config: PreTrainedConfig | None = None) -> None:
    """ValueError naming --max_length when it is not positive or longer than `config`'s position table."""
    if max_length <= 0:
        raise ValueError(f"--max_length must be positive, got {max_length}")
    if config is not None and max_length > config.max_sequence_length:
        raise ValueError(
            f"--max_length {max_length} is above what the model's position table supports: "
            f"{config.max_sequence_length} tokens (max_position_embeddings={config.max_position_embeddings} minus the "
            f"position offset {config.position_offset}); use a smaller --max_length or a model with a longer table"
        )


def check_tokenizer(tokenizer: PreTrainedTokenizerBase, config: PreTrainedConfig) -> None:
    """ValueError for a tokenizer the stages cannot use: no mask or padding token, or more tokens than the model."""
    if tokenizer.mask_token is None or tokenizer.pad_token is None:
        raise ValueError(f"the tokenizer in {tokenizer.name_or_path} has no mask or padding token; the stages need both")
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {config.vocab_size}")


def pad_multiple(model: PreTrainedModel, max_length: int) -> int | None:
    """The multiple the family pads inputs to internally, for the collators' `pad_to_multiple_of`.

    Batches padded to it spare the model a copy; None when padding to it could exceed `max_length`
    (the position table), since the model then pads internally anyway.
    """
    multiple = model.pad_multiple(max_length) if hasattr(model, "pad_multiple") else 1
    return multiple if multiple > 1 and max_length % multiple == 0 else None


def check_output_arguments(args: OutputArguments) -> None:
    if args.resume and args.overwrite_output_dir:
        raise ValueError("give --resume (continue the run in --output_dir) or --overwrite_output_dir (start over), not both")


def holds_run(folder: Path) -> bool:
    """Whether `folder` holds a stage's run: a checkpoint or the mark of a finished stage."""
    return folder.is_dir() and ((folder / STAGE_FILE).is_file() or get_last_checkpoint(str(folder)) is not None)


# Output folders this process holds: resolved path -> (descriptor of its locked LOCK_FILE, whether the lock created it).
HELD_FOLDERS: dict[Path, tuple[int, bool]] = {}


def lock_output_dir(output_dir: str) -> None:
    """Hold `output_dir` for this run: a second run on it (another process) stops with one line naming the holder.

    An exclusive `flock` on LOCK_FILE (the holder's pid inside), held until `release_output_dir` (the stage finished)
    or the process ends: the system drops the lock of a process that dies, so the file a killed run leaves behind
    never blocks. Again in the same process, a no-op. Main process only: a distributed run's others share its folder.
    """
    folder = Path(output_dir).resolve()
    if folder in HELD_FOLDERS or not PartialState().is_main_process:
        return
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(descriptor, 32).decode(errors="replace").strip() or "unknown"
            os.close(descriptor)
            raise ValueError(f"{output_dir} is in use by another run (pid {holder}, lock file {path}): wait for it to "
                             "finish, or choose another --output_dir") from None
        if path.exists() and path.stat().st_ino == os.fstat(descriptor).st_ino:
            break
        os.close(descriptor)  # the holder released and removed the file since it was opened: lock the new one
    os.ftruncate(descriptor, 0)
    os.write(descriptor, f"{os.getpid()}\n".encode())
    HELD_FOLDERS[folder] = descriptor, created
    atexit.register(release_output_dir, folder)


def release_output_dir(output_dir: str | Path) -> None:
    """Let other runs use `output_dir` again if this process holds it: its lock file removed, and the folder too if
    the lock created it and the run wrote nothing (it stopped on bad input)."""
    folder = Path(output_dir).resolve()
    descriptor, created = HELD_FOLDERS.pop(folder, (None, False))
    if descriptor is None:
        return
    (folder / LOCK_FILE).unlink(missing_ok=True)  # while locked: a waiting run then locks a new file
    os.close(descriptor)
    if created and not any(folder.iterdir()):
        folder.rmdir()


def resume_checkpoint(output_dir: str, args: OutputArguments) -> str | None:
    """The checkpoint to resume from, after the checks and clean-up `args` asks for.

    A folder that holds a run (checkpoints, or a finished stage) is never silently trained over:
    `--resume` continues it, `--overwrite_output_dir` first deletes what the run left (its checkpoints,
    results and report; the main process deletes, the others wait), and otherwise it is an error.
    The folder is held for this run first (`lock_output_dir`).
    """
    check_output_arguments(args)
    folder = Path(output_dir)
    if not (args.resume or args.overwrite_output_dir):
        last = get_last_checkpoint(output_dir) if folder.is_dir() else None
        if (folder / STAGE_FILE).is_file():
            raise ValueError(f"{output_dir} holds a finished run (report in {folder / 'report'}): pass "
                             "--overwrite_output_dir to start over, or choose another --output_dir")
        if last:
            raise ValueError(f"{output_dir} already holds {Path(last).name}: pass --resume to continue it, "
                             "--overwrite_output_dir to start over, or choose another --output_dir")
    lock_output_dir(output_dir)
    if args.overwrite_output_dir:
        state = PartialState()
        if state.is_main_process and folder.is_dir():
            for path in [*folder.glob(f"{PREFIX_CHECKPOINT_DIR}-*"), folder / "report"]:
                shutil.rmtree(path, ignore_errors=True)
            (folder / STAGE_FILE).unlink(missing_ok=True)
        state.wait_for_everyone()
        return None
    return last_complete_checkpoint(output_dir) if args.resume and folder.is_dir() else None


def complete(checkpoint: Path) -> bool:
    """Whether a save of `checkpoint` finished: the Trainer writes trainer_state.json last, after the weights."""
    try:
        return isinstance(json.loads((checkpoint / TRAINER_STATE_NAME).read_text()), dict)
    except (OSError, ValueError):
        return False


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The last checkpoint in `output_dir` whose save finished; one a killed or failed save left is passed over."""
    steps = [(int(path.name.rsplit("-", 1)[1]), path) for path in Path(output_dir).glob(f"{PREFIX_CHECKPOINT_DIR}-*")
             if path.is_dir() and path.name.rsplit("-", 1)[1].isdigit() and complete(path)]
    return str(max(steps)[1]) if steps else None


def save_checkpoints_whole(trainer: Trainer) -> None:
    """Make a checkpoint save that fails (a full disk) remove what it wrote and stop with one clear line.

    Earlier checkpoints are untouched (the Trainer rotates old ones only after a save succeeded), so `--resume`
    continues from the last whole one (`last_complete_checkpoint`) once there is room again.
    """
    save = trainer._save_checkpoint

    def _save_checkpoint(model, trial):
        folder = Path(trainer._get_output_dir(trial=trial)) / f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}"
        was_complete = complete(folder)
        try:
            save(model, trial)
        except OSError as error:
            if not was_complete:
                shutil.rmtree(folder, ignore_errors=True)
            previous = last_complete_checkpoint(trainer.args.output_dir)
            kept = f"the last whole checkpoint, {Path(previous).name}, is intact" if previous else "no earlier checkpoint"
            raise OSError(f"saving {folder} failed: {error.strerror or error}; the partial save was removed and {kept}: "
                          "free space, then run the same command with --resume") from error

    trainer._save_checkpoint = _save_checkpoint


def finished_stage(output_dir: str) -> dict | None:
    """The results of a stage that completed in `output_dir`, or None."""
    path = Path(output_dir) / STAGE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


# ----------------------------------------------------------------------------------------- training
class SaveOnSignal(TrainerCallback):
    """On SIGINT/SIGTERM, finish the current optimizer step, save a checkpoint and stop.

    The handler only records the signal. At the end of each step a process that got one sets
    accelerate's trigger and every process checks it (`Accelerator.check_trigger` reduces it over the
    processes), so all stop at the same step and the checkpoint's collective save cannot deadlock.
    A second signal interrupts at once.
    """

    def __init__(self, accelerator: Accelerator):
        self.accelerator = accelerator
        self.received: int | None = None
        self.previous: dict[int, object] = {}

    def handle(self, signum, frame):
        if self.received is not None:  # a second signal: the user wants out now
            signal.signal(signum, self.previous.get(signum, signal.SIG_DFL))
            raise KeyboardInterrupt
        self.received = signum

    def on_train_begin(self, args, state, control, **kwargs):
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self.previous[signum] = signal.signal(signum, self.handle)

    def on_step_end(self, args, state, control, **kwargs):
        if self.received is not None:
            self.accelerator.set_trigger()
        if self.accelerator.check_trigger():
            self.received = self.received or signal.SIGTERM  # another process was signalled
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous.clear()


class CallbackStates(TrainerCallback):
    """Give each stateful callback of the run (early stopping) an entry in a resumed state that lacks one.

    transformers' checkpoint save updates those entries by name and fails with a KeyError on a missing one: a
    checkpoint of a run without early stopping (other evaluation settings) resumed with it.
    """

    def __init__(self, trainer: Trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        for callback in self.trainer.callback_handler.callbacks:
            if isinstance(callback, ExportableState):
                state.stateful_callbacks.setdefault(type(callback).__name__, callback.state())


def quiet_progress(training_args: TrainingArguments) -> None:
    """With `--disable_tqdm`, silence the `datasets` progress bars (map, filter, loading) as well as the Trainer's."""
    if training_args.disable_tqdm:
        datasets.disable_progress_bars()


def train(trainer: Trainer, checkpoint: str | None, auto_fit_batch: bool) -> None:
    """`trainer.train()`, resuming from `checkpoint`, its batch first fitted to memory (`auto_fit_batch`,
    `memory_fit.fit_batch`); raise `Interrupted` if a signal stopped it (checkpoint saved)."""
    if auto_fit_batch:
        fit_batch(trainer)
    save_checkpoints_whole(trainer)
    callback = SaveOnSignal(trainer.accelerator)
    added = (callback, CallbackStates(trainer))
    for each in added:
        trainer.add_callback(each)
    try:
        trainer.train(resume_from_checkpoint=checkpoint)
    finally:
        for each in added:
            trainer.remove_callback(each)
    if callback.received is not None:
        name = signal.Signals(callback.received).name
        raise Interrupted(
            f"{name} received: stopped at step {trainer.state.global_step} and saved a checkpoint in "
            f"{trainer.args.output_dir}; run the same command with --resume to continue"
        )


def peak_memory() -> dict[str, float]:
    """This process's peak memory so far, in MiB: its resident set (what an out-of-memory killer counts) and, when it
    used CUDA, the most tensor memory allocated on its device."""
    peak = {"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 2**10)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak["peak_cuda_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return peak


def finish(trainer: Trainer, results: dict, merge: bool = False) -> dict:
    """Save the final model (`merge`: a peft adapter merged in), tokenizer and results (with what every stage records:
    its steps, processes, parameters, batch and cost); write the stage's report."""
    batch = {name: getattr(trainer.args, name) for name in ("per_device_train_batch_size", "gradient_accumulation_steps")}
    results = {**results, "global_step": trainer.state.global_step, "world_size": trainer.args.world_size,
               **trainable_summary(trainer.model), **peak_memory(), **batch,  # the batch `fit_batch` chose
               "process_cpu_seconds": time.process_time(),  # user + system, this process so far: a run's cost on a shared machine
               "log_history": trainer.state.log_history}
    save_model(trainer, merge)
    if trainer.is_world_process_zero():
        trainable, total = results["trainable_parameters"], results["total_parameters"]
        print(f"trainable parameters: {trainable:,} of {total:,} ({100 * trainable / total:.2f}%)", flush=True)
        write_stage_report(Path(trainer.args.output_dir) / "report", results)
        (Path(trainer.args.output_dir) / STAGE_FILE).write_text(json.dumps(results, indent=2, default=str))
    release_output_dir(trainer.args.output_dir)
    return results


def safe_exp(loss: float) -> float:
    return math.exp(loss) if loss < 50 else float("inf")
