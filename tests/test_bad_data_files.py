"""Generated bad data files for every loader: one ValueError line naming the file, the row and (for a value) the field."""

import json
import re

import pytest

from hf_efficient.tasks import task_data as training_data
from hf_efficient.tasks.question_answering import load_squad

ROWS = [{"text": f"words of example {i}", "label": "ab"[i % 2], "question": "which?", "context": f"context {i}",
         "answers": {"text": ["context"], "answer_start": [0]}, "tokens": ["a", "b"], "ner_tags": ["O", "O"]}
        for i in range(30)]
GOOD = "".join(json.dumps(row) + "\n" for row in ROWS[:3])

# fault -> (file suffix, content, expected message after the file's name)
FILE_FAULTS = {
    "empty": (".jsonl", b"", r" is empty"),
    "binary": (".jsonl", bytes(range(256)) * 4, r", row 1: not (UTF-8 text|valid JSON)"),
    "wrong encoding": (".jsonl", (GOOD + '{"text": "caf\xe9"}\n').encode("latin-1"), r", row 4: not UTF-8 text \(byte 0xe9"),
    "broken JSON": (".jsonl", (GOOD + '{"text": "x", "label": \n').encode(), r", row 4: not valid JSON"),
    "JSON list row": (".jsonl", (GOOD + "[1, 2]\n").encode(), r", row 4: expected a JSON object of fields, got a list"),
    "text in another encoding": (".txt", "one line\ncaf\xe9\n".encode("latin-1"), r", row 2: not UTF-8 text"),
    "csv in another encoding": (".csv", "text,label\na,b\ncaf\xe9,a\n".encode("latin-1"), r", row 2: not UTF-8 text"),
}
LOADERS = {
    "corpus": lambda path: training_data.load_corpus([path], "general", "text"),
    "classification": lambda path: training_data.load_task(path, None, None, "kernel_docs", "text", "label"),
    "question answering": load_squad,
    "token classification": lambda path: training_data.load_files([path]),
}


@pytest.mark.parametrize("fault", FILE_FAULTS)
@pytest.mark.parametrize("loader", LOADERS)
def test_a_file_that_cannot_be_read_is_named_with_its_row(loader, fault, tmp_path):
    suffix, content, message = FILE_FAULTS[fault]
    path = tmp_path / f"data{suffix}"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"^data file {re.escape(str(path))}{message}") as error:
        LOADERS[loader](str(path))
    assert "\n" not in str(error.value)


def write(path, rows) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.mark.parametrize("change, message", [
    ({"label": None}, r"row 4, field 'label': expected one label, got None"),  # NaN/null and a missing field alike
    ({"label": "c"}, r"row 4, field 'label': label 'c' is not among the training labels \['a', 'b'\]"),
    ({"label": ["a"]}, r"row 4, field 'label': expected one label, got \['a'\]"),
])
def test_a_bad_label_is_named_with_file_row_and_field(change, message, tmp_path):
    train = write(tmp_path / "train.jsonl", ROWS)
    rows = [{"text": row["text"], "label": row["label"]} for row in ROWS[:6]]
    validation = write(tmp_path / "validation.jsonl", [*rows[:3], {**rows[3], **change}, *rows[4:]])
    with pytest.raises(ValueError, match=f"^data file {re.escape(validation)}, {message}"):
        training_data.load_task(train, validation, train, "kernel_docs", "text", "label")


def test_a_nan_label_in_a_csv_is_named(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("text,label\n" + "".join(f"words {i},{'ab'[i % 2]}\n" for i in range(29)) + "last,\n")
    with pytest.raises(ValueError, match=f"^data file {re.escape(str(train))}, row 30, field 'label': expected one"):
        training_data.load_task(str(train), None, None, "kernel_docs", "text", "label")


def test_a_missing_column_is_named(tmp_path):
    train = write(tmp_path / "train.jsonl", [{"body": row["text"], "label": row["label"]} for row in ROWS])
    with pytest.raises(ValueError, match=f"^column 'text' not found in data file {re.escape(train)}"):
        training_data.load_task(train, None, None, "kernel_docs", "text", "label")


def test_too_few_rows_to_cut_the_evaluation_splits_from_is_one_line(tmp_path):
    train = write(tmp_path / "train.jsonl", ROWS[:4])
    with pytest.raises(ValueError, match="has 4 rows, too few to cut validation and test from"):
        training_data.load_task(train, None, None, "kernel_docs", "text", "label")


def test_one_enormous_line_loads(tmp_path):
    """Not an error: the tokenizer truncates it (here to check the line checks read it in one piece)."""
    huge = {"text": "word " * 2_000_000, "label": "a"}
    train = write(tmp_path / "train.jsonl", [huge, *({"text": r["text"], "label": r["label"]} for r in ROWS)])
    splits, names = training_data.load_task(train, None, None, "kernel_docs", "text", "label")
    assert names == ["a", "b"] and sum(len(split) for split in splits.values()) == 31
