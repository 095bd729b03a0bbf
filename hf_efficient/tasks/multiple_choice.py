"""Multiple choice: pick the right one of a question's choices, scored by accuracy.

Data: one question per row, its `choices` (a list of texts, as many in every row) and the `label` (the index of
the right choice, from 0). Each (question, choice) pair is one input of the `ForMultipleChoice` head, which
scores every choice. The test accuracy is reported next to the model-free baseline: the choice most like the
question by TF-IDF cosine, the IDF fitted on the training questions and choices.
"""

from __future__ import annotations

import datasets
import numpy as np
from transformers import DataCollatorForMultipleChoice

from ..metrics import load_metric
from . import task, task_data

COLUMNS = {"question": "the question", "choices": "a list of the answers to choose from",
           "label": "the index of the right choice, from 0"}


def check_rows(splits: dict[str, task_data.Split]) -> None:
    """Stop on a row whose question is not text, whose choices are not as many non-empty texts as the first row's,
    or whose label is not the index of one of them."""
    count = None
    for split in splits.values():
        task_data.require_columns(split, COLUMNS)
        for row, question, choices, label in zip(split.dataset[task_data.ROW], split.dataset["question"],
                                                 split.dataset["choices"], split.dataset["label"], strict=True):
            if not isinstance(question, str) or not question.strip():
                raise ValueError(f"{split.where(row, 'question')}: expected non-empty text, got {question!r}")
            if not isinstance(choices, list) or len(choices) < 2 or not all(isinstance(c, str) and c for c in choices):
                raise ValueError(f"{split.where(row, 'choices')}: expected a list of at least 2 non-empty texts, "
                                 f"got {choices!r}")
            count = count or len(choices)
            if len(choices) != count:
                raise ValueError(f"{split.where(row, 'choices')}: {len(choices)} choices, the rows before have {count}; "
                                 "give every question as many choices")
            if not isinstance(label, int) or isinstance(label, bool) or not 0 <= label < count:
                raise ValueError(f"{split.where(row, 'label')}: expected the index of the right choice (0 to "
                                 f"{count - 1}), got {label!r}")


def pairs(batch: dict, tokenizer, max_length: int) -> dict:
    """Each question with each of its choices, tokenized as a pair: per row, one list of inputs per choice."""
    counts = [len(choices) for choices in batch["choices"]]
    questions = [question for question, count in zip(batch["question"], counts, strict=True) for _ in range(count)]
    encoded = tokenizer(questions, [choice for choices in batch["choices"] for choice in choices], truncation=True,
                        max_length=max_length)
    starts = np.cumsum([0, *counts])
    return {**{key: [values[a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]
               for key, values in encoded.items()}, "labels": batch["label"]}


def accuracy(prediction) -> dict:
    return load_metric("accuracy").compute(predictions=np.argmax(prediction.predictions, -1),
                                           references=prediction.label_ids)


def lexical_choices(train: datasets.Dataset, test: datasets.Dataset) -> list[int]:
    """Each test question's choice of highest TF-IDF cosine with it, the IDF fitted on the training text."""
    texts = [*train["question"], *(choice for choices in train["choices"] for choice in choices)]
    from sklearn.feature_extraction.text import TfidfVectorizer  # here: a command's --help need not import it

    vectorizer = TfidfVectorizer().fit(texts)
    return [int(np.argmax((vectorizer.transform(choices) @ vectorizer.transform([question]).T).toarray()))
            for question, choices in zip(test["question"], test["choices"], strict=True)]


class MultipleChoice(task.Task):
    name, head, metric = "multiple_choice", "ForMultipleChoice", "accuracy"
    options = {"finetune": ()}  # no option of its own: its columns are fixed
    scores = {"accuracy": "accuracy"}
    per_token = False

    def data(self, args, task_args, tokenizer, max_length: int, command: str, show: bool) -> task.TaskData:
        splits = task_data.load_splits(args, self.name)
        check_rows(splits)
        task_data.limit(splits, args)
        examples = {name: split.dataset for name, split in splits.items()}
        features = {name: task_data.encoded(dataset, name, pairs, tokenizer, max_length)
                    for name, dataset in examples.items()}
        return task.TaskData(examples, features)

    def head_settings(self, data: task.TaskData, args, config) -> tuple[dict, str]:
        return {}, "one score per choice"  # the head scores each choice: any number of them

    def collator(self, tokenizer, pad_to_multiple_of: int | None):
        return DataCollatorForMultipleChoice(tokenizer, pad_to_multiple_of=pad_to_multiple_of)

    def trainer_options(self, data: task.TaskData, args, task_args) -> dict:
        return {"compute_metrics": accuracy}

    def baseline(self, data: task.TaskData) -> dict:
        test = data.examples["test"]
        chosen = lexical_choices(data.examples["train"], test)
        return {"accuracy": float(np.mean(np.asarray(chosen) == np.asarray(test["label"])))}

    def report(self, data: task.TaskData, test: dict, baseline: dict) -> tuple[dict, str]:
        fields = {"test_accuracy": test["test_accuracy"], "test_loss": test["test_loss"],
                  "baseline_accuracy": baseline["accuracy"]}
        return fields, (f"test accuracy {fields['test_accuracy']:.3f} | the choice most like the question (TF-IDF): "
                        f"accuracy {baseline['accuracy']:.3f}")


TASK = task.register(MultipleChoice())
