"""Token classification (`finetune --task token_classification`): tag alignment, the shipped seqeval, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from transformers import AutoTokenizer

import hf_efficient
from hf_efficient.cli import main
from hf_efficient.metrics import load_metric
from hf_efficient.tasks.task_data import ROW, Split
from hf_efficient.tasks.token_classification import align, read_tags

from .families import TINY
from .tiny_checkpoints import build_tokenizer

PEOPLE = ["kernel", "scheduler", "process"]
PLACES = ["memory", "processor", "document"]


def sentence(i: int) -> dict:
    """Words of the tiny tokenizer's text, a person-like and a place-like entity at varying places."""
    person, place = PEOPLE[i % 3], PLACES[(i // 3) % 3]
    words = ["The", person, "task", "runs", "on", "every", place, "page"][: 5 + i % 4]
    tags = ["O", "B-PER", "O", "O", "O", "O", "B-LOC", "I-LOC"][: len(words)]
    return {"tokens": words, "ner_tags": tags}


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


@pytest.fixture(scope="module")
def mlm_folder(tmp_path_factory) -> Path:
    """A tiny dense MLM checkpoint (64 tokens) with the tiny byte-level BPE tokenizer."""
    folder = tmp_path_factory.mktemp("mlm")
    tokenizer = build_tokenizer(folder, max_length=64)
    config = hf_efficient.HfeRobertaConfig(**{**TINY, "vocab_size": len(tokenizer), "max_position_embeddings": 66})
    hf_efficient.HfeRobertaForMaskedLM(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("ner")
    return {name: write_jsonl(folder / f"{name}.jsonl", [sentence(i + offset) for i in range(count)])
            for name, count, offset in (("train", 24, 0), ("validation", 6, 5), ("test", 6, 11))}


def test_seqeval_entity_spans_by_hand():
    seqeval = load_metric("seqeval")
    # an I- without a B- starts an entity; a type change inside a chunk starts another
    result = seqeval.compute(predictions=[["I-PER", "I-PER", "O", "B-LOC", "I-ORG"]],
                             references=[["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]])
    assert result["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "number": 1}
    assert result["LOC"]["precision"] == 0.0 and result["LOC"]["number"] == 1  # LOC (3, 4) != predicted LOC (3, 3)
    assert result["ORG"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "number": 0}
    assert result["overall_precision"] == pytest.approx(1 / 3) and result["overall_recall"] == pytest.approx(1 / 2)
    assert result["overall_f1"] == pytest.approx(0.4) and result["overall_accuracy"] == pytest.approx(3 / 5)
    nothing = seqeval.compute(predictions=[["O", "O"]], references=[["B-PER", "O"]])
    assert nothing["overall_f1"] == 0.0 and nothing["overall_recall"] == 0.0 and nothing["overall_accuracy"] == 0.5


def test_tags_go_to_the_first_token_of_each_word_as_in_running_text(mlm_folder):
    tokenizer = AutoTokenizer.from_pretrained(mlm_folder)
    batch = {"words": [["The", "scheduler", "decides"]], "tags": [["O", "B-PER", "O"]]}
    encoded = align(batch, tokenizer, 64, {"O": 0, "B-PER": 1})
    running = tokenizer("The scheduler decides")
    assert encoded["input_ids"][0] == running["input_ids"]  # " scheduler" with its space, as pretraining saw it
    tokens = tokenizer.convert_ids_to_tokens(running["input_ids"])
    firsts = [i for i, token in enumerate(tokens) if i == 1 or token.startswith("Ġ")]
    assert len(tokens) > 5 and len(firsts) == 3  # some word is split into several tokens
    expected = [-100] * len(tokens)
    for position, tag in zip(firsts, [0, 1, 0], strict=True):
        expected[position] = tag
    assert encoded["labels"][0] == expected and encoded["words_seen"] == [3]
    truncated = align(batch, tokenizer, firsts[2] + 1, {"O": 0, "B-PER": 1})  # <s>, two words, </s>
    assert truncated["words_seen"] == [2]


def test_finetune_token_classification_end_to_end(mlm_folder, files, tmp_path, capsys):
    out = tmp_path / "ner"
    argv = ["finetune", "--task", "token_classification", "--model_name_or_path", str(mlm_folder),
            "--train_file", files["train"], "--validation_file", files["validation"], "--test_file", files["test"],
            "--output_dir", str(out), "--max_steps", "4", "--per_device_train_batch_size", "4", "--logging_steps", "1",
            "--eval_strategy", "no", "--save_steps", "2", "--learning_rate", "1e-3", "--disable_tqdm", "true"]
    assert main(argv) == 0
    assert "test entity F1" in capsys.readouterr().out
    results = json.loads((out / "report" / "metrics.json").read_text())
    assert results["task"] == "token_classification" and results["global_step"] == 4
    assert results["labels"] == ["B-LOC", "B-PER", "I-LOC", "O"] and results["baseline_tag"] == "O"
    assert results["baseline_f1"] == 0.0 and 0 < results["baseline_accuracy"] < 1
    assert 0 <= results["test_f1"] <= 1 and results["truncated_words"] == {"train": 0, "validation": 0, "test": 0}
    assert (out / "report" / "loss.png").is_file()
    assert json.loads((out / "config.json").read_text())["id2label"]["1"] == "B-PER"
    assert main(argv) == 2 and "--overwrite_output_dir" in capsys.readouterr().err  # the folder holds a finished run
    assert main([*argv, "--resume"]) == 0  # already at max_steps: resumes and finishes at once


def test_bad_input_stops_before_training_naming_file_row_and_field(mlm_folder, files, tmp_path, capsys):
    out = tmp_path / "out"

    def error(**data) -> str:
        paths = {**files, **{name: write_jsonl(tmp_path / f"{name}.jsonl", rows) for name, rows in data.items()}}
        assert main(["finetune", "--task", "token_classification", "--model_name_or_path", str(mlm_folder),
                     "--output_dir", str(out), *[f"--{name}_file={path}" for name, path in paths.items()]]) == 2
        message = capsys.readouterr().err  # after the datasets progress bars: one line
        assert "Traceback" not in message and message.endswith("\n")
        last = message.splitlines()[-1]
        assert last.startswith("hf-efficient finetune: error: ")
        return last

    bad = [sentence(i) for i in range(3)]
    bad[2] = {**bad[2], "ner_tags": bad[2]["ner_tags"][:-1]}
    assert "train.jsonl, row 3, field 'ner_tags': 6 tags for 7 words" in error(train=bad)
    unseen = [sentence(i) for i in range(3)]
    unseen[1] = {**unseen[1], "ner_tags": ["B-ORG"] + unseen[1]["ner_tags"][1:]}
    message = error(test=unseen)
    assert "test.jsonl, row 2, field 'ner_tags': tag 'B-ORG' is not among the tags of the training split" in message
    assert "validation.jsonl: column 'ner_tags' (one tag per word) not found" in error(
        validation=[{"tokens": ["a"], "labels": ["O"]}])
    integers = [{"tokens": ["a", "b"], "ner_tags": [0, 1]}] * 3
    assert "--label_list" in error(train=integers, validation=integers, test=integers)
    assert "'tokens': expected a non-empty list" in error(train=[{"tokens": [], "ner_tags": []}] * 3)
    assert not out.exists()


def test_tags_come_from_the_whole_training_file_including_the_parts_cut_from_it():
    def split(rows: list[dict], path: str) -> Split:
        return Split(datasets.Dataset.from_list([{**row, ROW: i} for i, row in enumerate(rows)]), path)

    rare = {"tokens": ["Paris"], "ner_tags": ["B-LOC"]}
    splits = {"train": split([sentence(0)], "train.jsonl"), "validation": split([rare], "train.jsonl"),
              "test": split([sentence(1)], "test.jsonl")}
    assert read_tags(splits, "tokens", "ner_tags", None) == ["B-LOC", "B-PER", "O"]  # B-LOC: only in the cut part
    assert splits["validation"].dataset.column_names == ["words", "tags", ROW]
    integers = {"train": split([{"tokens": ["a", "b"], "ner_tags": [1, 0]}], "t.jsonl")}
    assert read_tags(integers, "tokens", "ner_tags", "O,B-PER") == ["O", "B-PER"]
    assert integers["train"].dataset["tags"] == [["B-PER", "O"]]


def tag(mlm_folder: Path, files: dict[str, str], out: Path, *extra: str) -> int:
    return main(["finetune", "--task", "token_classification", "--model_name_or_path", str(mlm_folder),
                 *[f"--{name}_file={path}" for name, path in files.items()], "--output_dir", str(out),
                 "--learning_rate", "1e-3", "--disable_tqdm", "true", *extra])


def test_min_train_steps_raises_the_epochs(mlm_folder, files, tmp_path):
    """24 sentences in batches of 8 make 3 steps an epoch: --min_train_steps 10 takes 4 epochs, not the 1 asked."""
    assert tag(mlm_folder, files, tmp_path / "ner", "--num_train_epochs", "1", "--min_train_steps", "10",
               "--per_device_train_batch_size", "8", "--eval_strategy", "no", "--save_strategy", "no") == 0
    assert json.loads((tmp_path / "ner" / "report" / "metrics.json").read_text())["global_step"] == 12


def test_early_stopping_ends_a_run_whose_f1_cannot_improve(mlm_folder, files, tmp_path):
    """At learning rate 0 the validation F1 never improves: patience 1 stops after the second of 20 epochs (one step
    each)."""
    assert tag(mlm_folder, files, tmp_path / "ner", "--learning_rate", "0", "--num_train_epochs", "20",
               "--min_train_steps", "0", "--early_stopping_patience", "1", "--per_device_train_batch_size", "24") == 0
    results = json.loads((tmp_path / "ner" / "report" / "metrics.json").read_text())
    assert results["global_step"] == 2
    assert sum("eval_f1" in entry for entry in results["log_history"]) == 2


@pytest.mark.parametrize("option", [("--class_weights", "balanced"), ("--hp_search", "2"), ("--classifier_init", "random"),
                                    ("--classifier_pooling", "mean")])
def test_classifier_only_options_are_refused(option, mlm_folder, files, tmp_path, capsys):
    assert tag(mlm_folder, files, tmp_path / "ner", *option) == 2
    expected = f"hf-efficient finetune: error: {option[0]} applies to --task classification, not token_classification\n"
    assert capsys.readouterr().err == expected
    assert not (tmp_path / "ner").exists()
