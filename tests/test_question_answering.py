"""Extractive QA (`finetune --task question_answering`): windows, answer aggregation, shipped squad, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoTokenizer

import hf_efficient
from hf_efficient.cli import main
from hf_efficient.metrics import load_metric
from hf_efficient.tasks.question_answering import best_answers, lexical_baseline, sentences, windows
from hf_efficient.training import finetuning as question_answering
from hf_efficient.training.finetuning import default_learning_rate

from .families import TINY, tiny_config
from .tiny_checkpoints import build_tokenizer

CONTEXT = ("The kernel schedules tasks on every processor. Memory pages are mapped into the address space of a "
           "process, and the scheduler decides which task runs next.")
QUESTIONS = [("What does the kernel schedule?", "tasks"), ("What decides which task runs next?", "the scheduler"),
             ("What are mapped into the address space?", "Memory pages"), ("Where are tasks scheduled?", "every processor")]


def example(i: int, context: str = CONTEXT) -> dict:
    question, answer = QUESTIONS[i % len(QUESTIONS)]
    return {"id": f"q{i}", "question": question, "context": context,
            "answers": {"text": [answer], "answer_start": [context.index(answer)]}}


def nested(rows: list[dict]) -> dict:
    """SQuAD's own json layout: data[].paragraphs[].qas[]."""
    return {"version": "1.1", "data": [{"title": "kernel", "paragraphs": [
        {"context": row["context"], "qas": [{"id": row["id"], "question": row["question"], "answers": [
            {"text": t, "answer_start": s} for t, s in zip(row["answers"]["text"], row["answers"]["answer_start"],
                                                          strict=True)]}]} for row in rows]}]}


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("tokenizer")
    build_tokenizer(folder, max_length=64)
    return folder


@pytest.fixture(scope="module")
def mlm_folder(tokenizer_folder, tmp_path_factory) -> Path:
    """A tiny dense MLM checkpoint (64 tokens) with the tiny byte-level BPE tokenizer."""
    folder = tmp_path_factory.mktemp("mlm")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    tokenizer.save_pretrained(folder)
    config = hf_efficient.HfeRobertaConfig(**{**TINY, "vocab_size": len(tokenizer), "max_position_embeddings": 66})
    hf_efficient.HfeRobertaForMaskedLM(config).save_pretrained(folder)
    return folder


def test_squad_metric_normalisation_by_hand():
    squad = load_metric("squad")
    references = [{"id": "1", "answers": {"text": ["the Scheduler"], "answer_start": [0]}},
                  {"id": "2", "answers": {"text": ["memory pages", "pages"], "answer_start": [0, 7]}}]
    # case, articles and punctuation do not count; the best of several answers counts
    result = squad.compute(predictions=[{"id": "1", "prediction_text": "Scheduler."},
                                        {"id": "2", "prediction_text": "a page of memory pages"}], references=references)
    # 2: tokens {page, of, memory, pages} vs {memory, pages}: precision 2/4, recall 1, F1 2/3; vs {pages}: 2/5
    assert result["exact_match"] == pytest.approx(50.0) and result["f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    with pytest.raises(ValueError, match="no prediction"):
        squad.compute(predictions=[{"id": "1", "prediction_text": "x"}, {"id": "3", "prediction_text": "x"}],
                      references=references)


def test_sliding_windows_target_the_answer_only_where_it_is_whole(tokenizer_folder):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    row = example(1)  # "the scheduler", near the end of the context
    batch = {key: [value] for key, value in {**row, "example": 0}.items()}
    encoded = windows(batch, tokenizer, max_length=48, doc_stride=8)
    assert len(encoded["input_ids"]) >= 2 and set(encoded["example"]) == {0}
    found = [i for i, start in enumerate(encoded["start_positions"]) if start != 0]
    assert found and found[0] > 0  # not in the first window
    for i, (start, end) in enumerate(zip(encoded["start_positions"], encoded["end_positions"], strict=True)):
        offsets = encoded["offset_mapping"][i]
        if i in found:
            assert CONTEXT[offsets[start][0]:offsets[end][1]] == "the scheduler"
        else:
            assert (start, end) == (0, 0)  # <s>: "not in this window", as transformers' run_qa
        question = tokenizer(row["question"], add_special_tokens=False)["input_ids"]
        assert encoded["input_ids"][i][1:1 + len(question)] == question  # every window repeats the question
        assert offsets[0] is None and offsets[1] is None  # only context tokens have offsets
    short = {"question": [row["question"]], "context": ["The scheduler."], "example": [0],
             "answers": [{"text": ["scheduler"], "answer_start": [4]}]}  # a context shorter than the question
    encoded_short = windows(short, tokenizer, max_length=48, doc_stride=8)
    assert len(encoded_short["input_ids"]) == 1 and encoded_short["start_positions"][0] > 0
    # the windows overlap by doc_stride tokens of context
    first, second = ([token for token, offset in zip(encoded["input_ids"][i], encoded["offset_mapping"][i], strict=True)
                      if offset is not None] for i in (0, 1))
    assert first[-8:] == second[:8]


def test_best_span_over_windows_is_found_in_the_second_window(tokenizer_folder):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    batch = {key: [value] for key, value in {**example(1), "example": 0}.items()}
    encoded = windows(batch, tokenizer, max_length=48, doc_stride=8)
    features = datasets.Dataset.from_dict({"example": encoded["example"], "offset_mapping": encoded["offset_mapping"]})
    window = next(i for i, start in enumerate(encoded["start_positions"]) if start != 0)
    width = max(len(ids) for ids in encoded["input_ids"])
    starts, ends = np.full((len(features), width), -5.0), np.full((len(features), width), -5.0)
    starts[:, 0] = ends[:, 0] = 9.0  # <s> scores highest everywhere: it is never an answer
    starts[0, 20], ends[0, 18] = 6.0, 6.0  # an end before its start in the first window: not a span
    starts[window, encoded["start_positions"][window]] = ends[window, encoded["end_positions"][window]] = 4.0
    assert best_answers([CONTEXT], features, starts, ends, n_best_size=3, max_answer_length=10) == ["the scheduler"]
    assert best_answers([CONTEXT], features, starts, ends, n_best_size=3, max_answer_length=1) != ["the scheduler"]


def test_longformer_style_qa_puts_global_attention_on_the_question(tokenizer_folder):
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    model_class = hf_efficient.FAMILIES["hfe_longformer"].models["ForQuestionAnswering"]
    model = model_class(tiny_config("hfe_longformer", vocab_size=len(tokenizer), sep_token_id=tokenizer.sep_token_id,
                                    pad_token_id=tokenizer.pad_token_id)).eval()
    row = example(0)
    batch = {key: [value] for key, value in {**row, "example": 0}.items()}
    encoded = windows(batch, tokenizer, max_length=64, doc_stride=8)  # what the collator hands the model: no mask
    assert "global_attention_mask" not in encoded
    input_ids = torch.tensor(encoded["input_ids"][:1])
    question = len(tokenizer(row["question"], add_special_tokens=False)["input_ids"])
    expected = torch.zeros_like(input_ids, dtype=torch.bool)
    expected[0, : 1 + question] = True  # <s> and the question, before the first </s>
    assert torch.equal(model.task_attention_inputs(input_ids, {})["global_attention_mask"], expected)
    with torch.no_grad():
        implicit, explicit = model(input_ids), model(input_ids, global_attention_mask=expected)
        local = model(input_ids, global_attention_mask=torch.zeros_like(expected))
    torch.testing.assert_close(implicit.start_logits, explicit.start_logits)
    assert not torch.allclose(implicit.start_logits, local.start_logits)


def test_lexical_baseline_answers_with_the_sentence_holding_the_rare_words():
    """The question shares more words with the first sentence (the, kernel: in every training document) than with the
    second (hydration: in one), so plain word overlap picks the first; TF-IDF weighs the rare word and picks the second."""
    common, rare = "The kernel runs the task on the processor.", "Hydration copies a region to the destination device."
    topics = ["memory", "paging", "locking", "networking", "timers", "interrupts", "tracing", "storage"]
    train = [f"{common} It also covers {topic}." for topic in topics] + [f"{common} {rare}"]
    context = f"Overview\n{common} {rare} The scheduler waits."
    assert [context[start:end] for start, end in sentences(context)] == ["Overview", common, rare, "The scheduler waits."]
    questions = ["In the kernel, what does hydration copy?", "What runs the task on the processor?"]
    assert lexical_baseline(train, questions, [context, context]) == [rare, common]


def run(mlm_folder: Path, out: Path, files: dict[str, Path], *extra: str) -> int:
    return main(["finetune", "--task", "question_answering", "--model_name_or_path", str(mlm_folder),
                 "--output_dir", str(out), *[f"--{name}_file={path}" for name, path in files.items()],
                 "--max_length", "48", "--doc_stride", "8", "--per_device_train_batch_size", "4", "--logging_steps", "1",
                 "--learning_rate", "1e-3", "--disable_tqdm", "true", *extra])


def test_finetune_question_answering_end_to_end(mlm_folder, tmp_path, capsys):
    rows = [example(i) for i in range(12)]
    rows[5]["answers"]["answer_start"] = [3]  # off its offset: skipped, named and counted
    short = {"id": "short", "question": "Which part runs every task on each processor?", "context": "The kernel.",
             "answers": {"text": ["kernel"], "answer_start": [4]}}  # a context shorter than the question is fine
    files = {"train": tmp_path / "train.json", "validation": tmp_path / "dev.jsonl", "test": tmp_path / "test.jsonl"}
    files["train"].write_text(json.dumps(nested([*rows, short])))
    for name in ("validation", "test"):
        files[name].write_text("".join(json.dumps(example(i)) + "\n" for i in range(4)))
    assert run(mlm_folder, tmp_path / "qa", files, "--max_steps", "3", "--eval_strategy", "steps", "--eval_steps", "3",
               "--save_steps", "3") == 0
    out = capsys.readouterr().out
    assert f"skipped {files['train']}, row 6, id 'q5': its answer is not at its answer_start" in out
    assert "test exact match" in out
    results = json.loads((tmp_path / "qa" / "report" / "metrics.json").read_text())
    assert results["skipped"]["train"] == {"count": 1, "rows": [{"file": str(files["train"]), "row": 6, "id": "q5"}]}
    assert results["examples"] == {"train": 12, "validation": 4, "test": 4}
    assert results["windows"]["test"] > 4  # the context is longer than a 48-token window
    assert 0 <= results["test_exact_match"] <= 100 and 0 <= results["test_f1"] <= 100
    assert (f"| lexical baseline (best TF-IDF sentence): exact match {results['baseline_exact_match']:.1f}, "
            f"F1 {results['baseline_f1']:.1f}") in out
    assert 0 < results["baseline_f1"] <= 100  # a whole sentence around each short answer: overlap, no exact match
    assert any("eval_f1" in entry for entry in results["log_history"])  # scored per example during training
    assert (tmp_path / "qa" / "report" / "loss.png").is_file()
    assert run(mlm_folder, tmp_path / "qa", files, "--max_steps", "3", "--resume") == 0


def test_bad_input_stops_before_training_naming_file_row_and_field(mlm_folder, tmp_path, capsys):
    def error(rows: list[dict], *extra: str) -> str:
        path = tmp_path / "train.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        assert run(mlm_folder, tmp_path / "out", {"train": path}, *extra) == 2
        message = capsys.readouterr().err
        assert "Traceback" not in message
        return message.splitlines()[-1]

    rows = [example(i) for i in range(6)]
    long_question = {**rows[3], "question": " ".join(["Which task does the kernel schedule?"] * 8)}
    message = error([*rows[:3], long_question, *rows[4:]])
    assert "train.jsonl, row 4, field 'question': the question takes" in message and "--doc_stride 8" in message
    assert "row 2, field 'context': expected non-empty text" in error([rows[0], {**rows[1], "context": " "}, *rows[2:]])
    assert "row 1, field 'answers'" in error([{**rows[0], "answers": {"text": [], "answer_start": []}}, *rows[1:]])
    listed = [{**row, "answers": [{"text": "tasks", "answer_start": 0}]} for row in rows]  # not SQuAD's layout
    assert re.search(r"train.jsonl, row \d, field 'answers': expected at least one answer as", error(listed))
    missing = [{key: value for key, value in row.items() if key != "question"} for row in rows]
    assert "train.jsonl: column 'question' (the question) not found" in error(missing)
    assert "--doc_stride must be >= 0" in error(rows, "--doc_stride", "-1")
    # a file too small to cut validation and test from still names its bad row first
    assert "row 2, field 'context': expected non-empty text" in error([rows[0], {**rows[1], "context": " "}, rows[2]])
    assert error(rows[:2]).endswith("has 2 rows, too few to cut validation and test from; give --validation_file and "
                                    "--test_file")
    assert not (tmp_path / "out").exists()


def test_default_learning_rate_is_scaled_to_the_checkpoint_width(mlm_folder, tmp_path, monkeypatch):
    """QA and token classification take the classifier's width-scaled default (5e-5 at 768, as 1/width), not 5e-5."""
    seen = {}
    monkeypatch.setattr(question_answering, "finetune_question_answering",
                        lambda args, qa_args, training_args, callbacks=(): seen.setdefault("lr", training_args.learning_rate) and 0)
    assert main(["finetune", "--task", "question_answering", "--model_name_or_path", str(mlm_folder),
                 "--output_dir", str(tmp_path / "qa")]) == 0
    assert seen["lr"] == pytest.approx(default_learning_rate(AutoConfig.from_pretrained(mlm_folder)))
    assert seen["lr"] != pytest.approx(5e-5)


def squad_files(folder: Path, questions: int = 4) -> dict[str, Path]:
    """train, validation and test jsonl files of the first `questions` examples (4: 26 windows of 48 tokens)."""
    files = {name: folder / f"{name}.jsonl" for name in ("train", "validation", "test")}
    for path in files.values():
        path.write_text("".join(json.dumps(example(i)) + "\n" for i in range(questions)))
    return files


def test_the_default_batch_is_fitted_to_memory_with_the_same_effective_batch(mlm_folder, tmp_path, capsys, free_for):
    """Issue 24's run in small: free memory for 4 of the 26 windows, the default batch 8 trains as 4 x 2."""
    free_for(4)
    assert run(mlm_folder, tmp_path / "qa", squad_files(tmp_path), "--per_device_train_batch_size", "8",
               "--max_steps", "2", "--eval_strategy", "no", "--save_strategy", "no") == 0
    assert "training with per_device_train_batch_size 4 x gradient_accumulation_steps 2" in capsys.readouterr().out
    results = json.loads((tmp_path / "qa" / "report" / "metrics.json").read_text())
    assert (results["per_device_train_batch_size"], results["gradient_accumulation_steps"]) == (4, 2)
    assert results["global_step"] == 2


def test_min_train_steps_counts_questions_not_windows_and_says_it_raised_the_epochs(mlm_folder, tmp_path, capsys):
    """4 questions make 26 windows (7 batches of 4): --min_train_steps 3 counts batches of questions (1 an epoch), so
    3 epochs (21 steps), as a model reading whole contexts would train on the same questions; counting windows would
    have kept the 1 epoch asked. The run says so in one line, and its results record it."""
    assert run(mlm_folder, tmp_path / "qa", squad_files(tmp_path), "--num_train_epochs", "1", "--min_train_steps", "3",
               "--eval_strategy", "no", "--save_strategy", "no") == 0
    results = json.loads((tmp_path / "qa" / "report" / "metrics.json").read_text())
    assert results["windows"]["train"] == 26 and results["global_step"] == 21
    line = ("--num_train_epochs 1 raised to 3: 4 examples in batches of 4 make 1 step an epoch, fewer than "
            "--min_train_steps 3 (--min_train_steps 0 keeps your epochs)")
    assert results["settings"]["changed_by_defaults"] == [line]
    assert capsys.readouterr().out.count(f"finetune: {line}\n") == 1


def test_truncate_reads_one_window_and_answers_reach_the_longest_training_answer(mlm_folder, tmp_path):
    files = squad_files(tmp_path)
    assert run(mlm_folder, tmp_path / "qa", files, "--max_steps", "1", "--truncate", "--eval_strategy", "no",
               "--save_strategy", "no") == 0
    results = json.loads((tmp_path / "qa" / "report" / "metrics.json").read_text())
    assert results["truncate"] and results["windows"] == {"train": 4, "validation": 4, "test": 4}
    tokenizer = AutoTokenizer.from_pretrained(mlm_folder)
    longest = max(len(tokenizer(example(i)["answers"]["text"][0], add_special_tokens=False)["input_ids"]) for i in range(4))
    assert results["max_answer_length"] == longest
    assert run(mlm_folder, tmp_path / "qa2", files, "--max_steps", "1", "--max_answer_length", "7",
               "--eval_strategy", "no", "--save_strategy", "no") == 0
    results = json.loads((tmp_path / "qa2" / "report" / "metrics.json").read_text())
    assert results["max_answer_length"] == 7 and not results["truncate"] and results["windows"]["train"] == 26


def test_early_stopping_ends_a_run_whose_f1_cannot_improve(mlm_folder, tmp_path):
    """At learning rate 0 the validation F1 never improves: patience 1 stops after the second of 20 epochs (one step
    each)."""
    assert run(mlm_folder, tmp_path / "qa", squad_files(tmp_path), "--learning_rate", "0", "--num_train_epochs", "20",
               "--min_train_steps", "0", "--early_stopping_patience", "1", "--per_device_train_batch_size", "32") == 0
    results = json.loads((tmp_path / "qa" / "report" / "metrics.json").read_text())
    assert results["global_step"] == 2
    assert sum("eval_f1" in entry for entry in results["log_history"]) == 2


@pytest.mark.parametrize("option", [("--class_weights", "balanced"), ("--hp_search", "2"), ("--classifier_init", "random"),
                                    ("--classifier_pooling", "mean"), ("--classifier_learning_rate", "1e-2")])
def test_options_of_other_tasks_are_refused(option, mlm_folder, tmp_path, capsys):
    assert run(mlm_folder, tmp_path / "qa", squad_files(tmp_path), *option) == 2
    tasks = "classification and token_classification" if option[0] == "--classifier_learning_rate" else "classification"
    assert capsys.readouterr().err == f"hf-efficient finetune: error: {option[0]} applies to --task {tasks}, not question_answering\n"
    assert not (tmp_path / "qa").exists()
