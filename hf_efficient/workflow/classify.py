"""Sequence classification from an MLM (or classification) checkpoint, scored with accuracy and macro-F1.

The metrics come from the `evaluate` modules shipped in `hf_efficient/metrics` (no Hub access). The
test split is scored next to the majority-class baseline (every document given the most frequent
training label), so a run says at once whether the model learned anything.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DataCollatorWithPadding, Trainer, TrainingArguments, set_seed

from ..metrics import load_metric
from . import data, stage
from .peft_recipe import PeftArguments, wrap
from .tokenizer import load_tokenizer

FINETUNE_DEFAULTS = {
    "learning_rate": 1e-4, "weight_decay": 0.01, "warmup_steps": 0.1, "per_device_train_batch_size": 8,
    "per_device_eval_batch_size": 8, "num_train_epochs": 3, "logging_steps": 10, "eval_strategy": "epoch",
    "save_strategy": "epoch", "save_total_limit": 2, "report_to": "none", "dataloader_pin_memory": torch.cuda.is_available(),
}


@dataclass
class FinetuneArguments(PeftArguments):
    model_name_or_path: str | None = field(default=None, metadata={"help": "MLM checkpoint folder (required)"})
    tokenizer_name: str | None = field(default=None, metadata={"help": "tokenizer folder (default: the checkpoint's)"})
    dataset: str = field(default="kernel_docs", metadata={"help": "embedded task when no --train_file"})
    train_file: str | None = field(default=None, metadata={"help": "local .jsonl/.csv/.parquet training split"})
    validation_file: str | None = field(default=None, metadata={"help": "validation split (default: cut from train)"})
    test_file: str | None = field(default=None, metadata={"help": "test split (default: cut from train)"})
    text_column: str = field(default="text", metadata={"help": "column holding the text"})
    label_column: str = field(default="label", metadata={"help": "column holding the class (ClassLabel, int or str)"})
    max_length: int | None = field(default=None, metadata={"help": "truncate inputs to this many tokens (default: the model's limit)"})
    classifier_pooling: str | None = field(default=None, metadata={"help": "what the head reads: cls (first token) or mean (of the real tokens); default: the checkpoint's config"})
    classifier_learning_rate: float | None = field(default=None, metadata={"help": "learning rate of the classification head (default: --learning_rate)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only this many training examples"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only this many validation/test examples"})
    resume: bool = field(default=False, metadata={"help": "continue from the last checkpoint in --output_dir"})


def classification_metrics():
    """compute_metrics for the Trainer: accuracy and macro-F1 from the shipped `evaluate` modules."""
    accuracy, f1 = load_metric("accuracy"), load_metric("f1")

    def scores(predictions, references) -> dict:
        return {**accuracy.compute(predictions=predictions, references=references),
                "macro_f1": f1.compute(predictions=predictions, references=references, average="macro")["f1"]}

    def compute(prediction) -> dict:
        logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
        return scores(np.argmax(logits, axis=-1), prediction.label_ids)

    return compute, scores


class ClassifierTrainer(Trainer):
    """A Trainer whose optimizer gives the classification head (`classifier.*`) its own learning rate.

    The head starts from small random weights and Adam moves each weight by about one learning rate
    per step, so at a rate suited to the pretrained encoder the logits grow too slowly for a short
    run; a larger rate for the head alone speeds it up without disturbing the encoder.
    """

    def __init__(self, *args, classifier_learning_rate: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.classifier_learning_rate = classifier_learning_rate

    def create_optimizer(self, model: torch.nn.Module | None = None) -> torch.optim.Optimizer:
        optimizer = super().create_optimizer(model)
        if self.classifier_learning_rate is None:
            return optimizer
        model = self.model if model is None else model
        head = {id(p) for name, p in model.named_parameters() if f".{name}".count(".classifier.")}  # also under peft
        groups = []
        for group in optimizer.param_groups:  # split each group (decay / no decay) into encoder and head
            options = {key: value for key, value in group.items() if key != "params"}
            groups.append({**options, "params": [p for p in group["params"] if id(p) not in head]})
            groups.append({**options, "params": [p for p in group["params"] if id(p) in head],
                           "lr": self.classifier_learning_rate})
        optimizer.param_groups.clear()
        for group in groups:
            if group["params"]:
                optimizer.add_param_group(group)
        return optimizer


def check_head_options(args: FinetuneArguments, config_class: type) -> None:
    """ValueError for a head pooling `config_class` rejects or a head learning rate that is not positive."""
    if args.classifier_pooling is not None:
        config_class(classifier_pooling=args.classifier_pooling)  # its field checks name the problem
    if args.classifier_learning_rate is not None and not args.classifier_learning_rate > 0:
        raise ValueError(f"--classifier_learning_rate must be positive, got {args.classifier_learning_rate}")


def finetune(args: FinetuneArguments, training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """Fine-tune a sequence classifier; returns validation/test metrics and the majority baseline.

    `callbacks` are extra `TrainerCallback`s for the Trainer.
    """
    checkpoint = stage.resume_checkpoint(training_args.output_dir, args.resume)
    config = stage.checkpoint_config(args.model_name_or_path, ("ForMaskedLM", "Model", "ForSequenceClassification"),
                                     "finetune")
    tokenizer = load_tokenizer(args.tokenizer_name or args.model_name_or_path)
    check_head_options(args, type(config))
    config.classifier_pooling = args.classifier_pooling or config.classifier_pooling
    max_length = args.max_length or config.max_sequence_length
    stage.check_max_length(max_length, config)
    stage.check_vocabulary(tokenizer, config)
    splits, names = data.load_task(args.train_file, args.validation_file, args.test_file, args.dataset,
                                   args.text_column, args.label_column)
    is_classifier = any(stage.head_of(name) == "ForSequenceClassification" for name in config.architectures or [])
    if is_classifier and config.num_labels != len(names):
        raise ValueError(f"{args.model_name_or_path} classifies into {config.num_labels} labels, the data has "
                         f"{len(names)} ({names}); start from the MLM checkpoint instead")
    splits["train"] = data.subset(splits["train"], args.max_train_samples)
    for name in ("validation", "test"):
        splits[name] = data.subset(splits[name], args.max_eval_samples)

    with training_args.main_process_first(desc="tokenizing"):
        encoded = splits.map(lambda batch: tokenizer(batch["text"], truncation=True, max_length=max_length),
                             batched=True, remove_columns=["text"], desc="Tokenizing")
    set_seed(training_args.seed)
    model = stage.model_class(config, "ForSequenceClassification").from_pretrained(
        args.model_name_or_path, num_labels=len(names), id2label=dict(enumerate(names)),
        label2id={name: i for i, name in enumerate(names)}, classifier_pooling=config.classifier_pooling,
    )
    model = wrap(model, args, "ForSequenceClassification")
    compute, scores = classification_metrics()
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=stage.pad_multiple(model, max_length))
    trainer = ClassifierTrainer(model=model, args=training_args, data_collator=collator, train_dataset=encoded["train"],
                                eval_dataset=encoded["validation"], processing_class=tokenizer, compute_metrics=compute,
                                callbacks=list(callbacks), classifier_learning_rate=args.classifier_learning_rate)
    stage.train(trainer, checkpoint)
    test = trainer.evaluate(encoded["test"], metric_key_prefix="test")
    majority = Counter(splits["train"]["labels"]).most_common(1)[0][0]
    baseline = scores([majority] * len(splits["test"]), splits["test"]["labels"])
    results = {
        "stage": "finetune", "model_type": config.model_type, "source": args.model_name_or_path,
        "labels": names, "max_length": max_length, "global_step": trainer.state.global_step, "world_size": training_args.world_size,
        "examples": {name: len(split) for name, split in splits.items()},
        "test_accuracy": test["test_accuracy"], "test_macro_f1": test["test_macro_f1"], "test_loss": test["test_loss"],
        "majority_label": names[majority], "majority_accuracy": baseline["accuracy"],
        "majority_macro_f1": baseline["macro_f1"],
    }
    if trainer.is_world_process_zero():
        print(f"finetune: test accuracy {results['test_accuracy']:.3f}, macro-F1 {results['test_macro_f1']:.3f} "
              f"(majority class {names[majority]!r}: accuracy {baseline['accuracy']:.3f}, "
              f"macro-F1 {baseline['macro_f1']:.3f})", flush=True)
    return stage.finish(trainer, results, args.merge)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    stage.add_arguments(parser, FinetuneArguments)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    finetune_args, given = stage.parse_namespace(args, FinetuneArguments)
    return stage.run_cli(lambda: finetune(finetune_args, stage.training_arguments(FINETUNE_DEFAULTS, given)))
