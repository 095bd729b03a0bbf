"""`finetune`: fine-tune a checkpoint on any registered task (`tasks.task.Task`), the one runner every task shares.

The runner checks the options, the checkpoint and the tokenizer, reads the task's data, builds its model (under
`--peft`), trains it resumably, keeps the start when validation says it is better (a task whose start is a model of
the task already), evaluates, and writes the results beside the task's baseline. The options every task shares
(`FinetuneArguments`) and the TrainingArguments defaults live here; each task's own come in its dataclasses.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
import transformers
from transformers import EarlyStoppingCallback, TrainingArguments, set_seed

from ..hub import load_tokenizer
from ..models.families import HEADS
from ..tasks.classification import ClassificationArguments, HeadLearningRate, TextColumns, TextPairColumn
from ..tasks.multiple_choice import TASK as MULTIPLE_CHOICE
from ..tasks.question_answering import TASK as QUESTION_ANSWERING
from ..tasks.question_answering import QuestionAnsweringArguments
from ..tasks.task import TASKS, Task, check_fast, check_head_size, check_options, option_values, options_of
from ..tasks.token_classification import TASK as TOKEN_CLASSIFICATION
from ..tasks.token_classification import TokenClassificationArguments
from . import peft_recipe, stage
from .peft_recipe import PeftArguments

FINETUNE_DEFAULTS = {
    "weight_decay": 0.01, "warmup_steps": 0.1, "lr_scheduler_type": "linear", "max_grad_norm": 1.0,
    "per_device_train_batch_size": 8, "per_device_eval_batch_size": 8, "num_train_epochs": 3, "logging_steps": 10,
    "eval_strategy": "epoch", "save_strategy": "epoch", "save_total_limit": 2, "load_best_model_at_end": True,
    "metric_for_best_model": "macro_f1", "greater_is_better": True, "report_to": "none",
    "dataloader_pin_memory": torch.cuda.is_available(),
}


def task_defaults(task: Task) -> dict:
    """TrainingArguments defaults of `task`'s runs: the best checkpoint and early stopping by its `metric`."""
    return {**FINETUNE_DEFAULTS, "metric_for_best_model": task.metric}


def default_learning_rate(config: transformers.PreTrainedConfig) -> float:
    """5e-5 at RoBERTa-base's width (768), scaled as 1/width for narrower models (Adam's update per weight is
    about the learning rate, so narrower layers take larger rates; muP), at most 1e-3: mini (128) 3e-4."""
    return min(1e-3, 5e-5 * 768 / config.hidden_size)


@dataclass
class FinetuneArguments(ClassificationArguments, HeadLearningRate, TextPairColumn, TextColumns, stage.OutputArguments,
                        PeftArguments):
    """`finetune`'s options: every task's, and classification's (the other tasks' own come in their dataclasses)."""

    model_name_or_path: str | None = field(default=None, metadata={"help": "MLM checkpoint folder (required)"})
    tokenizer_name: str | None = field(default=None, metadata={"help": "tokenizer folder (default: the checkpoint's)"})
    dataset: str = field(default="kernel_docs", metadata={
        "help": "embedded task when no --train_file: kernel_docs, long_match (classification), long_qa, far_qa, man_qa (question_answering)"})
    train_file: str | None = field(default=None, metadata={"help": "local .jsonl/.csv/.parquet training split"})
    validation_file: str | None = field(default=None, metadata={"help": "validation split (default: cut from train)"})
    test_file: str | None = field(default=None, metadata={"help": "test split (default: cut from train)"})
    max_length: int | None = field(default=None, metadata={"help": "truncate inputs to this many tokens (default: the model's limit)"})
    min_train_steps: int = field(default=300, metadata={"help": "every --task: train more epochs than --num_train_epochs when needed to make at least this many batches of examples (0: off; question answering counts questions, not windows, so every length sees the same questions)"})
    early_stopping_patience: int = field(default=3, metadata={"help": "every --task: stop after this many validations without improvement of --metric_for_best_model (0: off; only with load_best_model_at_end, the default)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only this many training examples"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only this many validation/test examples"})


def finetune(args: FinetuneArguments, training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """Fine-tune a sequence classifier (`callbacks`: more `TrainerCallback`s); returns test metrics next to the
    majority and frozen-probe baselines."""
    return run(TASKS["classification"], args, None, training_args, callbacks)


def training_arguments(args: FinetuneArguments, given: dict, defaults: dict = FINETUNE_DEFAULTS) -> TrainingArguments:
    """`defaults` with the learning rate for the checkpoint's width (every task), overridden by the fields in `given`.

    Any head passes here: each task checks that its checkpoint suits it when it starts."""
    defaults = dict(defaults)
    if "learning_rate" not in given:
        defaults["learning_rate"] = default_learning_rate(
            stage.checkpoint_config(args.model_name_or_path, tuple(HEADS), "finetune"))
    return stage.training_arguments(defaults, given)


def start(args, task: Task) -> tuple[transformers.PreTrainedConfig, transformers.PreTrainedTokenizerBase, int]:
    """The checks every task runs before reading data: (config, tokenizer, max_length)."""
    config = stage.checkpoint_config(args.model_name_or_path, ("ForMaskedLM", "Model", task.head),
                                     f"finetune --task {task.name}")
    tokenizer = load_tokenizer(args.tokenizer_name or args.model_name_or_path)
    check_fast(task, tokenizer)
    max_length = args.max_length or config.max_sequence_length
    stage.check_max_length(max_length, config)
    stage.check_tokenizer(tokenizer, config)
    return config, tokenizer, max_length


def length_of_training(args, training_args: TrainingArguments,
                       train_examples: int) -> tuple[list[transformers.TrainerCallback], list[str]]:
    """The length-of-training options of every task: `--min_train_steps` raises `training_args.num_train_epochs` (in
    place) for `train_examples` per epoch, counted in examples (question answering: questions, not the windows the
    Trainer iterates, so that a model reading windows and one reading whole contexts see the same questions);
    `--early_stopping_patience` gives the returned callbacks (none without `load_best_model_at_end`, whose best
    metric the callback compares with). Also returned: a line for each option the defaults changed, which the run
    prints and its results record."""
    changed = []
    if training_args.max_steps <= 0 and args.min_train_steps > 0:
        batch = training_args.train_batch_size * training_args.gradient_accumulation_steps * training_args.world_size
        steps_per_epoch = max(1, math.ceil(train_examples / batch))
        epochs = math.ceil(args.min_train_steps / steps_per_epoch)
        if epochs > training_args.num_train_epochs:
            changed.append(f"--num_train_epochs {training_args.num_train_epochs:g} raised to {epochs}: "
                           f"{train_examples} examples in batches of {batch} make {steps_per_epoch} step{'s' * (steps_per_epoch > 1)} an epoch, "
                           f"fewer than --min_train_steps {args.min_train_steps} (--min_train_steps 0 keeps your epochs)")
            training_args.num_train_epochs = epochs
    stopping = args.early_stopping_patience > 0 and training_args.load_best_model_at_end
    return ([EarlyStoppingCallback(args.early_stopping_patience)] if stopping else []), changed


def keep_start(trainer: transformers.Trainer, start: dict | None, init: Callable[..., transformers.PreTrainedModel]) -> str:
    """"start" when the start's validation scores beat the best checkpoint's, its weights then restored by `init`, else
    "fine-tuned": the Trainer never saves step 0, so its best checkpoint leaves out a start that is a model of the task
    already (a head initialised as the probe), and fine-tuning that never beats it would give back a worse model."""
    args, best = trainer.args, trainer.state.best_metric
    metric = (args.metric_for_best_model or "loss").removeprefix("eval_")
    value = None if start is None or not args.load_best_model_at_end or best is None else start.get(metric)
    if value is None or not (value > best if args.greater_is_better else value < best):
        return "fine-tuned"
    sharded = trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled
    if not sharded:
        trainer.model.load_state_dict(init().state_dict())
    if trainer.is_world_process_zero():
        print(f"finetune: fine-tuning never beat its start on validation: {metric} {value:.3f} against the best "
              f"checkpoint's {best:.3f}; " + ("a sharded run keeps the fine-tuned model (its full state dict does not "
                                              "load into shards)" if sharded else "the saved model is the start"),
              flush=True)
    return "fine-tuned" if sharded else "start"


def run(task: Task, args: FinetuneArguments, task_args, training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """Fine-tune `task`: check -> load and check the data -> features -> model (a search) -> Trainer -> the start as
    a candidate -> evaluate -> report, warnings."""
    check_options(task.name, options_of("finetune"), option_values(args, task_args))
    stage.quiet_progress(training_args)
    config, tokenizer, max_length = start(args, task)
    task.check(args, config)
    data = task.data(args, task_args, tokenizer, max_length, "finetune", training_args.process_index == 0)
    settings, what = task.head_settings(data, args, config)
    check_head_size(args, config, task.head, settings.get("num_labels", config.num_labels), what)  # none: any
    checkpoint = stage.resume_checkpoint(training_args.output_dir, args)  # after the checks: it may clean up

    def collator(model: transformers.PreTrainedModel):
        return task.collator(tokenizer, stage.pad_multiple(model, max_length))

    set_seed(training_args.seed)
    init, model_settings = task.model_init(args, config, settings, data, collator, training_args,
                                           lambda model: peft_recipe.wrap(model, args, task.head))
    model = init()
    stopping, changed = length_of_training(args, training_args, len(data.examples["train"]))  # a search's replace these
    if training_args.process_index == 0:
        for line in changed:
            print(f"finetune: {line}", flush=True)

    def trainer_for(run_args: TrainingArguments, **model_or_init) -> transformers.Trainer:
        return task.trainer_class(  # a copy of the callbacks per Trainer: early stopping counts evaluations
            args=run_args, data_collator=collator(model), train_dataset=data.features["train"],
            eval_dataset=data.features["validation"], processing_class=tokenizer,
            callbacks=[*callbacks, *map(copy.copy, stopping)], **model_or_init,
            **task.trainer_options(data, args, task_args))

    searched = task.search(lambda run_args: trainer_for(run_args, model_init=init), args, training_args)
    if searched:
        training_args = dataclasses.replace(training_args, **searched["best"])
    trainer = trainer_for(training_args, model=model)
    stage.train(trainer, checkpoint, args.auto_fit_batch)
    kept = keep_start(trainer, task.start_scores(data), init)
    test = task.evaluate(trainer, data)
    fields, summary = task.report(data, test, task.baseline(data))
    state, run_args = trainer.state, trainer.args
    results = {"stage": "finetune", "task": task.name, "model_type": config.model_type, "max_length": max_length,
               "source": args.model_name_or_path, "examples": {name: len(split) for name, split in data.examples.items()},
               **fields,
               "settings": {"seed": run_args.seed, "learning_rate": run_args.learning_rate, "batch_size":
                            run_args.per_device_train_batch_size, "num_train_epochs": run_args.num_train_epochs,
                            "best_checkpoint": state.best_model_checkpoint, "kept": kept, **model_settings,
                            "changed_by_defaults": changed},
               **({"hp_search": searched} if searched else {})}
    results["warnings"] = task.warnings(trainer, data, test, results)
    if trainer.is_world_process_zero():
        print(f"finetune: {summary}", flush=True)
        for warning in results["warnings"]:
            print(f"finetune: WARNING: {task.warning.format(warning)}", flush=True)
    return stage.finish(trainer, results, args.merge)


def finetune_token_classification(args: FinetuneArguments, token_args: TokenClassificationArguments,
                                  training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """Fine-tune a token classifier; returns the test entity scores and the most-frequent-tag baseline."""
    return run(TOKEN_CLASSIFICATION, args, token_args, training_args, callbacks)


def finetune_question_answering(args: FinetuneArguments, qa_args: QuestionAnsweringArguments,
                                training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """Fine-tune an extractive QA model; returns the test exact match and F1 (in percent), those of the lexical
    baseline (`lexical_baseline`) and the skipped examples."""
    return run(QUESTION_ANSWERING, args, qa_args, training_args, callbacks)


def finetune_multiple_choice(args: FinetuneArguments, training_args: TrainingArguments,
                             callbacks: Sequence = ()) -> dict:
    """Fine-tune a multiple-choice model; returns the test accuracy and the TF-IDF baseline's."""
    return run(MULTIPLE_CHOICE, args, None, training_args, callbacks)


def finetune_task(task: Task, args: FinetuneArguments, task_args: Sequence, training_args: TrainingArguments,
                  callbacks: Sequence = ()) -> dict:
    """Fine-tune `task` through its Python function above (`task_args`: an instance of each of its `arguments`); a
    task registered elsewhere, which has none here, through `run`."""
    functions = {"classification": finetune, "token_classification": finetune_token_classification,
                 "question_answering": finetune_question_answering, "multiple_choice": finetune_multiple_choice}
    if task.name not in functions:
        return run(task, args, next(iter(task_args), None), training_args, callbacks)
    return functions[task.name](args, *task_args, training_args, callbacks)
