"""Distillation (`hf-efficient distill`): student initialisation, the losses, the CLI end to end, resume, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoTokenizer, DataCollatorForTokenClassification, DataCollatorWithPadding, TrainingArguments

import hf_efficient
from hf_efficient.cli import main
from hf_efficient.tasks.question_answering import unanswered_windows
from hf_efficient.tasks.token_classification import untagged
from hf_efficient.training import Interrupted
from hf_efficient.training.distill import (
    DistillArguments,
    DistillationTrainer,
    Weights,
    distill,
    init_from_teacher,
    label_loss,
    soft_target_loss,
    student_config,
    task_distillation_loss,
    teacher_batch,
)

from . import tiny_checkpoints
from .test_question_answering import example
from .test_token_classification import sentence, write_jsonl
from .test_workflow import SignalAt
from .tiny_checkpoints import build_tokenizer

tokenizer_dir = tiny_checkpoints.tokenizer_dir  # fixture

SIZE = {"hidden_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 64,
        "max_position_embeddings": 130}
QUICK = ["--max_length", "64", "--per_device_train_batch_size", "4", "--logging_steps", "1", "--report_to", "none",
         "--disable_tqdm", "true", "--max_eval_samples", "8", "--seed", "3"]


def save_teacher(folder: Path, head: str, tokenizer_dir: Path, **fields) -> Path:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = hf_efficient.HfeRobertaConfig(**{**SIZE, **fields}, vocab_size=len(tokenizer), pad_token_id=1)
    getattr(hf_efficient, f"HfeRoberta{head}")(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def mlm_teacher(tmp_path_factory, tokenizer_dir) -> Path:
    return save_teacher(tmp_path_factory.mktemp("mlm_teacher"), "ForMaskedLM", tokenizer_dir)


@pytest.fixture(scope="module")
def classifier_teacher(tmp_path_factory, tokenizer_dir) -> Path:
    return save_teacher(tmp_path_factory.mktemp("cls_teacher"), "ForSequenceClassification", tokenizer_dir,
                        num_labels=10)


# ----------------------------------------------------------------------------------------- initialisation
def test_student_copies_every_other_layer_and_reports_it(mlm_teacher):
    teacher = hf_efficient.HfeRobertaForMaskedLM.from_pretrained(mlm_teacher)
    config = student_config(DistillArguments(), teacher.config, 64)
    student = hf_efficient.HfeRobertaForMaskedLM(config)
    report = init_from_teacher(student, teacher)
    assert config.num_hidden_layers == 2 and report["copied_layers"] == {"0": 0, "1": 2}
    assert report["random"] == {} and report["copied_tensors"] == len(student.state_dict())
    longer = init_from_teacher(hf_efficient.HfeRobertaForMaskedLM(student_config(DistillArguments(), teacher.config, 256)),
                               teacher)
    assert longer["notes"] == ["roberta.embeddings.position_embeddings.weight tiled from the teacher's 130 rows to 258"]
    for i, j in ((0, 0), (1, 2)):
        assert torch.equal(student.roberta.encoder.layer[i].attention.self.query.weight,
                           teacher.roberta.encoder.layer[j].attention.self.query.weight)
    assert torch.equal(student.lm_head.dense.weight, teacher.lm_head.dense.weight)


def test_other_family_and_width_report_what_stays_random(mlm_teacher):
    teacher = hf_efficient.HfeRobertaForMaskedLM.from_pretrained(mlm_teacher)
    args = DistillArguments(student_model_type="hfe_linformer", student_num_hidden_layers=2,
                            student_config_overrides="projected_length=16")
    linformer = hf_efficient.HfeLinformerForMaskedLM(student_config(args, teacher.config, 64))
    report = init_from_teacher(linformer, teacher)
    assert report["random"] == {} and report["initialised_by_family"]  # the length projections, by the family
    narrow = DistillArguments(student_config_overrides="hidden_size=16,intermediate_size=32")
    report = init_from_teacher(hf_efficient.HfeRobertaForMaskedLM(student_config(narrow, teacher.config, 64)), teacher)
    assert "roberta.encoder.layer.0.attention.self.query.weight" in report["random"]
    assert "shape (16, 16)" in report["random"]["roberta.encoder.layer.0.attention.self.query.weight"]


# ----------------------------------------------------------------------------------------- losses
def test_kd_loss_equals_a_hand_computed_value():
    student, teacher = torch.tensor([[1.0, 0.0, -1.0]]), torch.tensor([[0.0, 2.0, 0.0]])
    t = 2.0
    # p = softmax([0, 1, 0]) = [0.21194, 0.57612, 0.21194], q = softmax([0.5, 0, -0.5]) = [0.50648, 0.30720, 0.18632];
    # KL(p || q) = 0.21194 ln(0.21194 / 0.50648) + 0.57612 ln(0.57612 / 0.30720) + 0.21194 ln(0.21194 / 0.18632)
    #            = -0.18464 + 0.36227 + 0.02731 = 0.20494; times T^2 = 4: 0.81976
    expected = 0.81976
    assert float(soft_target_loss(student, teacher, t)) == pytest.approx(expected, abs=1e-4)
    assert float(soft_target_loss(teacher, teacher, t)) == pytest.approx(0, abs=1e-7)


def test_temperature_scaling_tends_to_matching_logits():
    """T^2 KL -> the mean squared difference of the centred logits / (2C) as T grows (Hinton et al. 2015)."""
    generator = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(5, 7, generator=generator), torch.randn(5, 7, generator=generator)
    difference = (student - student.mean(-1, keepdim=True)) - (teacher - teacher.mean(-1, keepdim=True))
    limit = float((difference**2).sum(-1).mean() / (2 * 7))
    assert float(soft_target_loss(student, teacher, 100.0)) == pytest.approx(limit, rel=2e-2)
    assert float(soft_target_loss(student, teacher, 1.0)) == pytest.approx(
        float(F.kl_div(torch.log_softmax(student, -1), torch.log_softmax(teacher, -1), log_target=True,
                       reduction="batchmean")), rel=1e-5)


def test_task_loss_for_token_classification_and_question_answering_ignores_padding():
    generator = torch.Generator().manual_seed(1)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    tokens_s, tokens_t = torch.randn(2, 4, 3, generator=generator), torch.randn(2, 4, 3, generator=generator)
    changed = tokens_t.clone()
    changed[1, 2:] = 50.0  # padding: must not count
    token_loss = task_distillation_loss({"logits": tokens_s}, {"logits": tokens_t}, 2.0, mask)
    assert float(token_loss) == pytest.approx(float(task_distillation_loss({"logits": tokens_s}, {"logits": changed}, 2.0, mask)))
    assert float(token_loss) == pytest.approx(float(soft_target_loss(tokens_s[mask.bool()], tokens_t[mask.bool()], 2.0)))
    start_s, start_t = torch.randn(2, 4, generator=generator), torch.randn(2, 4, generator=generator)
    qa = task_distillation_loss({"start_logits": start_s, "end_logits": start_t},
                                {"start_logits": start_t, "end_logits": start_t}, 1.0, mask)
    expected = (soft_target_loss(start_s[0], start_t[0], 1.0) + soft_target_loss(start_s[1, :2], start_t[1, :2], 1.0)) / 4
    assert float(qa) == pytest.approx(float(expected), rel=1e-5)
    with pytest.raises(ValueError, match="cannot learn from"):
        task_distillation_loss({"logits": tokens_s}, {"logits": tokens_t[:, :, :2]}, 1.0, mask)


def test_multilabel_losses_are_per_label_and_skip_unlabelled_rows():
    """Multi-label logits are independent sigmoids: the KD term is the binary cross-entropy against the teacher's
    sigmoids (least where the student matches the teacher), the label loss BCE over the rows that have labels;
    a softmax over labels would be wrong for both."""
    student, teacher = torch.tensor([[2.0, -1.0], [0.0, 3.0]]), torch.tensor([[1.0, -2.0], [0.5, 0.5]])
    expected = F.binary_cross_entropy(torch.sigmoid(student / 2), torch.sigmoid(teacher / 2)) * 4
    assert float(soft_target_loss(student, teacher, 2.0, independent=True)) == pytest.approx(float(expected))
    matched = teacher.clone().requires_grad_(True)
    soft_target_loss(matched, teacher, 2.0, independent=True).backward()
    assert float(matched.grad.abs().max()) == pytest.approx(0, abs=1e-7)
    labels = torch.tensor([[1.0, 0.0], [-100.0, -100.0]])
    assert float(label_loss([(student, labels)])) == pytest.approx(
        float(F.binary_cross_entropy_with_logits(student[:1], labels[:1])))
    assert label_loss([(student, torch.full((2, 2), -100.0))]) is None


# ----------------------------------------------------------------------------------------- end to end
def test_mlm_distillation_through_the_cli(mlm_teacher, tmp_path, capsys):
    out = tmp_path / "student"
    assert main(["distill", "--teacher_name_or_path", str(mlm_teacher), "--output_dir", str(out), "--max_steps", "3",
                 "--max_train_samples", "40", "--alpha_cos", "1", "--alpha_hidden", "1", *QUICK]) == 0
    printed = capsys.readouterr().out
    assert "layers (student<-teacher) 0<-0, 1<-2" in printed and "held-out MLM loss: teacher" in printed
    results = json.loads((out / "hfe_stage.json").read_text())
    assert results["initialisation"]["copied_layers"] == {"0": 0, "1": 2} and results["student_layers"] == 2
    logged = [entry for entry in results["log_history"] if "loss_kd" in entry]
    assert logged and {"loss_mlm", "loss_cos", "loss_hidden"} <= set(logged[0])
    assert (out / "report" / "metrics.json").is_file()


def test_classification_distillation_with_unlabelled_text_and_cached_outputs(classifier_teacher, tmp_path):
    args = DistillArguments(teacher_name_or_path=str(classifier_teacher), task="classification", max_length=64,
                            max_train_samples=12, max_eval_samples=8, unlabeled_file="domain",
                            max_unlabeled_documents=8, cache_teacher_outputs=True)
    training = TrainingArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=4,
                                 report_to="none", disable_tqdm=True, eval_strategy="no", save_strategy="no")
    results = distill(args, training)
    assert results["examples"]["train"] == 20 and results["unlabeled_examples"] == 8
    assert results["teacher_output_cache"]["bytes"] > 0 and (tmp_path / "teacher_outputs").is_dir()
    assert 0 <= results["test_accuracy"] <= 1 and 0 <= results["teacher_test_accuracy"] <= 1



def test_multilabel_distillation_with_unlabelled_text(tokenizer_dir, tmp_path):
    """A multi-label teacher teaches a multi-label student (float label vectors; unlabelled rows -100 in every
    label), scored with the multi-label metrics."""
    names = ["number", "question"]
    folder = save_teacher(tmp_path / "teacher", "ForSequenceClassification", tokenizer_dir, num_labels=2,
                          problem_type="multi_label_classification", id2label=dict(enumerate(names)),
                          label2id={n: i for i, n in enumerate(names)})
    texts = [f"line {i} of the kernel{'?' if i % 3 == 0 else ''}" if i % 2 else f"memory pages{'?' * (i % 3 == 0)}"
             for i in range(24)]
    rows = [{"text": text, "labels": [name for name, hit in zip(names, (any(c.isdigit() for c in text), "?" in text),
                                                                 strict=True) if hit]} for text in texts]
    files = {split: write_jsonl(tmp_path / f"{split}.jsonl", rows) for split in ("train", "validation", "test")}
    (tmp_path / "more.txt").write_text("a short line\nthe kernel\nmemory and its pages\nsome more words 42\n")
    args = DistillArguments(teacher_name_or_path=str(folder), task="classification", max_length=64,
                            train_file=files["train"], validation_file=files["validation"], test_file=files["test"],
                            label_column="labels", unlabeled_file=str(tmp_path / "more.txt"))
    training = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3, per_device_train_batch_size=8,
                                 report_to="none", disable_tqdm=True, eval_strategy="no", save_strategy="no")
    results = distill(args, training)
    assert results["examples"]["train"] == 28 and results["unlabeled_examples"] == 4
    assert 0 <= results["test_macro_f1"] <= 1 and 0 <= results["teacher_test_macro_f1"] <= 1
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["problem_type"] == "multi_label_classification"


def test_a_long_student_s_teacher_reads_the_length_it_was_trained_at(tokenizer_dir, tmp_path):
    """A teacher fine-tuned on 16 tokens with a 128-token table reads the first 16 of the student's 64 (issue 12:
    it read 128, which its classifier never learnt, and lost 0.17 accuracy); its logits inside distill, on padded
    batches, equal its logits on each input cut by hand to 16 tokens."""
    folder = save_teacher(tmp_path / "teacher", "ForSequenceClassification", tokenizer_dir, num_labels=10)
    (folder / "hfe_stage.json").write_text(json.dumps({"stage": "finetune", "max_length": 16}))
    (tmp_path / "short.txt").write_text("a short line\nthe kernel\nmemory and its pages\nsome more words\n")
    args = DistillArguments(teacher_name_or_path=str(folder), task="classification", max_length=64,
                            max_train_samples=10, max_eval_samples=8, cache_teacher_outputs=True,
                            unlabeled_file=str(tmp_path / "short.txt"))  # short rows: batches with padding
    training = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=4,
                                 per_device_eval_batch_size=4, report_to="none", disable_tqdm=True,
                                 eval_strategy="no", save_strategy="no")
    results = distill(args, training)
    assert results["teacher_max_length"] == 16 and results["max_length"] == 64
    cached = datasets.load_from_disk(tmp_path / "out" / "teacher_outputs")
    assert max(len(ids) for ids in cached["input_ids"]) > 16 > min(len(ids) for ids in cached["input_ids"])
    teacher = hf_efficient.HfeRobertaForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        own = torch.cat([teacher(input_ids=torch.tensor([ids[:16]])).logits for ids in cached["input_ids"]])
    torch.testing.assert_close(torch.tensor(cached["teacher_logits"]), own, rtol=1e-4, atol=1e-5)


def test_the_teacher_s_batch_keeps_token_types():
    batch = {"input_ids": torch.ones(2, 8, dtype=torch.long), "attention_mask": torch.ones(2, 8),
             "token_type_ids": torch.ones(2, 8, dtype=torch.long), "labels": torch.zeros(2, dtype=torch.long)}
    assert {key: value.shape[1] for key, value in teacher_batch(batch, 5).items()} == {
        "input_ids": 5, "attention_mask": 5, "token_type_ids": 5}


TAGS = ["B-LOC", "B-PER", "I-LOC", "O"]  # the sorted tags of `sentence`, the teacher's label ids
TASK_QUICK = ["--per_device_train_batch_size", "4", "--logging_steps", "1", "--report_to", "none", "--disable_tqdm",
              "true", "--max_steps", "2", "--eval_strategy", "steps", "--eval_steps", "2", "--save_strategy", "no"]


@pytest.fixture(scope="module")
def token_files(tmp_path_factory) -> list[str]:
    folder = tmp_path_factory.mktemp("ner")
    return [f"--{name}_file={write_jsonl(folder / f'{name}.jsonl', [sentence(i + offset) for i in range(count)])}"
            for name, count, offset in (("train", 12, 0), ("validation", 4, 5), ("test", 4, 11))]


@pytest.fixture(scope="module")
def untagged_text(tmp_path_factory) -> Path:
    """Unlabelled in-domain text for the tagger: the sentences' words as lines, without their tags."""
    path = tmp_path_factory.mktemp("unlabelled") / "text.txt"
    path.write_text("".join(" ".join(sentence(i)["tokens"]) + "\n" for i in range(20, 26)))
    return path


def unanswered(path: Path, count: int) -> Path:
    """Questions and contexts without answers: unlabelled in-domain QA rows."""
    rows = [{key: value for key, value in example(i).items() if key != "answers"} for i in range(count)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def tagger_teacher(tmp_path_factory, tokenizer_dir) -> Path:
    return save_teacher(tmp_path_factory.mktemp("tagger"), "ForTokenClassification", tokenizer_dir,
                        num_labels=4, id2label=dict(enumerate(TAGS)), label2id={tag: i for i, tag in enumerate(TAGS)})


def test_token_classification_distillation_through_the_cli(tagger_teacher, token_files, untagged_text, tmp_path,
                                                           capsys):
    out = tmp_path / "student"
    assert main(["distill", "--task", "token_classification", "--teacher_name_or_path", str(tagger_teacher),
                 "--output_dir", str(out), "--max_length", "64", *token_files, *TASK_QUICK,
                 "--unlabeled_file", str(untagged_text), "--max_unlabeled_documents", "5"]) == 0
    assert "distill: test entity F1 teacher" in capsys.readouterr().out
    results = json.loads((out / "hfe_stage.json").read_text())
    assert results["task"] == "token_classification" and results["student_layers"] == 2
    assert results["labels"] == TAGS and results["examples"] == {"train": 12, "validation": 4, "test": 4}
    assert results["unlabeled_examples"] == 5
    assert 0 <= results["teacher_test_f1"] <= 1 and 0 <= results["test_f1"] <= 1 and "test_accuracy" in results
    logged = [entry for entry in results["log_history"] if "loss_kd" in entry]
    assert logged and "loss_mlm" in logged[0] and any("eval_f1" in entry for entry in results["log_history"])
    student = hf_efficient.HfeRobertaForTokenClassification.from_pretrained(out)
    assert student.config.id2label == dict(enumerate(TAGS))


def test_question_answering_distillation_through_the_cli(tokenizer_dir, tmp_path, capsys):
    teacher = save_teacher(tmp_path / "teacher", "ForQuestionAnswering", tokenizer_dir)
    files = {"train": 8, "validation": 4, "test": 4}
    for name, count in files.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(example(i)) + "\n" for i in range(count)))
    out = tmp_path / "student"
    assert main(["distill", "--task", "question_answering", "--teacher_name_or_path", str(teacher),
                 "--output_dir", str(out), "--max_length", "48", "--doc_stride", "8", "--student_model_type",
                 "hfe_longformer", "--student_config_overrides", "attention_window=16",
                 *[f"--{name}_file={tmp_path / f'{name}.jsonl'}" for name in files], *TASK_QUICK,
                 "--unlabeled_file", str(unanswered(tmp_path / "questions.jsonl", 3))]) == 0
    assert "distill: test F1 teacher" in capsys.readouterr().out
    results = json.loads((out / "hfe_stage.json").read_text())
    assert results["model_type"] == "hfe_longformer" and results["examples"] == files
    assert results["windows"]["test"] > 4  # the context is longer than a 48-token window: scored over windows
    # train: questions 0-7, i.e. twice the test split's 0-3, then every window of the 3 unanswered questions
    assert 3 < results["unlabeled_windows"] < results["windows"]["test"]
    assert results["windows"]["train"] == 2 * results["windows"]["test"] + results["unlabeled_windows"]
    assert 0 <= results["teacher_test_f1"] <= 100 and 0 <= results["test_exact_match"] <= 100
    logged = [entry for entry in results["log_history"] if "loss_kd" in entry]
    assert logged and "loss_mlm" in logged[0] and any("eval_f1" in entry for entry in results["log_history"])


def test_task_teacher_with_other_labels_or_a_shorter_window_is_refused(tagger_teacher, token_files, tmp_path,
                                                                        tokenizer_dir, capsys):
    shuffled = save_teacher(tmp_path / "shuffled", "ForTokenClassification", tokenizer_dir, num_labels=4,
                            id2label=dict(enumerate(reversed(TAGS))))
    common = ["distill", "--task", "token_classification", "--output_dir", str(tmp_path / "out"), *token_files]
    assert main([*common, "--teacher_name_or_path", str(shuffled)]) == 2
    assert "the teacher's labels ['O', 'I-LOC', 'B-PER', 'B-LOC'] are not the data's" in capsys.readouterr().err
    assert main([*common, "--teacher_name_or_path", str(tagger_teacher), "--max_length", "256"]) == 2
    assert "--max_length 256 exceeds the 128 tokens the teacher reads" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task", ["token_classification", "question_answering"])
def test_unlabelled_rows_train_the_student_through_the_teacher_alone(task, tagger_teacher, tokenizer_dir, tmp_path):
    """Rows without labels or answers give the KD term only, and its gradient reaches the student."""
    if task == "token_classification":
        teacher = hf_efficient.HfeRobertaForTokenClassification.from_pretrained(tagger_teacher)
        tokenizer = AutoTokenizer.from_pretrained(tagger_teacher)
        rows = untagged(["The kernel task runs on every memory page", "every task"], tokenizer, 32)
        assert {label for row in rows["labels"] for label in row} == {-100}
        collator = DataCollatorForTokenClassification(tokenizer)
    else:
        teacher = hf_efficient.HfeRobertaForQuestionAnswering.from_pretrained(
            save_teacher(tmp_path / "teacher", "ForQuestionAnswering", tokenizer_dir))
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        rows = unanswered_windows(str(unanswered(tmp_path / "questions.jsonl", 2)), tokenizer, 48, 8, None)
        assert len(rows) > 2 and set(rows["start_positions"]) == set(rows["end_positions"]) == {-100}
        rows = rows.select_columns(["input_ids", "attention_mask", "start_positions", "end_positions"])
        collator = DataCollatorWithPadding(tokenizer)
    torch.manual_seed(1)
    student = type(teacher)(teacher.config)  # random weights: it disagrees with the teacher
    trainer = DistillationTrainer(model=student, args=TrainingArguments(str(tmp_path / "out"), report_to="none"),
                                  teacher=teacher, teacher_length=teacher.config.max_sequence_length,
                                  weights=Weights(2.0, 5.0, 2.0), task=task)
    losses = trainer.task_losses(student, dict(collator(list(rows))), None)
    assert set(losses) == {"kd"} and losses["kd"] > 0
    losses["kd"].backward()
    assert all(parameter.grad is not None and parameter.grad.abs().sum() > 0
               for name, parameter in student.named_parameters() if name.startswith(("classifier", "qa_outputs")))


@pytest.mark.parametrize("task, unlabeled, message", [
    ("token_classification", "missing.txt", "does not exist"),
    ("token_classification", "words.jsonl", "column 'text' not found in data files"),
    ("question_answering", "answers.jsonl", "questions.jsonl: column 'context' (the document) not found"),
    ("question_answering", "domain", "the embedded 'domain' corpus holds no questions"),
])
def test_bad_unlabelled_input_stops_with_one_line(task, unlabeled, message, tagger_teacher, token_files,
                                                  tokenizer_dir, tmp_path, capsys):
    write_jsonl(tmp_path / "words.jsonl", [sentence(0)])
    write_jsonl(tmp_path / "questions.jsonl", [{"question": "What runs?"}])
    unlabeled = {"missing.txt": str(tmp_path / "missing.txt"), "words.jsonl": str(tmp_path / "words.jsonl"),
                 "answers.jsonl": str(tmp_path / "questions.jsonl"), "domain": "domain"}[unlabeled]
    if task == "token_classification":
        data = ["--teacher_name_or_path", str(tagger_teacher), *token_files]
    else:
        teacher = save_teacher(tmp_path / "teacher", "ForQuestionAnswering", tokenizer_dir)
        (tmp_path / "train.jsonl").write_text("".join(json.dumps(example(i)) + "\n" for i in range(8)))
        data = ["--teacher_name_or_path", str(teacher), "--train_file", str(tmp_path / "train.jsonl"),
                "--max_length", "48", "--doc_stride", "8"]
    assert main(["distill", "--task", task, "--output_dir", str(tmp_path / "out"), *data,
                 "--unlabeled_file", unlabeled]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hf-efficient")]
    assert len(errors) == 1 and message in errors[0]
    assert not (tmp_path / "out" / "hfe_stage.json").exists()


def test_resume_matches_an_uninterrupted_run(mlm_teacher, tmp_path):
    def run(folder: Path, resume: bool = False, callbacks=()):
        args = DistillArguments(teacher_name_or_path=str(mlm_teacher), max_length=64, max_train_samples=40,
                                max_eval_samples=4, resume=resume)
        training = TrainingArguments(output_dir=str(folder), max_steps=4, save_steps=2, per_device_train_batch_size=2,
                                     report_to="none", disable_tqdm=True, logging_steps=1, seed=3)
        return distill(args, training, callbacks)

    run(tmp_path / "whole")
    with pytest.raises(Interrupted):
        run(tmp_path / "cut", callbacks=[SignalAt(2)])
    assert run(tmp_path / "cut", resume=True)["global_step"] == 4
    whole, resumed = load_file(tmp_path / "whole" / "model.safetensors"), load_file(tmp_path / "cut" / "model.safetensors")
    assert all(torch.allclose(whole[name], resumed[name], atol=1e-6) for name in whole)


# ----------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("options, message", [
    (["--student_num_hidden_layers", "6"], "cannot be initialised from the teacher's 4 layers"),
    (["--student_config_overrides", "hidden_size=16,intermediate_size=32", "--alpha_cos", "1"], "width 16 differs"),
    (["--task", "classification"], "has no ForSequenceClassification head"),
    (["--task", "token_classification"], "has no ForTokenClassification head"),
    (["--task", "question_answering"], "has no ForQuestionAnswering head"),
    (["--student_model_type", "hfe_nonsense"], "unknown --student_model_type"),
    (["--alpha_kd", "0", "--alpha_mlm", "0"], "nothing to train"),
    (["--teacher_max_length", "200"], "--teacher_max_length 200 must be between 1 and the 128 tokens"),
])
def test_bad_input_stops_with_one_line(mlm_teacher, tmp_path, capsys, options, message):
    assert main(["distill", "--teacher_name_or_path", str(mlm_teacher), "--output_dir", str(tmp_path), *options]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("hf-efficient")]
    assert len(errors) == 1 and message in errors[0]
    assert not (tmp_path / "hfe_stage.json").exists()


@pytest.mark.parametrize("task, option, owners", [
    ("classification", ["--label_list", "O,B-X"], "token_classification"),
    ("mlm", ["--doc_stride", "8"], "question_answering"),
    ("token_classification", ["--max_answer_length", "5"], "question_answering"),
    ("mlm", ["--cache_teacher_outputs", "true"], "classification"),
    ("mlm", ["--unlabeled_file", "domain"], "classification, token_classification and question_answering"),
    ("question_answering", ["--alpha_cos", "1"], "mlm"),
    ("classification", ["--train_files", "corpus.txt"], "mlm"),
    ("question_answering", ["--label_column", "tags"], "classification and token_classification"),
])
def test_an_option_of_another_task_stops_before_anything_is_loaded(task, option, owners, tmp_path, capsys):
    """The teacher folder does not exist: the refused option is reported first, as the only line."""
    assert main(["distill", "--task", task, "--teacher_name_or_path", str(tmp_path / "missing"),
                 "--output_dir", str(tmp_path / "out"), *option]) == 2
    assert capsys.readouterr().err == f"hf-efficient distill: error: {option[0]} applies to --task {owners}, not {task}\n"
    assert not (tmp_path / "out").exists()


def test_the_python_api_refuses_an_option_of_another_task_too(tmp_path):
    """What the command line refuses, `distill()` called from Python refuses as well (a notebook's path)."""
    args = DistillArguments(task="question_answering", teacher_name_or_path=str(tmp_path / "missing"), alpha_cos=1.0)
    with pytest.raises(ValueError, match="^--alpha_cos applies to --task mlm, not question_answering$"):
        distill(args, TrainingArguments(output_dir=str(tmp_path / "out"), report_to="none"))


def test_student_with_another_tokenizer_is_refused(mlm_teacher, tmp_path, capsys):
    other = tmp_path / "other"
    build_tokenizer(other)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_tokens(["kernelspace"])
    tokenizer.save_pretrained(other)
    save_teacher(other, "ForMaskedLM", other)
    assert main(["distill", "--teacher_name_or_path", str(mlm_teacher), "--student_name_or_path", str(other),
                 "--output_dir", str(tmp_path / "out")]) == 2
    assert "different vocabularies or tokenizers" in capsys.readouterr().err
