"""Sequence classification (single- or multi-label) from an MLM (or classification) checkpoint.

Every run reports the test split next to two baselines: the majority class (or, multi-label, the most
frequent label set of training) and a logistic-regression probe on the frozen checkpoint's mean-pooled
embeddings, so a user sees at once whether fine-tuning learned anything and what it added. A classifier
that collapses (one class for nearly everything, a validation metric stuck at the majority baseline, a
training loss that ends above where it began) is reported as a warning with what to try.

Defaults (docs/workflow.md has the runs they were checked on): a learning rate scaled to the model's width,
10% warm-up and linear decay, gradient clipping at 1, mean pooling, the head initialised as the probe, at
least `min_train_steps` optimizer steps, validation every epoch with early stopping and the best checkpoint
restored, the probe-initialised start among the candidates. The single-label metrics come from the `evaluate` modules shipped in `hf_efficient/metrics`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import datasets
import numpy as np
import torch
import torch.nn.functional as F
import transformers
from accelerate import PartialState
from transformers import (
    DataCollatorWithPadding,
    EvalPrediction,
    PreTrainedConfig,
    Trainer,
    TrainingArguments,
    set_seed,
)

from ..metrics import load_metric
from ..models.families import HEADS
from . import probe, stage, task, training_data
from .peft_recipe import PeftArguments, wrap
from .report import classifier_result
from .task import FINETUNE_DEFAULTS

COLLAPSE_SHARE = 0.95  # one predicted class for at least this share of the test examples counts as collapse
ADVICE = ("try --class_weights balanced, a lower --learning_rate, more epochs or --min_train_steps, "
          "or --hp_search N; compare with the probe baseline")


def default_learning_rate(config: PreTrainedConfig) -> float:
    """5e-5 at RoBERTa-base's width (768), scaled as 1/width for narrower models (Adam's update per weight is
    about the learning rate, so narrower layers take larger rates; muP), at most 1e-3: mini (128) 3e-4."""
    return min(1e-3, 5e-5 * 768 / config.hidden_size)


@dataclass
class TextColumns:
    """The columns of the tasks that read a text and its labels: classification and token classification."""

    text_column: str = field(default="text", metadata={"help": "column holding the text (token_classification: the words)"})
    label_column: str = field(default="label", metadata={"help": "column holding the class (ClassLabel, int or str), or a list of strings per example (multi-label); token_classification: the tags"})


@dataclass
class HeadLearningRate:
    classifier_learning_rate: float | None = field(default=None, metadata={"help": "classification and token_classification: learning rate of the head (default: --learning_rate)"})


@dataclass
class ClassificationArguments:
    """The options only classification applies."""

    classifier_pooling: str | None = field(default=None, metadata={"help": "classification only: what the head reads, cls (first token) or mean (of the real tokens); default: mean for a new head, else the checkpoint's"})
    classifier_init: str = field(default="probe", metadata={"help": "classification only: a new head starts as the frozen-embedding probe (probe, needs mean pooling) or from transformers' random initialisation (random)"})
    class_weights: str | None = field(default=None, metadata={"help": "classification only: balanced weights the loss by inverse class (multi-label: positive-label) frequency"})
    hp_search: int = field(default=0, metadata={"help": "classification only: first search learning rates, batch size and epochs with this many optuna trials on the validation split"})


@dataclass
class CacheArguments:
    """`distill --task classification`'s own option."""

    cache_teacher_outputs: bool = field(default=False, metadata={"help": "classification: run the teacher once and keep its logits as a dataset column"})


@dataclass
class FinetuneArguments(ClassificationArguments, HeadLearningRate, TextColumns, stage.OutputArguments, PeftArguments):
    """`finetune`'s options: every task's, and classification's (the other tasks' own come in their dataclasses)."""

    model_name_or_path: str | None = field(default=None, metadata={"help": "MLM checkpoint folder (required)"})
    tokenizer_name: str | None = field(default=None, metadata={"help": "tokenizer folder (default: the checkpoint's)"})
    dataset: str = field(default="kernel_docs", metadata={
        "help": "embedded task when no --train_file: kernel_docs, long_match (classification), long_qa (question_answering)"})
    train_file: str | None = field(default=None, metadata={"help": "local .jsonl/.csv/.parquet training split"})
    validation_file: str | None = field(default=None, metadata={"help": "validation split (default: cut from train)"})
    test_file: str | None = field(default=None, metadata={"help": "test split (default: cut from train)"})
    max_length: int | None = field(default=None, metadata={"help": "truncate inputs to this many tokens (default: the model's limit)"})
    min_train_steps: int = field(default=300, metadata={"help": "every --task: train more epochs than --num_train_epochs when needed to make at least this many batches of examples (0: off; question answering counts questions, not windows, so every length sees the same questions)"})
    early_stopping_patience: int = field(default=3, metadata={"help": "every --task: stop after this many validations without improvement of --metric_for_best_model (0: off; only with load_best_model_at_end, the default)"})
    max_train_samples: int | None = field(default=None, metadata={"help": "use only this many training examples"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "use only this many validation/test examples"})


# ----------------------------------------------------------------------------------------- metrics
def classification_metrics() -> tuple[Callable, Callable]:
    """(compute_metrics for the Trainer, scores(predictions, references)): accuracy and macro-F1."""
    accuracy, f1 = load_metric("accuracy"), load_metric("f1")

    def scores(predictions, references) -> dict:
        return {**accuracy.compute(predictions=predictions, references=references),
                "macro_f1": f1.compute(predictions=predictions, references=references, average="macro")["f1"]}

    def compute(prediction) -> dict:
        return scores(np.argmax(logits_of(prediction), axis=-1), prediction.label_ids)

    return compute, scores


def multilabel_scores(predictions: np.ndarray, references: np.ndarray) -> dict:
    """Exact-match accuracy, micro- and macro-F1 of 0/1 label matrices (a label never true nor predicted scores 1)."""
    true, pred = references.astype(bool), predictions.astype(bool)
    tp, fp, fn = (true & pred).sum(0), (~true & pred).sum(0), (true & ~pred).sum(0)
    per_label = np.where(2 * tp + fp + fn > 0, 2 * tp / np.maximum(2 * tp + fp + fn, 1), 1.0)
    micro = 2 * tp.sum() / max(2 * tp.sum() + fp.sum() + fn.sum(), 1)
    return {"accuracy": float((true == pred).all(1).mean()), "micro_f1": float(micro), "macro_f1": float(per_label.mean())}


def best_threshold(probabilities: np.ndarray, references: np.ndarray) -> float:
    """The decision threshold (0.05 ... 0.95) with the highest micro-F1 on these (validation) predictions."""
    grid = np.round(np.arange(0.05, 0.96, 0.05), 2)
    return float(max(grid, key=lambda t: multilabel_scores(probabilities >= t, references)["micro_f1"]))


def multilabel_metrics(prediction) -> dict:
    """compute_metrics for multi-label: scores at the threshold that is best on this split (reported as `threshold`)."""
    probabilities = 1 / (1 + np.exp(-logits_of(prediction)))
    threshold = best_threshold(probabilities, prediction.label_ids)
    return {**multilabel_scores(probabilities >= threshold, prediction.label_ids), "threshold": threshold}


def logits_of(prediction) -> np.ndarray:
    return prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions


# ----------------------------------------------------------------------------------------- training
class ClassifierTrainer(Trainer):
    """A Trainer whose optimizer can give the classification head (`classifier.*`) its own learning rate.

    A randomly initialised head starts from small weights and Adam moves each weight by about one learning
    rate per step, so at a rate suited to the pretrained encoder its logits grow slowly; a larger rate for
    the head alone speeds it up without disturbing the encoder.
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


def balanced_weights(labels: np.ndarray, num_labels: int, multi_label: bool) -> torch.Tensor:
    """Single-label: n / (classes * count) per class (scikit-learn's "balanced"); multi-label: negatives / positives
    per label (BCE's `pos_weight`). Counts of zero count as one."""
    if multi_label:
        positives = labels.sum(0)
        return torch.tensor((len(labels) - positives) / np.maximum(positives, 1), dtype=torch.float32)
    counts = np.bincount(labels, minlength=num_labels)
    return torch.tensor(len(labels) / (num_labels * np.maximum(counts, 1)), dtype=torch.float32)


def weighted_loss(weights: torch.Tensor, multi_label: bool) -> Callable:
    """The Trainer's `compute_loss_func`: class-weighted cross-entropy, or BCE with `pos_weight` (multi-label)."""

    def loss(outputs, labels, num_items_in_batch=None):
        logits = outputs["logits"].float()
        if multi_label:
            return F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype), pos_weight=weights.to(logits.device))
        return F.cross_entropy(logits, labels.view(-1), weight=weights.to(logits.device))

    return loss


def optuna_space(learning_rate: float) -> Callable:
    """Trainer.hyperparameter_search's space: learning rate within 10x of the default, batch size, epochs."""

    def space(trial) -> dict:
        return {"learning_rate": trial.suggest_float("learning_rate", learning_rate / 10, learning_rate * 10, log=True),
                "per_device_train_batch_size": trial.suggest_categorical("per_device_train_batch_size", [4, 8, 16]),
                "num_train_epochs": trial.suggest_int("num_train_epochs", 2, 10)}

    return space


def check_head_options(args: FinetuneArguments, config_class: type) -> None:
    """ValueError for head or loss options that cannot work, before anything is loaded."""
    if args.classifier_pooling is not None:
        config_class(classifier_pooling=args.classifier_pooling)  # its field checks name the problem
    if args.classifier_learning_rate is not None and not args.classifier_learning_rate > 0:
        raise ValueError(f"--classifier_learning_rate must be positive, got {args.classifier_learning_rate}")
    if args.classifier_init not in ("probe", "random"):
        raise ValueError(f"--classifier_init must be probe or random, got {args.classifier_init!r}")
    if args.class_weights not in (None, "balanced"):
        raise ValueError(f"--class_weights must be balanced (or not given), got {args.class_weights!r}")
    if args.hp_search:
        try:
            import optuna  # noqa: F401
        except ImportError as error:
            raise ValueError("--hp_search needs optuna: pip install 'hf_efficient[tune]' (or pip install optuna)") from error


def start_scores_if_better(trainer: Trainer, start_logits: np.ndarray, references: np.ndarray,
                           compute: Callable) -> dict | None:
    """The start's validation metrics when they beat the best checkpoint's by `metric_for_best_model`, else None.

    A head initialised as the probe makes the start a classifier already, so it is a candidate of the best-checkpoint
    selection that the Trainer (which never saves step 0) leaves out: fine-tuning that never beats it on validation
    then gives back the probe, not a worse model.
    """
    args, best = trainer.args, trainer.state.best_metric
    if not args.load_best_model_at_end or best is None:
        return None
    scores = compute(EvalPrediction(predictions=start_logits, label_ids=references))
    value = scores.get(args.metric_for_best_model.removeprefix("eval_"))
    if value is None or not (value > best if args.greater_is_better else value < best):
        return None
    return scores


def collapse_warnings(predicted: np.ndarray, references: np.ndarray, results: dict, log_history: list[dict],
                      metric: str) -> list[str]:
    """Why the classifier looks collapsed (empty when it does not): one class predicted for nearly every test
    example, a best validation metric at or below the majority baseline's, a final training loss above the first."""
    found = []
    if predicted is not None and len(predicted):
        label, count = Counter(predicted.tolist()).most_common(1)[0]
        share, true_share = count / len(predicted), float(np.mean(references == label))
        if share >= COLLAPSE_SHARE and share > true_share + 0.05:
            found.append(f"one class ({results['labels'][label]!r}) predicted for {share:.0%} of the test examples "
                         f"(it is {true_share:.0%} of them)")
    validation = [entry[f"eval_{metric}"] for entry in log_history if f"eval_{metric}" in entry]
    baseline = results["baselines"]["validation"]["majority"].get(metric)
    if validation and baseline is not None and max(validation) <= baseline + 1e-9:
        found.append(f"the validation {metric} never rose above the majority baseline's ({max(validation):.3f} <= "
                     f"{baseline:.3f})")
    losses = [entry["loss"] for entry in log_history if "loss" in entry]
    if len(losses) >= 2 and losses[-1] > losses[0]:
        found.append(f"the training loss ended above where it began ({losses[0]:.3f} -> {losses[-1]:.3f})")
    return found


# ----------------------------------------------------------------------------------------- the stage
def finetune(args: FinetuneArguments, training_args: TrainingArguments, callbacks: Sequence = ()) -> dict:
    """Fine-tune a sequence classifier; returns test metrics next to the majority and frozen-probe baselines.

    `callbacks` are extra `TrainerCallback`s for the Trainer.
    """
    stage.quiet_progress(training_args)
    config, tokenizer, max_length = task.start(args, training_args, TASK)
    TASK.check(args, config)
    is_classifier = any(stage.head_of(name) == "ForSequenceClassification" for name in config.architectures or [])
    pooling = args.classifier_pooling or (config.classifier_pooling if is_classifier else "mean")
    data = TASK.data(args, None, tokenizer, max_length, "finetune", training_args.process_index == 0)
    splits, encoded, names = data.examples, data.features, data.labels
    if is_classifier and config.num_labels != len(names):
        raise ValueError(f"{args.model_name_or_path} classifies into {config.num_labels} labels, the data has "
                         f"{len(names)} ({names}); start from the MLM checkpoint instead")
    multi_label = isinstance(splits["train"].features["labels"], (datasets.List, datasets.Sequence))
    labels = {name: np.asarray(split["labels"]) for name, split in splits.items()}
    metric = (training_args.metric_for_best_model or "macro_f1").removeprefix("eval_")
    checkpoint = stage.resume_checkpoint(training_args.output_dir, args)  # after the checks: it may clean up
    model_class = stage.model_class(config, "ForSequenceClassification")
    settings = {"num_labels": len(names), "id2label": dict(enumerate(names)), "classifier_pooling": pooling,
                "label2id": {name: i for i, name in enumerate(names)},
                "problem_type": "multi_label_classification" if multi_label else "single_label_classification"}
    new_head = not is_classifier and args.classifier_init == "probe" and pooling == "mean"
    if new_head:
        # dropout on the pooled features of a probe-initialised head zeroes whole standardised features that the
        # probe's weights rely on: measured train-mode loss 4.7 against 0.07 in eval mode; 0.26 with it off
        settings["classifier_dropout"] = 0.0
    set_seed(training_args.seed)
    frozen = model_class.from_pretrained(args.model_name_or_path, **settings).to(training_args.device)
    collator = DataCollatorWithPadding(tokenizer, pad_to_multiple_of=stage.pad_multiple(frozen, max_length))
    features = {name: probe.mean_pooled(frozen, split, collator, training_args.per_device_eval_batch_size)
                for name, split in encoded.items()}
    fitted = probe.fit_probe(features["train"], labels["train"], len(names), multi_label,
                             (features["validation"], labels["validation"]), args.class_weights, training_args.seed)
    del frozen

    def model_init(trial=None):
        set_seed(training_args.seed)
        # the probe's load above already reported the new head; the Trainer calls this twice more per run
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()
        try:
            model = model_class.from_pretrained(args.model_name_or_path, **settings)
        finally:
            transformers.logging.set_verbosity(verbosity)
        if new_head:
            probe.init_head(model.classifier, fitted)
        model = wrap(model, args, "ForSequenceClassification")
        # reseed once the model is built: training (dropout) then draws the seed's own stream, whatever the head's
        # initialisation consumed, as when the model was built before the Trainer seeded (documented demo results)
        set_seed(training_args.seed)
        return model

    stopping = task.length_of_training(args, training_args, len(splits["train"]))  # a search's best epochs replace these
    weights = balanced_weights(labels["train"], len(names), multi_label) if args.class_weights else None
    compute = multilabel_metrics if multi_label else classification_metrics()[0]

    def make_trainer(run_args: TrainingArguments) -> ClassifierTrainer:
        return ClassifierTrainer(
            model_init=model_init, args=run_args, data_collator=collator, train_dataset=encoded["train"],
            eval_dataset=encoded["validation"], processing_class=tokenizer, compute_metrics=compute,
            compute_loss_func=None if weights is None else weighted_loss(weights, multi_label),
            # a copy per Trainer: an EarlyStoppingCallback keeps counting evaluations without improvement
            callbacks=[*callbacks, *map(copy.copy, stopping)],
            classifier_learning_rate=args.classifier_learning_rate)

    searched = None
    if args.hp_search:
        search = make_trainer(dataclasses.replace(training_args, output_dir=f"{training_args.output_dir}/hp_search"))
        best = search.hyperparameter_search(
            hp_space=optuna_space(training_args.learning_rate), n_trials=args.hp_search, direction="maximize",
            backend="optuna", compute_objective=lambda metrics: metrics[f"eval_{metric}"])
        searched = {"trials": args.hp_search, "best": best.hyperparameters, f"validation_{metric}": best.objective}
        training_args = dataclasses.replace(training_args, **best.hyperparameters)
        if search.is_world_process_zero():
            print(f"finetune: hyperparameter search: best of {args.hp_search} trials {best.hyperparameters} "
                  f"(validation {metric} {best.objective:.3f})", flush=True)
    trainer = make_trainer(training_args)
    stage.train(trainer, checkpoint, args.auto_fit_batch)
    start = start_scores_if_better(trainer, fitted.head_logits(features["validation"]), labels["validation"],
                                   compute) if new_head else None
    sharded = trainer.is_deepspeed_enabled or trainer.is_fsdp_enabled  # a full state dict does not load into shards
    if start is not None and not sharded:
        trainer.model.load_state_dict(model_init().state_dict())

    predictions = {name: logits_of(trainer.predict(encoded[name], metric_key_prefix=name))
                   for name in ("validation", "test")}
    probe_logits = {name: fitted.logits(features[name]) for name in ("validation", "test")}
    baselines, majority_label, thresholds = split_scores(predictions, probe_logits, labels, names, multi_label)
    test = baselines["test"]
    results = {
        **task.base_results(TASK.name, args, config, trainer, max_length,
                            {name: len(split) for name, split in splits.items()}),
        "problem_type": settings["problem_type"], "labels": names,
        "settings": {"seed": training_args.seed, "learning_rate": training_args.learning_rate, "classifier_learning_rate": args.classifier_learning_rate,
                     "batch_size": training_args.per_device_train_batch_size, "num_train_epochs": training_args.num_train_epochs,
                     "pooling": pooling, "head_init": "probe" if new_head else "checkpoint" if is_classifier else "random",
                     "class_weights": args.class_weights, "best_checkpoint": trainer.state.best_model_checkpoint,
                     "kept": "start" if start is not None and not sharded else "fine-tuned"},
        **{f"test_{key}": value for key, value in test["fine_tuned"].items()},
        "majority_label": majority_label,
        **{f"majority_{key}": value for key, value in test["majority"].items()},
        **{f"probe_{key}": value for key, value in test["probe"].items()},
        "baselines": baselines,
    }
    results.update(thresholds)
    if searched:
        results["hp_search"] = searched
    predicted = None if multi_label else np.argmax(predictions["test"], -1)
    results["warnings"] = collapse_warnings(predicted, labels["test"], results, trainer.state.log_history, metric)
    if trainer.is_world_process_zero():
        if start is not None:
            print(f"finetune: fine-tuning never beat its start (the head initialised as the probe) on validation: "
                  f"{metric} {start[metric]:.3f} against the best checkpoint's {trainer.state.best_metric:.3f}; "
                  + ("the saved model is the start" if not sharded else
                     "a sharded run keeps the fine-tuned model (its full state dict does not load into shards)"),
                  flush=True)
        print(f"finetune: {classifier_result(results)}", flush=True)
        for warning in results["warnings"]:
            print(f"finetune: WARNING: the classifier may have collapsed: {warning}; {ADVICE}", flush=True)
    return stage.finish(trainer, results, args.merge)


class Classification(task.Task):
    """Sequence classification; `finetune` (below) is its own run: the probe, the search, the start as a candidate."""

    name, head, metric = "classification", "ForSequenceClassification", "macro_f1"
    options = {"finetune": (TextColumns, HeadLearningRate, ClassificationArguments),
               "distill": (TextColumns, CacheArguments)}
    scores = {"accuracy": "accuracy", "macro_f1": "macro-F1"}
    trainer_class = ClassifierTrainer
    per_token = False

    def finetune(self, *arguments, **options) -> dict:
        return finetune(*arguments, **options)

    def check(self, args, config) -> None:
        check_head_options(args, type(config))

    def data(self, args, task_args, tokenizer, max_length: int, command: str, show: bool) -> task.TaskData:
        """The splits (`text`, `labels`), limited, and tokenized."""
        splits, names = training_data.load_task(args.train_file, args.validation_file, args.test_file,
                                                args.dataset or "kernel_docs", args.text_column, args.label_column)
        splits["train"] = training_data.sample(splits["train"], args.max_train_samples)
        for name in ("validation", "test"):
            splits[name] = training_data.sample(splits[name], args.max_eval_samples)
        with PartialState().main_process_first():
            encoded = splits.map(lambda batch: tokenizer(batch["text"], truncation=True, max_length=max_length),
                                 batched=True, remove_columns=["text"], desc="Tokenizing")
        return task.TaskData(dict(splits), dict(encoded), names)

    def collator(self, tokenizer, pad_to_multiple_of: int | None):
        return DataCollatorWithPadding(tokenizer, pad_to_multiple_of=pad_to_multiple_of)

    def trainer_options(self, data: task.TaskData, args, task_args) -> dict:
        return {"compute_metrics": classification_metrics()[0]}

    def unlabeled(self, args, tokenizer, max_length: int):
        texts = training_data.unlabeled_text(args, args.text_column)
        rows = datasets.Dataset.from_dict({"text": texts, "labels": [-100] * len(texts)})
        return rows.map(lambda batch: tokenizer(batch["text"], truncation=True, max_length=max_length), batched=True,
                        remove_columns=["text"], desc="Tokenizing unlabelled text") if texts else None

    def report(self, data: task.TaskData, test: dict, baseline: dict, command: str) -> tuple[dict, str]:
        """`distill`'s fields (`finetune`'s are its own): the unlabelled rows count as training examples."""
        examples = {name: len(split) for name, split in data.examples.items()}
        examples["train"] += data.notes["unlabeled"]
        return {"labels": data.labels, "examples": examples, "unlabeled_examples": data.notes["unlabeled"]}, ""

    def bench_metric(self, results: dict) -> float:
        return 100.0 * results["test_accuracy"]

    def model_free(self, train: datasets.Dataset, test: datasets.Dataset) -> float:
        """Word 1-2-gram TF-IDF and a logistic regression, the settings of docs/tasks.md's probes."""
        model = probe.require_sklearn("pipeline").make_pipeline(
            probe.require_sklearn("feature_extraction.text").TfidfVectorizer(sublinear_tf=True, min_df=2,
                                                                             ngram_range=(1, 2)),
            probe.require_sklearn("linear_model").LogisticRegression(max_iter=2000)).fit(train["text"], train["label"])
        return 100.0 * model.score(test["text"], test["label"])


def split_scores(predictions: dict, probe_logits: dict, labels: dict, names: list[str],
                 multi_label: bool) -> tuple[dict, object, dict]:
    """(per split, the fine-tuned model's, the probe's and the majority baseline's scores; the majority label or
    label set; multi-label: the decision thresholds, each the best on validation)."""
    if multi_label:
        cuts = {"threshold": best_threshold(sigmoid(predictions["validation"]), labels["validation"]),
                "probe_threshold": best_threshold(sigmoid(probe_logits["validation"]), labels["validation"])}
        label_set = Counter(map(tuple, labels["train"].astype(int).tolist())).most_common(1)[0][0]
        majority_label = [name for name, on in zip(names, label_set, strict=True) if on]

        def score(name, logits, cut):
            return multilabel_scores(sigmoid(logits) >= cuts[cut], labels[name])

        def majority(name):
            return multilabel_scores(np.tile(label_set, (len(labels[name]), 1)), labels[name])
    else:
        cuts, scores = {}, classification_metrics()[1]
        label = Counter(labels["train"].tolist()).most_common(1)[0][0]
        majority_label = names[label]

        def score(name, logits, cut):
            return scores(np.argmax(logits, -1), labels[name])

        def majority(name):
            return scores(np.full(len(labels[name]), label), labels[name])

    baselines = {name: {"fine_tuned": score(name, predictions[name], "threshold"),
                        "probe": score(name, probe_logits[name], "probe_threshold"), "majority": majority(name)}
                 for name in ("validation", "test")}
    return baselines, majority_label, cuts


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-logits))


def training_arguments(args: FinetuneArguments, given: dict, defaults: dict = FINETUNE_DEFAULTS) -> TrainingArguments:
    """`defaults` with the learning rate for the checkpoint's width (every task), overridden by the fields in `given`.

    Any head passes here: each task checks that its checkpoint suits it when it starts."""
    defaults = dict(defaults)
    if "learning_rate" not in given:
        defaults["learning_rate"] = default_learning_rate(
            stage.checkpoint_config(args.model_name_or_path, tuple(HEADS), "finetune"))
    return stage.training_arguments(defaults, given)


TASK = task.register(Classification())
