"""Sequence classification (single- or multi-label) from an MLM (or classification) checkpoint.

Every run reports the test split next to two baselines: the majority class (or, multi-label, the most
frequent label set of training) and a logistic-regression probe on the frozen checkpoint's mean-pooled
embeddings (a text pair: the product of its two texts' means), so a user sees at once whether fine-tuning learned anything and what it added. A classifier
that collapses (one class for nearly everything, a validation metric stuck at the majority baseline, a
training loss that ends above where it began) is reported as a warning with what to try.

Defaults (docs/workflow.md has the runs they were checked on): a learning rate scaled to the model's width,
10% warm-up and linear decay, gradient clipping at 1, mean pooling (pair pooling for text pairs), the head initialised as the probe, at
least `min_train_steps` optimizer steps, validation every epoch with early stopping and the best checkpoint
restored, the probe-initialised start among the candidates. The single-label metrics come from the `evaluate` modules shipped in `hf_efficient/metrics`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
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
    EvalPrediction,
    PreTrainedConfig,
    Trainer,
    TrainingArguments,
    set_seed,
)

from ..metrics import load_metric
from . import probe, task, task_data

METRICS = ("accuracy", "micro_f1", "macro_f1")  # a classifier's scores, in the order reports list them
PROBLEMS = {False: "single_label_classification", True: "multi_label_classification"}  # by multi-label
COLLAPSE_SHARE = 0.95  # one predicted class for at least this share of the test examples counts as collapse
ADVICE = ("try --class_weights balanced, a lower --learning_rate, more epochs or --min_train_steps, "
          "or --hp_search N; compare with the probe baseline")


@dataclass
class TextColumns:
    """The columns of the tasks that read a text and its labels: classification and token classification."""

    text_column: str = field(default="text", metadata={"help": "column holding the text (token_classification: the words)"})
    label_column: str = field(default="label", metadata={"help": "column holding the class (ClassLabel, int or str), or a list of strings per example (multi-label); token_classification: the tags"})


@dataclass
class TextPairColumn:
    """Classification's second text of a pair (transformers' run_glue: `sentence2_key`)."""

    text_pair_column: str | None = field(default=None, metadata={"help": "classification only: column holding each example's second text: the pair is tokenized as tokenizer(text, text_pair) and read by pair pooling by default (--dataset long_match: document and section unless --text_column or this is given)"})


@dataclass
class HeadLearningRate:
    classifier_learning_rate: float | None = field(default=None, metadata={"help": "classification and token_classification: learning rate of the head (default: --learning_rate)"})


@dataclass
class ClassificationArguments:
    """The options only classification applies."""

    classifier_pooling: str | None = field(default=None, metadata={"help": "classification only: what the head reads, cls (first token), mean (of the real tokens) or pair (a text pair's two means u, v as [u, v, |u - v|, u * v]); default: pair with --text_pair_column, else mean, for a new head; else the checkpoint's"})
    classifier_init: str = field(default="probe", metadata={"help": "classification only: a new head starts as the frozen-embedding probe (probe, with mean or pair pooling) or from transformers' random initialisation (random)"})
    class_weights: str | None = field(default=None, metadata={"help": "classification only: balanced weights the loss by inverse class (multi-label: positive-label) frequency"})
    hp_search: int = field(default=0, metadata={"help": "classification only: first search learning rates, batch size and epochs with this many optuna trials on the validation split"})


@dataclass
class CacheArguments:
    """`distill --task classification`'s own option."""

    cache_teacher_outputs: bool = field(default=False, metadata={"help": "classification: run the teacher once and keep its logits as a dataset column"})


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
    probabilities = sigmoid(logits_of(prediction))
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
        for group in filter(lambda group: group["params"], groups):
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


def check_head_options(args, config: PreTrainedConfig) -> None:
    """ValueError for head or loss options that cannot work with the checkpoint's `config`, before anything is loaded."""
    if args.classifier_pooling is not None:  # its field checks name the problem
        type(config)(classifier_pooling=args.classifier_pooling, type_vocab_size=config.type_vocab_size)
    if args.classifier_learning_rate is not None and not args.classifier_learning_rate > 0:
        raise ValueError(f"--classifier_learning_rate must be positive, got {args.classifier_learning_rate}")
    if args.classifier_init not in ("probe", "random"):
        raise ValueError(f"--classifier_init must be probe or random, got {args.classifier_init!r}")
    if args.class_weights not in (None, "balanced"):
        raise ValueError(f"--class_weights must be balanced (or not given), got {args.class_weights!r}")
    if args.hp_search and importlib.util.find_spec("optuna") is None:
        raise ValueError("--hp_search needs optuna: pip install 'hf_efficient[tune]' (or pip install optuna)")


# ----------------------------------------------------------------------------------------- the task
class Classification(task.Task):
    """Sequence classification: the frozen probe as baseline and new head, `--hp_search`, collapse warnings."""

    name, head, metric = "classification", "ForSequenceClassification", "macro_f1"
    keeps_start = True  # the head initialised as the frozen probe
    options = {"finetune": (TextColumns, TextPairColumn, HeadLearningRate, ClassificationArguments),
               "distill": (TextColumns, TextPairColumn, CacheArguments)}
    scores = {"accuracy": "accuracy", "macro_f1": "macro-F1"}
    trainer_class = ClassifierTrainer
    per_token = False
    warning = f"the classifier may have collapsed: {{}}; {ADVICE}"

    def check(self, args, config) -> None:
        check_head_options(args, config)

    def data(self, args, task_args, tokenizer, max_length: int, command: str, show: bool) -> task.TaskData:
        """The splits (`text`, a pair's `text_pair`, `labels`), limited, and tokenized."""
        text_column, pair_column = task_data.text_columns(args)
        splits, names = task_data.load_task(args.train_file, args.validation_file, args.test_file,
                                                args.dataset or "kernel_docs", text_column, args.label_column,
                                                pair_column)
        for name in splits:
            splits[name] = task_data.sample(splits[name], args.max_train_samples if name == "train" else
                                                args.max_eval_samples)
        with PartialState().main_process_first():
            encoded = {name: tokenized(split, tokenizer, max_length, "Tokenizing") for name, split in splits.items()}
        return task.TaskData(dict(splits), encoded, names, {
            "multi_label": isinstance(splits["train"].features["labels"], (datasets.List, datasets.Sequence)),
            "label_ids": {name: np.asarray(split["labels"]) for name, split in splits.items()},
            "pair": pair_column is not None})

    def metrics(self, data: task.TaskData) -> Callable:
        return multilabel_metrics if data.notes["multi_label"] else classification_metrics()[0]

    def head_settings(self, data: task.TaskData, args, config) -> tuple[dict, str]:
        """Its labels, and the pooling: --classifier_pooling, else for a new head pair (text pairs) or mean, else the
        checkpoint's."""
        settings, what = super().head_settings(data, args, config)
        new = "pair" if data.notes["pair"] else "mean"
        pooling = args.classifier_pooling or (config.classifier_pooling if task.has_head(config, self.head) else new)
        if pooling == "pair" and not data.notes["pair"]:
            raise ValueError("classifier_pooling pair reads a text pair: give --text_pair_column (or another pooling)")
        if pooling == "pair" and "token_type_ids" not in data.features["train"].column_names:
            raise ValueError("classifier_pooling pair tells the two texts apart by token_type_ids, which this tokenizer "
                             "does not return: give --classifier_pooling mean")
        return {**settings, "classifier_pooling": pooling, "problem_type": PROBLEMS[data.notes["multi_label"]]}, what

    def model_init(self, args, config, settings: dict, data: task.TaskData, collator: Callable,
                   training_args: TrainingArguments, wrap: Callable) -> tuple[Callable, dict]:
        """The frozen probe fitted first (a baseline, in `data.notes`), by default a new mean-pooling head's start."""
        classifier = task.has_head(config, self.head)
        new_head = not classifier and args.classifier_init == "probe" and settings["classifier_pooling"] != "cls"
        if new_head:
            # dropout on the pooled features of a probe-initialised head zeroes whole standardised features that the
            # probe's weights rely on, so its first training steps would see a loss far above the probe's own
            settings = {**settings, "classifier_dropout": 0.0}
        model_class = task.model_class(config, self.head)
        frozen = model_class.from_pretrained(args.model_name_or_path, **settings).to(training_args.device)
        pooled = {name: probe.frozen_features(frozen, split, collator(frozen), training_args.per_device_eval_batch_size)
                  for name, split in data.features.items()}
        del frozen
        labels = data.notes["label_ids"]
        fitted = probe.fit_probe(pooled["train"], labels["train"], len(data.labels), data.notes["multi_label"],
                                 (pooled["validation"], labels["validation"]), args.class_weights, training_args.seed)
        data.notes["probe"] = {name: fitted.logits(pooled[name]) for name in ("validation", "test")}
        data.notes["start"] = self.metrics(data)(EvalPrediction(predictions=fitted.head_logits(pooled["validation"]),
                                                                label_ids=labels["validation"])) if new_head else None

        def init(trial=None):
            set_seed(training_args.seed)
            # the probe's load above already reported the new head; the runner and a search call this again
            verbosity = transformers.logging.get_verbosity()
            transformers.logging.set_verbosity_error()
            try:
                model = model_class.from_pretrained(args.model_name_or_path, **settings)
            finally:
                transformers.logging.set_verbosity(verbosity)
            if new_head:
                probe.init_head(model.classifier, fitted)
            model = wrap(model)
            # reseed once the model is built: training (dropout) then draws the seed's own stream, whatever the head's
            # initialisation consumed, as when the model was built before the Trainer seeded (documented demo results)
            set_seed(training_args.seed)
            return model

        return init, {"classifier_learning_rate": args.classifier_learning_rate,
                      "pooling": settings["classifier_pooling"], "class_weights": args.class_weights,
                      "head_init": "probe" if new_head else "checkpoint" if classifier else "random"}

    def trainer_options(self, data: task.TaskData, args, task_args) -> dict:
        """Its metrics, and `finetune`'s head learning rate and class weights (`distill` has neither)."""
        multi_label, weighted = data.notes["multi_label"], getattr(args, "class_weights", None)
        weights = balanced_weights(data.notes["label_ids"]["train"], len(data.labels), multi_label) if weighted else None
        return {"compute_metrics": self.metrics(data),
                "compute_loss_func": None if weights is None else weighted_loss(weights, multi_label),
                "classifier_learning_rate": getattr(args, "classifier_learning_rate", None)}

    def search(self, trainer: Callable, args, training_args: TrainingArguments) -> dict | None:
        """--hp_search N: the Trainer's optuna search of N trials, by the validation metric, over the learning rate
        within 10x of the default, the batch size and the epochs."""
        if not args.hp_search:
            return None
        metric = (training_args.metric_for_best_model or self.metric).removeprefix("eval_")
        rate = training_args.learning_rate
        search = trainer(dataclasses.replace(training_args, output_dir=f"{training_args.output_dir}/hp_search"))
        best = search.hyperparameter_search(
            hp_space=lambda trial: {
                "learning_rate": trial.suggest_float("learning_rate", rate / 10, rate * 10, log=True),
                "per_device_train_batch_size": trial.suggest_categorical("per_device_train_batch_size", [4, 8, 16]),
                "num_train_epochs": trial.suggest_int("num_train_epochs", 2, 10)},
            n_trials=args.hp_search, direction="maximize", backend="optuna",
            compute_objective=lambda metrics: metrics[f"eval_{metric}"])
        if training_args.process_index == 0:
            print(f"finetune: hyperparameter search: best of {args.hp_search} trials {best.hyperparameters} "
                  f"(validation {metric} {best.objective:.3f})", flush=True)
        return {"trials": args.hp_search, "best": best.hyperparameters, f"validation_{metric}": best.objective}

    def start_scores(self, data: task.TaskData) -> dict | None:
        """A head initialised as the probe makes the start a classifier already (`model_init` scored it)."""
        return data.notes["start"]

    def evaluate(self, trainer: Trainer, data: task.TaskData) -> dict:
        """The validation and test logits, which `report` scores beside the probe's and the majority's."""
        return {name: logits_of(trainer.predict(data.features[name], metric_key_prefix=name))
                for name in ("validation", "test")}

    def unlabeled(self, args, tokenizer, max_length: int, data: task.TaskData):
        text_column, pair_column = task_data.text_columns(args)
        rows = task_data.unlabeled_text(args, text_column, *filter(None, [pair_column]))
        if rows is None:
            return None
        none = [-100.0] * len(data.labels) if data.notes["multi_label"] else -100  # a label vector, multi-label
        names = {text_column: "text", pair_column: "text_pair"}
        rows = rows.rename_columns({column: names[column] for column in rows.column_names if names[column] != column})
        return tokenized(rows.add_column("labels", [none] * len(rows)), tokenizer, max_length,
                         "Tokenizing unlabelled text")

    def baseline(self, data: task.TaskData) -> dict:
        """The frozen probe's validation and test logits (the majority class needs none)."""
        return data.notes["probe"]

    def data_fields(self, data: task.TaskData) -> dict:
        """Its labels and examples per split, the unlabelled rows (`distill`) counted as training examples."""
        examples = {name: len(split) for name, split in data.examples.items()}
        examples["train"] += data.notes["unlabeled"]
        return {"labels": data.labels, "examples": examples, "unlabeled_examples": data.notes["unlabeled"]}

    def report(self, data: task.TaskData, test: dict, baseline: dict) -> tuple[dict, str]:
        """The scores per split of the model, the probe and the majority class or label set (multi-label: at
        thresholds, each the best on validation)."""
        labels, multi_label = data.notes["label_ids"], data.notes["multi_label"]
        logits, train = {"fine_tuned": test, "probe": baseline}, labels["train"].astype(int).tolist()
        cuts = {kind: best_threshold(sigmoid(split["validation"]), labels["validation"])
                for kind, split in logits.items()} if multi_label else {}
        majority = Counter(map(tuple, train) if multi_label else train).most_common(1)[0][0]  # class or label set
        scores = multilabel_scores if multi_label else classification_metrics()[1]

        def predicted(kind: str, name: str) -> np.ndarray:
            if kind == "majority":  # in every row
                return np.tile(majority, (len(labels[name]), 1) if multi_label else len(labels[name]))
            return sigmoid(logits[kind][name]) >= cuts[kind] if multi_label else np.argmax(logits[kind][name], -1)

        baselines = {name: {kind: scores(predicted(kind, name), labels[name]) for kind in (*logits, "majority")}
                     for name in ("validation", "test")}
        fields = {"problem_type": PROBLEMS[multi_label], "labels": data.labels,
                  **{f"{prefix}_{key}": value for prefix, kind in (("test", "fine_tuned"), ("majority", "majority"),
                                                                    ("probe", "probe"))
                     for key, value in baselines["test"][kind].items()},
                  "majority_label": [label for label, on in zip(data.labels, majority, strict=True) if on]
                  if multi_label else data.labels[majority], "baselines": baselines,
                  **({"threshold": cuts["fine_tuned"], "probe_threshold": cuts["probe"]} if cuts else {})}
        return fields, classifier_result(fields)

    def warnings(self, trainer: Trainer, data: task.TaskData, test: dict, results: dict) -> list[str]:
        """Why the classifier looks collapsed (empty when it does not): one class predicted for nearly every test
        example, a best validation metric at or below the majority baseline's, a final training loss above the first."""
        found, history = [], trainer.state.log_history
        if not data.notes["multi_label"] and len(test["test"]):
            label, count = Counter(np.argmax(test["test"], -1).tolist()).most_common(1)[0]
            share, true_share = count / len(test["test"]), float(np.mean(data.notes["label_ids"]["test"] == label))
            if share >= COLLAPSE_SHARE and share > true_share + 0.05:
                found.append(f"one class ({data.labels[label]!r}) predicted for {share:.0%} of the test examples "
                             f"(it is {true_share:.0%} of them)")
        metric = (trainer.args.metric_for_best_model or self.metric).removeprefix("eval_")
        validation = [entry[f"eval_{metric}"] for entry in history if f"eval_{metric}" in entry]
        baseline = results["baselines"]["validation"]["majority"].get(metric)
        if validation and baseline is not None and max(validation) <= baseline + 1e-9:
            found.append(f"the validation {metric} never rose above the majority baseline's ({max(validation):.3f} <= "
                         f"{baseline:.3f})")
        losses = [entry["loss"] for entry in history if "loss" in entry]
        if len(losses) >= 2 and losses[-1] > losses[0]:
            found.append(f"the training loss ended above where it began ({losses[0]:.3f} -> {losses[-1]:.3f})")
        return found

def classifier_result(results: dict) -> str:
    """One line: the test metrics of the fine-tuned classifier, the frozen probe and the majority baseline."""

    def row(prefix: str) -> str:
        return ", ".join(f"{m.replace('_', '-')} {results[f'{prefix}_{m}']:.3f}" for m in METRICS if f"test_{m}" in results)

    majority = ("most frequent label set" if results.get("problem_type") == "multi_label_classification"
                else "majority class")
    probe = f" | frozen probe {row('probe')}" if "probe_accuracy" in results else ""
    return f"test {row('test')}{probe} | {majority} {results['majority_label']!r} {row('majority')}"


def tfidf_cosine_classifier(first: Sequence[str], second: Sequence[str], labels: Sequence) -> Callable[..., float]:
    """The model-free text-pair baseline: a logistic regression on the TF-IDF cosine of each pair's two texts, the
    vectorizer fitted on the training pairs' joined texts (words seen in two of them). Returns
    `score(first, second, labels)`, its accuracy (0-1)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics.pairwise import paired_cosine_distances

    vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2).fit([a + b for a, b in zip(first, second, strict=True)])

    def cosine(first: Sequence[str], second: Sequence[str]) -> np.ndarray:
        return (1 - paired_cosine_distances(vectorizer.transform(first), vectorizer.transform(second))).reshape(-1, 1)

    model = LogisticRegression().fit(cosine(first, second), labels)
    return lambda first, second, labels: float(model.score(cosine(first, second), labels))


def tokenized(rows: datasets.Dataset, tokenizer, max_length: int, desc: str) -> datasets.Dataset:
    """`rows` with their `text`, or a pair's `text` and `text_pair` (as `tokenizer(text, text_pair)`: transformers'
    longest-first truncation), replaced by the tokenizer's features: every path that tokenizes classification text."""
    texts = [column for column in ("text", "text_pair") if column in rows.column_names]
    return task_data.tokenizer_map(
        rows, lambda batch, tokenizer: tokenizer(*(batch[column] for column in texts), truncation=True,
                                                 max_length=max_length),
        tokenizer, batched=True, remove_columns=texts, desc=desc)


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-logits))


TASK = task.register(Classification())
