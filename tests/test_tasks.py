"""Every registered task through `hf-efficient finetune --task`, from one entry per task in `CASES`.

An entry gives the task's rows and a bad row with the message naming it; classification, token
classification and question answering also have their own files (test_finetune.py, test_token_classification.py,
test_question_answering.py), which test what only they do.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import datasets
import pytest

from hf_efficient.cli import main
from hf_efficient.tasks.task import TASKS
from hf_efficient.tasks.task_data import tokenizer_map
from hf_efficient.training import train_tokenizer

from . import test_token_classification
from .test_question_answering import example
from .test_token_classification import sentence

mlm_folder = test_token_classification.mlm_folder  # fixture: a tiny MLM checkpoint
WORDS = ["kernel", "memory", "process", "scheduler", "page", "driver"]


def choice_row(i: int) -> dict:
    return {"question": f"Which part handles the {WORDS[i % 6]}?",
            "choices": [f"the {WORDS[(i + k) % 6]} code" for k in range(3)], "label": i % 3}


@dataclass
class Case:
    row: object  # i -> one row of the task's files
    bad: tuple[int, str, object, str]  # (row, field, value, what the message says): one bad row
    scores: tuple[str, ...]  # result fields every run reports
    options: tuple[str, ...] = ()  # its command-line options in these runs


CASES = {
    "classification": Case(lambda i: {"text": f"the {WORDS[i % 6]} runs", "label": ["a", "b"][i % 2]},
                           (1, "label", None, "row 2"), ("test_accuracy", "majority_accuracy", "probe_accuracy")),
    "token_classification": Case(sentence, (1, "ner_tags", ["O"], "row 2, field 'ner_tags'"),
                                 ("test_f1", "baseline_f1")),
    "question_answering": Case(example, (1, "question", "", "row 2, field 'question'"), ("test_f1", "baseline_f1"),
                               ("--max_length", "48", "--doc_stride", "8")),
    "multiple_choice": Case(choice_row, (1, "label", 3, "row 2, field 'label': expected the index of the right choice"),
                            ("test_accuracy", "baseline_accuracy")),
}


def test_every_registered_task_has_an_entry():
    assert set(CASES) == set(TASKS)


def write(folder: Path, case: Case, bad: bool = False) -> list[str]:
    files = []
    for name in ("train", "validation", "test"):
        rows = [case.row(i) for i in range(8)]
        if bad and name == "train":
            rows[case.bad[0]] = {**rows[case.bad[0]], case.bad[1]: case.bad[2]}
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        files += [f"--{name}_file", str(folder / f"{name}.jsonl")]
    return files


def finetune(name: str, mlm_folder: Path, out: Path, files: list[str]) -> int:
    return main(["finetune", "--task", name, "--model_name_or_path", str(mlm_folder), *files, "--output_dir", str(out),
                 "--max_steps", "2", "--per_device_train_batch_size", "4", "--eval_strategy", "no",
                 "--save_strategy", "no", "--disable_tqdm", "true", *CASES[name].options])


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_task_fine_tunes_and_reports_its_scores_and_baseline(name, mlm_folder, tmp_path):
    assert finetune(name, mlm_folder, tmp_path / "out", write(tmp_path, CASES[name])) == 0
    results = json.loads((tmp_path / "out" / "report" / "metrics.json").read_text())
    assert results["task"] == name and results["global_step"] == 2
    assert all(key in results for key in CASES[name].scores), results
    assert json.loads((tmp_path / "out" / "config.json").read_text())["architectures"][0].endswith(TASKS[name].head)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bad_row_stops_a_task_with_one_line_naming_it(name, mlm_folder, tmp_path, capsys):
    assert finetune(name, mlm_folder, tmp_path / "out", write(tmp_path, CASES[name], bad=True)) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and CASES[name].bad[3] in error and "train.jsonl" in error, error
    assert not (tmp_path / "out" / "config.json").exists()


def test_a_tokenizing_map_is_named_by_what_the_tokenizer_does_not_by_its_last_call():
    """datasets caches a map under its fingerprint: the same tokenizer gives the same name (a rerun reuses the cache),
    and a tokenizer that tokenizes otherwise gives another, whatever the backend's per-call truncation state."""
    texts = ["the kernel schedules tasks", "a driver binds to a device"] * 20
    rows = datasets.Dataset.from_dict({"text": texts})

    def name(tokenizer) -> str:
        mapped = tokenizer_map(rows, lambda batch, tokenizer: tokenizer(batch["text"], truncation=True, max_length=4),
                               tokenizer, batched=True, remove_columns=["text"])
        assert mapped["input_ids"] == tokenizer(texts, truncation=True, max_length=4)["input_ids"]
        return mapped._fingerprint

    tokenizer = train_tokenizer(texts, vocab_size=300, max_length=16)
    first = name(tokenizer)
    tokenizer(texts[:1], padding="max_length", max_length=8)  # leaves padding and truncation set in the backend
    assert name(tokenizer) == first == name(train_tokenizer(texts, vocab_size=300, max_length=16))
    assert name(train_tokenizer(texts, vocab_size=290, max_length=16)) != first
    tokenizer.truncation_side = "left"
    assert name(tokenizer) != first
