"""The three-stage workflow (pretrain -> adapt -> finetune) through the Trainer, on tiny models and data subsets."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoTokenizer, TrainerCallback, TrainingArguments

import hf_efficient
from hf_efficient.cli import main
from hf_efficient.data import load_general_corpus
from hf_efficient.metrics import load_metric
from hf_efficient.training import (
    AdaptArguments,
    FinetuneArguments,
    Interrupted,
    PretrainArguments,
    adapt,
    finetune,
    pretrain,
    train_tokenizer,
)

from .families import FAMILY_CASES, TINY

LENGTH = 64
TINY_MLM = ["--size", "tiny", "--vocab_size", "400", "--max_length", str(LENGTH), "--per_device_train_batch_size", "4",
            "--held_out_fraction", "0.1", "--max_held_out_sequences", "8", "--logging_steps", "1", "--seed", "7"]


def quiet(**fields) -> TrainingArguments:
    defaults = {"report_to": "none", "disable_tqdm": True, "logging_steps": 1, "per_device_train_batch_size": 4,
                "per_device_eval_batch_size": 8, "save_steps": 1000, "learning_rate": 1e-3, "seed": 7}
    return TrainingArguments(**{**defaults, **fields})


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> Path:
    """A tiny dense MLM checkpoint (with its tokenizer) pretrained through the CLI."""
    folder = tmp_path_factory.mktemp("workflow") / "pretrain"
    assert main(["pretrain", "--output_dir", str(folder), "--model_type", "hfe_roberta", "--max_train_documents", "300",
                 "--max_steps", "6", "--disable_tqdm", "true", *TINY_MLM]) == 0
    return folder


def test_tokenizer_has_trained_vocab_and_roberta_special_tokens(tmp_path):
    texts = load_general_corpus()["text"][:2000]
    train_tokenizer(texts, 700, 128).save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert len(tokenizer) == 700  # not the 5-token tokenizer RobertaTokenizerFast(vocab_file=...) builds
    assert tokenizer.convert_ids_to_tokens(range(5)) == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    ids = tokenizer("the cat <mask> here")["input_ids"]
    assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
    assert tokenizer.mask_token_id in ids
    # <mask> strips the space before it: "cat <mask>" has no token for that space
    assert tokenizer.decode(ids, skip_special_tokens=False).count("cat<mask>") == 1
    assert tokenizer.model_max_length == 128


def test_shipped_metrics_load_offline_and_match_scikit_learn(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    predictions, references = rng.integers(0, 5, 200), rng.integers(0, 5, 200)
    accuracy = load_metric("accuracy").compute(predictions=predictions, references=references)["accuracy"]
    f1 = load_metric("f1").compute(predictions=predictions, references=references, average="macro")["f1"]
    assert accuracy == pytest.approx(sklearn_metrics.accuracy_score(references, predictions))
    assert f1 == pytest.approx(sklearn_metrics.f1_score(references, predictions, average="macro"))


def test_pretrain_writes_model_tokenizer_report_and_lowers_loss(pretrained):
    results = json.loads((pretrained / "hfe_stage.json").read_text())
    assert results["global_step"] == 6
    assert results["mlm_loss_after"] < results["mlm_loss_before"]
    assert len(AutoTokenizer.from_pretrained(pretrained)) == 400
    assert (pretrained / "report" / "metrics.json").is_file() and (pretrained / "report" / "loss.png").is_file()
    assert json.loads((pretrained / "config.json").read_text())["architectures"] == ["HfeRobertaForMaskedLM"]


def test_adapt_then_finetune_from_the_previous_stage(pretrained, tmp_path):
    adapted = tmp_path / "adapt"
    adapt(AdaptArguments(model_name_or_path=str(pretrained), max_length=LENGTH, max_train_documents=30,
                         held_out_fraction=0.1, max_held_out_sequences=8), quiet(output_dir=str(adapted), max_steps=4))
    assert json.loads((adapted / "hfe_stage.json").read_text())["stage"] == "adapt"
    results = finetune(
        FinetuneArguments(model_name_or_path=str(adapted), max_length=LENGTH, max_train_samples=24, max_eval_samples=16,
                          classifier_pooling="mean", classifier_learning_rate=1e-2),
        quiet(output_dir=str(tmp_path / "finetune"), max_steps=3, eval_strategy="no", save_strategy="no"),
    )
    assert 0 <= results["test_accuracy"] <= 1 and 0 <= results["test_macro_f1"] <= 1
    assert json.loads((tmp_path / "finetune" / "config.json").read_text())["classifier_pooling"] == "mean"
    assert results["majority_label"] in results["labels"] and len(results["labels"]) == 10
    assert (tmp_path / "finetune" / "report" / "loss.png").is_file()


def test_lm_head_steps_train_the_head_alone_before_adapt(pretrained, tmp_path):
    weights = load_file(pretrained / "model.safetensors")
    seen = {}

    class Snapshot(TrainerCallback):  # the head's Trainer ends first: what the head phase left
        def on_train_end(self, args, state, control, model=None, **kwargs):
            seen.setdefault("after_head", {name: p.detach().clone() for name, p in model.named_parameters()})

    results = adapt(AdaptArguments(model_name_or_path=str(pretrained), max_length=LENGTH, max_train_documents=30,
                                   held_out_fraction=0.1, max_held_out_sequences=8, lm_head_steps=3),
                    quiet(output_dir=str(tmp_path / "adapt"), max_steps=2), callbacks=[Snapshot()])
    after_head = seen["after_head"]
    encoder = [name for name in after_head if not name.startswith("lm_head.")]
    assert encoder and all(torch.equal(after_head[name], weights[name]) for name in encoder)
    assert not torch.equal(after_head["lm_head.dense.weight"], weights["lm_head.dense.weight"])
    adapted = load_file(tmp_path / "adapt" / "model.safetensors")  # then adapt trains everything
    assert not torch.equal(adapted["roberta.encoder.layer.0.attention.self.query.weight"],
                           weights["roberta.encoder.layer.0.attention.self.query.weight"])
    assert results["lm_head_steps"] == 3 and results["global_step"] == 2
    assert results["mlm_loss_head_start"] > results["mlm_loss_before"]  # the loss before adapt is after the head's steps


def test_lm_head_steps_without_a_checkpoint_is_one_clear_error(tmp_path, capsys):
    assert main(["pretrain", "--output_dir", str(tmp_path), "--lm_head_steps", "2", *TINY_MLM]) == 2
    assert "--lm_head_steps 2: give 0, or more steps with --model_name_or_path" in capsys.readouterr().err


def test_classifier_learning_rate_applies_to_the_head_only(tmp_path):
    from hf_efficient.tasks.classification import ClassifierTrainer

    model = hf_efficient.HfeRobertaForSequenceClassification(hf_efficient.HfeRobertaConfig(**TINY, num_labels=3))
    names = {id(p): name for name, p in model.named_parameters()}
    args = quiet(output_dir=str(tmp_path), learning_rate=1e-4, weight_decay=0.01)
    optimizer = ClassifierTrainer(model=model, args=args, classifier_learning_rate=1e-2).create_optimizer()
    seen = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    assert sorted(seen) == sorted(names.values())  # every parameter once
    for group in optimizer.param_groups:
        head = {names[id(p)].startswith("classifier.") for p in group["params"]}
        assert len(head) == 1 and group["lr"] == (1e-2 if head.pop() else 1e-4)
        assert group["weight_decay"] == (0.0 if any(names[id(p)].endswith("bias") for p in group["params"]) else 0.01)
    plain = ClassifierTrainer(model=model, args=args).create_optimizer()
    assert {group["lr"] for group in plain.param_groups} == {1e-4}


class SignalAt(TrainerCallback):
    """Sends `signum` to this process at the end of optimizer step `step` (as `kill` or Ctrl-C would)."""

    def __init__(self, step: int, signum: int = signal.SIGTERM):
        self.step, self.signum = step, signum

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), self.signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_signal_leaves_a_checkpoint_and_resume_matches_an_uninterrupted_run(pretrained, tmp_path, signum):
    def run(folder: Path, resume: bool = False, callbacks=()):
        args = AdaptArguments(model_name_or_path=str(pretrained), max_length=LENGTH, max_train_documents=40,
                              held_out_fraction=0.1, max_held_out_sequences=4, resume=resume)
        # dropout on, several epochs: resuming must restore the RNG and the data order exactly
        return adapt(args, quiet(output_dir=str(folder), max_steps=8, per_device_train_batch_size=2), callbacks)

    straight = run(tmp_path / "straight")
    with pytest.raises(Interrupted, match="--resume"):
        run(tmp_path / "interrupted", callbacks=[SignalAt(3, signum)])
    assert (tmp_path / "interrupted" / "checkpoint-3").is_dir()
    assert not (tmp_path / "interrupted" / "hfe_stage.json").exists()
    with pytest.raises(ValueError, match="--resume"):  # the folder holds a checkpoint: never silently restart
        run(tmp_path / "interrupted")
    resumed = run(tmp_path / "interrupted", resume=True)
    assert resumed["global_step"] == straight["global_step"] == 8
    losses = {entry["step"]: entry["loss"] for entry in straight["log_history"] if "loss" in entry}
    resumed_losses = {entry["step"]: entry["loss"] for entry in resumed["log_history"] if "loss" in entry}
    assert resumed_losses == pytest.approx(losses, rel=1e-4)  # same batches, same masks, same dropout
    weights = load_file(tmp_path / "straight" / "model.safetensors")
    resumed_weights = load_file(tmp_path / "interrupted" / "model.safetensors")
    for name, tensor in weights.items():
        torch.testing.assert_close(resumed_weights[name], tensor, rtol=1e-4, atol=1e-5)


# The dense family runs every other test here; the others run the stages once each.
@pytest.mark.parametrize("model_type", [pytest.param(name, marks=pytest.mark.slow) if name == "hfe_roberta" else name
                                        for name in sorted(hf_efficient.FAMILIES)])
def test_every_family_runs_the_stages(model_type, tmp_path):
    """Each family with its tiny test settings (tests/families.py), sparse pattern active at 64 tokens."""
    case = FAMILY_CASES.get(model_type)
    size = {key: TINY[key] for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")}
    args = PretrainArguments(model_type=model_type, size="tiny", vocab_size=300, max_length=LENGTH,
                             max_train_documents=60, held_out_fraction=0.1, max_held_out_sequences=4,
                             config_overrides={**size, **(case.sparse if case else {})})
    results = pretrain(args, quiet(output_dir=str(tmp_path / "pre"), max_steps=2))
    assert results["model_type"] == model_type and results["global_step"] == 2
    results = finetune(
        FinetuneArguments(model_name_or_path=str(tmp_path / "pre"), max_length=LENGTH, max_train_samples=8,
                          max_eval_samples=8),
        quiet(output_dir=str(tmp_path / "ft"), max_steps=1, eval_strategy="no", save_strategy="no"),
    )
    assert results["global_step"] == 1


def cli_error(capsys, *argv) -> str:
    """Run the CLI, expect the one-line input error (exit 2) and return it."""
    assert main(list(argv)) == 2
    return capsys.readouterr().err


@pytest.fixture(scope="module")
def classifier(pretrained, tmp_path_factory) -> Path:
    """A folder holding a sequence-classification checkpoint (another task than MLM)."""
    folder = tmp_path_factory.mktemp("classifier")
    config = hf_efficient.HfeRobertaConfig.from_pretrained(pretrained, num_labels=3)
    hf_efficient.HfeRobertaForSequenceClassification(config).save_pretrained(folder)
    AutoTokenizer.from_pretrained(pretrained).save_pretrained(folder)
    return folder


def test_bad_input_fails_before_training(pretrained, classifier, tmp_path, capsys):
    out = str(tmp_path / "out")
    missing = tmp_path / "missing.txt"
    assert "does not exist" in cli_error(capsys, "pretrain", "--output_dir", out, "--train_files", str(missing))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert "is empty" in cli_error(capsys, "pretrain", "--output_dir", out, "--train_files", str(empty))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n  \n\n")
    assert "no non-empty text" in cli_error(capsys, "pretrain", "--output_dir", out, "--train_files", str(blank))
    garbage = tmp_path / "broken.parquet"
    garbage.write_bytes(b"this is not parquet")
    assert "could not read" in cli_error(capsys, "pretrain", "--output_dir", out, "--train_files", str(garbage))
    wrong = tmp_path / "notes.docx"
    wrong.write_text("text")
    assert "unsupported extension" in cli_error(capsys, "pretrain", "--output_dir", out, "--train_files", str(wrong))
    records = tmp_path / "train.jsonl"
    records.write_text("".join(json.dumps({"body": f"text {i}", "topic": i % 2}) + "\n" for i in range(20)))
    error = cli_error(capsys, "finetune", "--output_dir", out, "--model_name_or_path", str(pretrained),
                      "--train_file", str(records), "--text_column", "body")
    assert "'label' not found" in error and "['body', 'topic']" in error
    error = cli_error(capsys, "adapt", "--output_dir", out, "--model_name_or_path", str(classifier))
    assert "another task" in error and "ForSequenceClassification" in error
    assert "no config.json" in cli_error(capsys, "finetune", "--output_dir", out, "--model_name_or_path", str(tmp_path))
    error = cli_error(capsys, "adapt", "--output_dir", out, "--model_name_or_path", str(pretrained), "--max_length", "100")
    assert "--max_length 100 is above" in error and f"{LENGTH} tokens" in error
    error = cli_error(capsys, "finetune", "--output_dir", out, "--model_name_or_path", str(classifier))
    assert "classifies into 3 labels" in error
    error = cli_error(capsys, "finetune", "--output_dir", out, "--model_name_or_path", str(pretrained),
                      "--classifier_pooling", "max")
    assert "`classifier_pooling` must be" in error
    error = cli_error(capsys, "finetune", "--output_dir", out, "--model_name_or_path", str(pretrained),
                      "--classifier_learning_rate", "0")
    assert "--classifier_learning_rate must be positive" in error
    vocabulary_less = tmp_path / "vocabulary-less"  # transformers 5 would build a 5-token tokenizer from it
    vocabulary_less.mkdir()
    (vocabulary_less / "tokenizer_config.json").write_bytes((pretrained / "tokenizer_config.json").read_bytes())
    assert "no tokenizer files" in cli_error(capsys, "finetune", "--output_dir", out, "--model_name_or_path",
                                             str(pretrained), "--tokenizer_name", str(vocabulary_less))
    # a new model's options are checked before the tokenizer is trained (which would leave files in --output_dir)
    assert "unknown --model_type 'nope'" in cli_error(capsys, "pretrain", "--output_dir", out, "--model_type", "nope")
    assert "unknown --size 'huge'" in cli_error(capsys, "pretrain", "--output_dir", out, "--size", "huge")
    error = cli_error(capsys, "pretrain", "--output_dir", out, "--config_overrides", "num_attention_heads=3")
    assert "num_attention_heads" in error
    error = cli_error(capsys, "pretrain", "--output_dir", out, "--config_overrides", "hidden_size=abc")
    assert "'hidden_size' expected int" in error and len(error.splitlines()) == 1
    # the workflow fits the family's layer pattern to num_hidden_layers: a bad value still gets the config's line
    error = cli_error(capsys, "workflow", "--output_dir", out, "--model_type", "hfe_reformer", "--config_overrides",
                      "num_hidden_layers=abc")
    assert "'num_hidden_layers' expected int" in error and len(error.splitlines()) == 1
    assert "unknown --size 'huge'" in cli_error(capsys, "workflow", "--output_dir", out, "--size", "huge")
    error = cli_error(capsys, "pretrain", "--output_dir", out, "--config_overrides", "no_such_field=1")
    assert "['no_such_field'] are not fields of" in error
    assert "--vocab_size must be at least" in cli_error(capsys, "pretrain", "--output_dir", out, "--vocab_size", "10")
    for command in ("pretrain", "workflow"):  # names the option given, not max_position_embeddings
        for length in ("-5", "0"):
            error = cli_error(capsys, command, "--output_dir", out, "--max_length", length)
            assert error.strip() == f"hf-efficient {command}: error: --max_length must be positive, got {length}"
    assert not (tmp_path / "out").exists()  # nothing started
    before = sorted(p.name for p in pretrained.iterdir())
    error = cli_error(capsys, "pretrain", "--output_dir", str(pretrained), *TINY_MLM)
    assert "holds a finished run" in error and "--overwrite_output_dir" in error
    assert sorted(p.name for p in pretrained.iterdir()) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_fails_before_training(tmp_path, capsys):
    locked = tmp_path / "locked.txt"
    locked.write_text("some text")
    locked.chmod(0)
    assert "not readable" in cli_error(capsys, "pretrain", "--output_dir", str(tmp_path / "o"), "--train_files", str(locked))


def test_cli_accepts_any_training_arguments_field(tmp_path):
    from hf_efficient.cli import arguments as stage
    from hf_efficient.cli import build_parser

    args = build_parser("adapt").parse_args(["adapt", "--model_name_or_path", "x", "--output_dir", "o",
                                      "--gradient_accumulation_steps", "4", "--bf16", "--report_to", "tensorboard",
                                      "--lr_scheduler_type", "cosine"])
    adapt_args, given = stage.parse_namespace(args, AdaptArguments)
    assert adapt_args.model_name_or_path == "x" and adapt_args.dataset == "domain"
    assert given.pop("report_to") in ("tensorboard", ["tensorboard"])
    assert given == {"output_dir": "o", "gradient_accumulation_steps": 4, "bf16": True, "lr_scheduler_type": "cosine"}


def test_workflow_command_runs_the_three_stages_and_resume_skips_finished_ones(tmp_path, capsys):
    argv = ["workflow", "--output_dir", str(tmp_path), "--model_type", "hfe_roberta", "--size", "tiny",
            "--vocab_size", "300", "--max_length", str(LENGTH), "--max_documents", "60", "--max_steps", "2",
            "--disable_tqdm", "true", "--eval_strategy", "no", "--save_strategy", "no"]
    assert main([*argv, "--classifier_pooling", "max"]) == 2  # checked before the first stage
    assert "`classifier_pooling` must be" in capsys.readouterr().err and not (tmp_path / "1-pretrain").exists()
    assert main([*argv, "--classifier_pooling", "cls"]) == 0
    out = capsys.readouterr().out
    for name in ("pretrain", "adapt", "finetune"):
        assert (tmp_path / {"pretrain": "1-pretrain", "adapt": "2-adapt", "finetune": "3-finetune"}[name]
                / "hfe_stage.json").is_file()
        assert f"\n{name}" in out
    assert "held-out MLM loss" in out and "majority class" in out
    assert json.loads((tmp_path / "3-finetune" / "config.json").read_text())["classifier_pooling"] == "cls"
    report = tmp_path / "report"
    assert {p.name for p in report.iterdir()} >= {"summary.json", "loss_curves.png", "stage_metrics.png"}

    # The same command again (`bash scripts/demo.sh --from_scratch` twice), with or without --resume: the run is reported as
    # finished, with its recorded figures, and nothing is rewritten.
    summary = (report / "summary.json").read_bytes()
    minutes = json.loads(summary)["minutes"]
    for extra in ([], ["--resume"]):
        assert main([*argv, *extra]) == 0
        out = capsys.readouterr().out
        assert f"holds a finished workflow run (hfe_roberta, preset demo, {minutes:.1f} min)" in out
        assert f"report in {report}" in out and "--overwrite_output_dir" in out and "held-out MLM loss" in out
        assert (report / "summary.json").read_bytes() == summary

    # An interrupted run (here: the last stage and the report lost): --resume skips the finished stages.
    shutil.rmtree(report)
    shutil.rmtree(tmp_path / "3-finetune")
    assert main(argv) == 2
    assert "holds an unfinished workflow run: pass --resume" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0
    out = capsys.readouterr().out
    assert out.count("skipped (--resume)") == 2 and "finetune" in out and (report / "summary.json").is_file()

    # --overwrite_output_dir starts over: every stage runs again.
    stamp = (tmp_path / "1-pretrain" / "hfe_stage.json").stat().st_mtime_ns
    assert main([*argv, "--overwrite_output_dir"]) == 0
    out = capsys.readouterr().out
    assert "skipped" not in out and "finished workflow run" not in out
    assert (tmp_path / "1-pretrain" / "hfe_stage.json").stat().st_mtime_ns != stamp


def test_two_processes_under_torchrun(tmp_path):
    """The same command under `torchrun --nproc_per_node 2` on CPU (gloo)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29533",
               "-m", "hf_efficient.cli", "pretrain", "--output_dir", str(tmp_path), "--model_type", "hfe_roberta",
               "--max_train_documents", "200", "--max_steps", "3", "--disable_tqdm", "true", *TINY_MLM]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "hfe_stage.json").read_text())
    assert results["global_step"] == 3 and results["world_size"] == 2


SIGNAL_ONE_RANK = """
import os, signal, sys
from transformers import TrainerCallback, TrainingArguments
from hf_efficient.training import AdaptArguments, Interrupted, adapt

class SignalRankZero(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == 2 and args.process_index == 0:
            os.kill(os.getpid(), signal.SIGTERM)

training = TrainingArguments(output_dir=sys.argv[2], max_steps=6, per_device_train_batch_size=2, save_steps=1000,
                             report_to="none", disable_tqdm=True, use_cpu=True)
try:
    adapt(AdaptArguments(model_name_or_path=sys.argv[1], max_length=64, max_train_documents=40, held_out_fraction=0.1,
                         max_held_out_sequences=4), training, callbacks=[SignalRankZero()])
except Interrupted as error:
    print(f"rank {training.process_index}: {error}", flush=True)
"""


def test_a_signal_to_one_process_stops_every_process_at_the_same_step(pretrained, tmp_path):
    """Only rank 0 gets SIGTERM; accelerate's trigger stops rank 1 after the same step, and both save checkpoint-2."""
    script = tmp_path / "signal_one_rank.py"
    script.write_text(SIGNAL_ONE_RANK)
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29534",
               str(script), str(pretrained), str(tmp_path / "out")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank}: SIGTERM received: stopped at step 2" in done.stdout, done.stdout[-3000:]
    assert (tmp_path / "out" / "checkpoint-2").is_dir() and not (tmp_path / "out" / "hfe_stage.json").exists()


class FakeTokenizer:
    pad_token_id, bos_token_id, eos_token_id = 1, 0, 2

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size


def test_demo_presets_build_valid_configs_of_the_default_long_input_family(monkeypatch):
    from hf_efficient.tasks import classification as classify
    from hf_efficient.training import all_stages, mlm

    registered = hf_efficient.FAMILIES
    assert mlm.default_model_type() == "hfe_longformer"
    with monkeypatch.context() as patch:  # a build without the long-input family falls back to the dense one
        # A copy without it: deleting and re-adding the entry would move it last, and other tests read the order.
        patch.setattr(mlm, "FAMILIES",
                      {name: family for name, family in registered.items() if name != "hfe_longformer"})
        assert mlm.default_model_type() == "hfe_roberta"
    for name, preset in all_stages.PRESETS.items():
        for model_type in registered:
            overrides = all_stages.pretrain_overrides(all_stages.WorkflowArguments(model_type=model_type, preset=name))
            args = PretrainArguments(model_type=model_type, size=preset["size"], max_length=preset["max_length"],
                                     config_overrides=overrides)
            config = mlm.new_config(args, FakeTokenizer(preset["vocab_size"]))
            assert config.max_sequence_length == preset["max_length"]
            head = FinetuneArguments(classifier_pooling=preset["classifier_pooling"],
                                     classifier_learning_rate=preset["classifier_learning_rate"])
            classify.check_head_options(head, config)


def test_config_overrides_take_lists_for_per_layer_fields():
    """A comma inside brackets belongs to the list: per-layer windows (`--variants`, `--config_overrides`)."""
    from hf_efficient.training import stage

    assert stage.parse_overrides("attention_window=[128, 256,512],num_hidden_layers=3,positions=interpolate") == {
        "attention_window": [128, 256, 512], "num_hidden_layers": 3, "positions": "interpolate"}
    with pytest.raises(ValueError, match="'256' is not key=value"):  # an unclosed list
        stage.parse_overrides("attention_window=[128,256")


@pytest.mark.parametrize("size, config_overrides", [(None, None), ("small", None), (None, "num_hidden_layers=3"),
                                                   ("small", "num_hidden_layers=6,hidden_size=64")])
def test_the_presets_build_every_family_with_its_recipe_settings_fitted_to_the_layers(size, config_overrides):
    """recipes.py is the one table: a preset's model has the family's settings there, its per-layer pattern
    repeated or cut to the model's layers, under --config_overrides."""
    from hf_efficient.recipes import FAMILY_SETTINGS
    from hf_efficient.training import all_stages, mlm, stage

    given = stage.parse_overrides(config_overrides)
    for name, preset in all_stages.PRESETS.items():
        for model_type in hf_efficient.FAMILIES:
            workflow = all_stages.WorkflowArguments(model_type=model_type, preset=name, size=size,
                                                    config_overrides=config_overrides)
            config = mlm.new_config(PretrainArguments(model_type=model_type, size=size or preset["size"],
                                                      max_length=preset["max_length"],
                                                      config_overrides=all_stages.pretrain_overrides(workflow)))
            expected = {**FAMILY_SETTINGS.get(model_type, {}), **given}
            pattern = expected.pop("layer_attention_types", None)
            assert {key: getattr(config, key) for key in expected} == expected, (name, model_type)
            if pattern:
                layers = config.num_hidden_layers
                assert config.layer_attention_types == (pattern * layers)[:layers], (name, model_type)


@pytest.mark.slow
def test_demo_preset_sizes_run_end_to_end_on_a_data_subset(tmp_path, capsys):
    """The from-scratch demo's model size and 1024-token sequences, on a few documents and steps."""
    assert main(["demo", "--from_scratch", "--output_dir", str(tmp_path), "--max_documents", "120", "--max_steps", "2",
                 "--disable_tqdm", "true"]) == 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert [stage["stage"] for stage in summary["stages"]] == ["pretrain", "adapt", "finetune"]
    assert summary["max_length"] == 1024


def test_a_sample_of_a_labelled_split_covers_the_whole_file_in_its_order():
    from hf_efficient.tasks.task_data import sample

    rows = datasets.Dataset.from_dict({"label": [0] * 50 + [1] * 50, "index": list(range(100))})  # sorted by label
    some = sample(rows, 10)
    assert len(some) == 10 and set(some["label"]) == {0, 1}
    assert some["index"] == sorted(some["index"]) and sample(rows, 10)["index"] == some["index"]
    assert sample(rows, None) is rows and sample(rows, 500) is rows


def test_a_held_out_share_shorter_than_one_sequence_grows_until_it_makes_one(pretrained):
    from hf_efficient.training.corpus import pack_with_held_out

    tokenizer = AutoTokenizer.from_pretrained(pretrained)
    text = "the cat sat on the mat"
    assert len(tokenizer(text)["input_ids"]) < LENGTH / 2  # 2% of 50 documents, one, is less than a sequence
    corpus = datasets.Dataset.from_dict({"text": [text] * 50})
    train, held = pack_with_held_out(corpus, 0.02, 0, tokenizer, LENGTH, "text")
    assert len(held) >= 1 and len(train) >= 1
    with pytest.raises(ValueError, match="held-out text is shorter than one sequence of 64 tokens"):
        pack_with_held_out(corpus.select(range(2)), 0.02, 0, tokenizer, LENGTH, "text")
