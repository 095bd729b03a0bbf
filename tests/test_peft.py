"""Parameter-efficient fine-tuning (`--peft`): adapters on every family, reversible replay, merge, reload, CLI checks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers
from peft import PeftModel

import hf_efficient
from hf_efficient.cli import main
from hf_efficient.training.peft_recipe import PeftArguments, check_peft_options, merged, wrap
from tests import tiny_checkpoints
from tests.families import tiny_config
from tests.tiny_checkpoints import FAMILIES

tokenizer_dir = tiny_checkpoints.tokenizer_dir  # fixture
IDS = torch.randint(5, 99, (2, 40), generator=torch.Generator().manual_seed(0))
LABELS = torch.tensor([0, 2])


def model(model_type: str, head: str = "ForSequenceClassification", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return hf_efficient.FAMILIES[model_type].models[head](tiny_config(model_type, num_labels=3, **overrides))


def perturb_adapters(peft_model) -> None:
    """Give the adapters and the head's trained copy other weights (LoRA's B starts at zero), so that they change the model."""
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name or "ia3_l" in name or "modules_to_save" in name:
                parameter.normal_(mean=1.0 if "ia3_l" in name else 0.0, std=0.3)


def trainable(peft_model) -> dict[str, torch.Tensor]:
    return {name: p for name, p in peft_model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("model_type", FAMILIES)
def test_lora_trains_only_the_adapters_and_the_new_head(model_type):
    peft_model = wrap(model(model_type), PeftArguments(peft="lora", lora_r=4), "ForSequenceClassification")
    names = trainable(peft_model)
    assert all("lora_" in name or ".classifier.modules_to_save." in name for name in names), names
    assert any(".query.lora_A" in name for name in names) and any(".value.lora_B" in name for name in names)
    assert any(".classifier.modules_to_save.default.out_proj" in name for name in names)
    frozen = {name: p.detach().clone() for name, p in peft_model.named_parameters() if not p.requires_grad}
    before = {name: p.detach().clone() for name, p in names.items()}
    optimizer = torch.optim.AdamW(names.values(), lr=1e-2)
    peft_model.train()
    peft_model(input_ids=IDS, labels=LABELS).loss.backward()
    assert all(p.grad is not None for p in names.values())
    optimizer.step()
    changed = {name for name, p in names.items() if not torch.equal(before[name], p)}
    # (Longformer-style classifiers make <s> global: the last layer's local query/value get zero gradients there.)
    assert {name for name in names if ".classifier." in name or ".layer.0." in name} <= changed
    assert all(torch.equal(frozen[name], p) for name, p in peft_model.named_parameters() if not p.requires_grad)


def test_head_learning_rate_reaches_the_trained_copy_of_the_head(tmp_path):
    from hf_efficient.tasks.classification import ClassifierTrainer

    peft_model = wrap(model("hfe_roberta"), PeftArguments(peft="lora"), "ForSequenceClassification")
    args = transformers.TrainingArguments(str(tmp_path), report_to="none", learning_rate=1e-3)
    optimizer = ClassifierTrainer(model=peft_model, args=args, classifier_learning_rate=3e-2).create_optimizer()
    head = {id(p) for name, p in trainable(peft_model).items() if ".classifier.modules_to_save." in name}
    assert {id(p) for group in optimizer.param_groups if group["lr"] == 3e-2 for p in group["params"]} == head


def test_question_answering_head_is_trained_whole():
    peft_model = wrap(model("hfe_roberta", "ForQuestionAnswering"), PeftArguments(peft="ia3"), "ForQuestionAnswering")
    names = trainable(peft_model)
    assert any(".qa_outputs.modules_to_save." in name for name in names)
    assert all("ia3_l" in name or ".qa_outputs." in name for name in names), names


def test_a_head_without_a_peft_task_type_is_trained_whole():
    """Multiple choice: peft has no task type for it; its head is found on the model, as every head's is."""
    peft_model = wrap(model("hfe_roberta", "ForMultipleChoice"), PeftArguments(peft="lora"), "ForMultipleChoice")
    names = trainable(peft_model)
    assert any(".classifier.modules_to_save." in name for name in names)
    assert all("lora_" in name or ".classifier." in name for name in names), names
    peft_model(input_ids=IDS[:, None].expand(2, 3, 40), labels=torch.tensor([0, 2])).loss.backward()


@pytest.mark.parametrize("model_type, overrides", [("hfe_reformer", {}), ("hfe_bigbird", {"reversible": True})])
def test_reversible_backward_replays_lora_dropout(model_type, overrides):
    """Recomputed in backward, the LoRA branch draws the same dropout mask: gradients equal plain autograd's."""
    peft_model = wrap(model(model_type, **overrides), PeftArguments(peft="lora", lora_r=4, lora_dropout=0.5),
                      "ForSequenceClassification")
    perturb_adapters(peft_model)
    peft_model.train()
    encoder = peft_model.get_base_model().roberta.encoder

    def gradients(memory_saving: bool, checkpointing: bool = False, seed: int = 3) -> dict[str, torch.Tensor]:
        encoder.memory_saving_backward = memory_saving
        if checkpointing:
            peft_model.activation_checkpointing_enable()
        peft_model.zero_grad()
        torch.manual_seed(seed)
        peft_model(input_ids=IDS, labels=LABELS).loss.backward()
        return {name: p.grad.clone() for name, p in trainable(peft_model).items()}

    plain, saving = gradients(False), gradients(True)
    for name, grad in plain.items():
        torch.testing.assert_close(saving[name], grad, atol=1e-6, rtol=1e-5, msg=name)
    other_masks = gradients(True, seed=4)
    assert any((other_masks[name] - grad).abs().max() > 1e-6 for name, grad in plain.items())  # dropout is active
    checkpointed = gradients(False, checkpointing=True)
    for name, grad in plain.items():
        torch.testing.assert_close(checkpointed[name], grad, atol=1e-6, rtol=1e-5, msg=name)


@pytest.mark.parametrize("method", ["lora", "ia3"])
def test_merged_model_computes_what_the_adapter_does_and_exports(method):
    peft_model = wrap(model("hfe_longformer"), PeftArguments(peft=method, peft_target_modules=["attention_and_global"]),
                      "ForSequenceClassification").eval()
    perturb_adapters(peft_model)
    mask = torch.ones_like(IDS)
    mask[1, 30:] = 0
    is_global = torch.zeros_like(IDS)
    is_global[:, 0] = 1
    inputs = {"input_ids": IDS, "attention_mask": mask, "global_attention_mask": is_global}
    with torch.no_grad():
        adapted = peft_model(**inputs).logits
        base = model("hfe_longformer").eval()(**inputs).logits
        plain = merged(peft_model)
        torch.testing.assert_close(plain(**inputs).logits, adapted, atol=1e-5, rtol=1e-5)
    assert (adapted - base).abs().max() > 1e-3
    assert type(plain) is hf_efficient.FAMILIES["hfe_longformer"].models["ForSequenceClassification"]
    assert not any("lora_" in name or "ia3_" in name or "modules_to_save" in name for name, _ in plain.named_parameters())
    if method == "ia3":
        return  # exporting the same merged architecture again would add nothing
    program = torch.export.export(plain, (), inputs, strict=False)
    torch.testing.assert_close(program.module()(**inputs).logits, adapted, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", ["lora", "ia3"])
def test_all_linear_adapts_every_linear_layer_of_the_encoder_but_not_the_head(method):
    """peft's `all-linear` reaches the feed-forward and the global projections; the task head stays trained whole."""
    base = model("hfe_longformer")
    linear = {name for name, module in base.roberta.encoder.named_modules() if isinstance(module, torch.nn.Linear)}
    peft_model = wrap(base, PeftArguments(peft=method, peft_target_modules=["all-linear"]), "ForSequenceClassification")
    adapter = "lora_A" if method == "lora" else "ia3_l"
    adapted = {name.split("encoder.", 1)[1].rsplit(f".{adapter}", 1)[0] for name, _ in peft_model.named_parameters()
               if f".{adapter}." in name}
    assert adapted == linear and any(name.endswith("intermediate.dense") for name in linear)
    assert any(name.endswith("query_global") for name in linear)
    names = trainable(peft_model)
    assert all(adapter[:4] in name or ".classifier.modules_to_save." in name for name in names), names
    assert not any(".classifier." in name and adapter[:4] in name for name in names)


@pytest.mark.parametrize("sharing", ["none", "layerwise"])
def test_lora_on_linformer_length_projections_trains_and_merges(sharing):
    """The length projections (used on their first L columns, so no linear layer) take LoRA as parameters."""
    peft_model = wrap(model("hfe_linformer", projection_sharing=sharing),
                      PeftArguments(peft="lora", lora_r=4, peft_target_modules=["length_projection"]),
                      "ForSequenceClassification")
    names = trainable(peft_model)
    assert all(".length_projection.lora_" in name or ".classifier.modules_to_save." in name for name in names), names
    assert {"lora_A", "lora_B"} <= {part for name in names for part in name.split(".")}
    perturb_adapters(peft_model)
    peft_model.train()
    mask = torch.ones_like(IDS)
    mask[1, 30:] = 0  # 40 and 30 real tokens: more than k = 8, so both rows use the projections
    peft_model(input_ids=IDS, attention_mask=mask, labels=LABELS).loss.backward()
    assert all(p.grad is not None and p.grad.abs().max() > 0 for p in names.values())
    peft_model.eval()
    with torch.no_grad():
        adapted = peft_model(input_ids=IDS, attention_mask=mask).logits
        base = model("hfe_linformer", projection_sharing=sharing).eval()(input_ids=IDS, attention_mask=mask).logits
        plain = merged(peft_model)
        torch.testing.assert_close(plain(input_ids=IDS, attention_mask=mask).logits, adapted, atol=1e-5, rtol=1e-5)
    assert (adapted - base).abs().max() > 1e-3
    assert not any("lora_" in name for name, _ in plain.named_parameters())


CLEAN_LOAD = textwrap.dedent(
    """
    import sys, torch
    sys.modules["hf_efficient"] = None  # as if the package were not installed: importing it fails
    from transformers import AutoConfig
    from transformers.dynamic_module_utils import get_class_from_dynamic_module
    from peft import PeftModel
    # The MLM checkpoint's auto_map names its own head only; its modeling file holds every head.
    mlm = AutoConfig.from_pretrained({base!r}, trust_remote_code=True).auto_map["AutoModelForMaskedLM"]
    classifier = get_class_from_dynamic_module(mlm.replace("ForMaskedLM", "ForSequenceClassification"), {base!r})
    base = classifier.from_pretrained({base!r}, num_labels=3)
    assert not type(base).__module__.startswith("hf_efficient"), type(base).__module__
    model = PeftModel.from_pretrained(base, {adapter!r}).eval()
    with torch.no_grad():
        torch.save(model(torch.load({adapter!r} + "/ids.pt")).logits, {adapter!r} + "/remote_logits.pt")
    """
)


def test_adapter_loads_on_the_family_checkpoint_with_and_without_the_package(tmp_path):
    """An adapter trained on a fresh classifier head over an MLM checkpoint reloads on top of that checkpoint."""
    base, adapter = tmp_path / "base", tmp_path / "adapter"
    model("hfe_linformer", "ForMaskedLM").save_pretrained(base)
    classifier = transformers.AutoModelForSequenceClassification.from_pretrained(base, num_labels=3)
    peft_model = wrap(classifier, PeftArguments(peft="lora", lora_r=4), "ForSequenceClassification").eval()
    perturb_adapters(peft_model)
    peft_model.save_pretrained(adapter)
    torch.save(IDS, adapter / "ids.pt")
    with torch.no_grad():
        expected = peft_model(IDS).logits
        fresh = transformers.AutoModelForSequenceClassification.from_pretrained(base, num_labels=3)
        torch.testing.assert_close(PeftModel.from_pretrained(fresh, adapter).eval()(IDS).logits, expected)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    result = subprocess.run([sys.executable, "-c", CLEAN_LOAD.format(base=str(base), adapter=str(adapter))],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    torch.testing.assert_close(torch.load(adapter / "remote_logits.pt"), expected, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------- command line
@pytest.fixture(scope="module")
def checkpoint(tokenizer_dir, tmp_path_factory) -> Path:
    """A tiny hfe_reformer MLM checkpoint (reversible layers) with the tiny tokenizer."""
    folder = tmp_path_factory.mktemp("peft") / "mlm"
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    model("hfe_reformer", "ForMaskedLM", vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.model_max_length = 128
    tokenizer.save_pretrained(folder)
    return folder


SHORT = ["--max_steps", "2", "--per_device_train_batch_size", "4", "--disable_tqdm", "true", "--eval_strategy", "no",
         "--save_strategy", "no", "--report_to", "none"]


def test_finetune_with_merge_saves_a_plain_checkpoint_and_the_adapter(checkpoint, tmp_path, capsys):
    out = tmp_path / "finetune"
    assert main(["finetune", "--model_name_or_path", str(checkpoint), "--output_dir", str(out), "--peft", "lora",
                 "--lora_r", "4", "--lora_dropout", "0.1", "--max_length", "64", "--max_train_samples", "16",
                 "--max_eval_samples", "8", "--merge", *SHORT]) == 0
    results = json.loads((out / "hfe_stage.json").read_text())
    trained, total = results["trainable_parameters"], results["total_parameters"]
    assert trained < total / 2
    assert f"trainable parameters: {trained:,} of {total:,} ({100 * trained / total:.2f}%)" in capsys.readouterr().out
    assert (out / "adapter" / "adapter_config.json").is_file() and not (out / "adapter_config.json").exists()
    merged = transformers.AutoModelForSequenceClassification.from_pretrained(out)
    assert not any("lora_" in name for name, _ in merged.named_parameters())


def test_adapt_saves_an_adapter_on_the_mlm_checkpoint(checkpoint, tmp_path):
    out = tmp_path / "adapt"
    assert main(["adapt", "--model_name_or_path", str(checkpoint), "--output_dir", str(out), "--peft", "ia3",
                 "--max_length", "64", "--max_train_documents", "40", "--max_held_out_sequences", "4", *SHORT]) == 0
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["peft_type"] == "IA3" and not (out / "model.safetensors").exists()
    PeftModel.from_pretrained(transformers.AutoModelForMaskedLM.from_pretrained(checkpoint), out)


def test_bad_peft_options_fail_before_training(checkpoint, tmp_path, capsys):
    """Options alone are checked without a model; targets need one, so they go through the CLI (one line, exit 2)."""
    cases = [
        (PeftArguments(peft="prefix"), "unknown --peft method 'prefix'; choose from lora, ia3"),
        (PeftArguments(merge=True), "--merge needs an adapter: add --peft lora | ia3"),
        (PeftArguments(peft="lora", lora_r=0), "--lora_r must be positive, got 0"),
        (PeftArguments(peft="lora", lora_dropout=1.0), "--lora_dropout must be in [0, 1), got 1.0"),
        (PeftArguments(peft="ia3", peft_target_modules=["length_projection"]),
         "--peft_target_modules length_projection adapts a parameter, which only --peft lora can"),
        (PeftArguments(peft="lora", peft_target_modules=["length_projection"], lora_dropout=0.1),
         "--peft_target_modules length_projection needs --lora_dropout 0"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            check_peft_options(args)
    with pytest.raises(ValueError, match="length_projection.weight match no module of this hfe_roberta model"):
        wrap(model("hfe_roberta"), PeftArguments(peft="lora", peft_target_modules=["length_projection"]),
             "ForSequenceClassification")
    out = tmp_path / "out"
    assert main(["finetune", "--model_name_or_path", str(checkpoint), "--output_dir", str(out), "--max_length", "64",
                 "--max_train_samples", "8", "--max_eval_samples", "4", "--peft", "lora", "--peft_target_modules",
                 "query", "query_global", *SHORT]) == 2
    error = capsys.readouterr().err
    assert error.count("hf-efficient finetune: error:") == 1
    assert "--peft_target_modules query_global match no module of this hfe_reformer model" in error.splitlines()[-1]
    assert main(["pretrain", "--output_dir", str(out), "--size", "tiny", "--vocab_size", "300", "--max_length", "64",
                 "--max_train_documents", "20", "--peft", "lora", *SHORT]) == 2
    assert "--peft trains adapters on a pretrained encoder" in capsys.readouterr().err
    assert not (out / "hfe_stage.json").exists()


@pytest.mark.slow
def test_two_processes_train_a_reversible_lora_with_dropout(checkpoint, tmp_path):
    """DDP (gloo) over the reversible family's memory-saving backward with LoRA dropout, no unused parameters."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29541",
               "-m", "hf_efficient.cli", "finetune", "--model_name_or_path", str(checkpoint), "--output_dir",
               str(tmp_path), "--peft", "lora", "--lora_dropout", "0.1", "--max_length", "64",
               "--max_train_samples", "16", "--max_eval_samples", "8", "--ddp_find_unused_parameters", "false", *SHORT]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "hfe_stage.json").read_text())
    assert results["global_step"] == 2 and results["world_size"] == 2


def test_global_projections_under_lora_dropout_are_kept_not_rebuilt():
    """Longformer-style rebuilds its plain global key and value projections in backward; adapted by LoRA with dropout,
    a second call would draw another mask, so they are kept: gradients equal those of a model that keeps everything."""
    def gradients(min_length: int) -> dict[str, torch.Tensor]:
        peft_model = wrap(model("hfe_longformer", blocked_recompute_min_length=min_length),
                          PeftArguments(peft="lora", lora_r=4, lora_dropout=0.5, peft_target_modules=["global"]),
                          "ForSequenceClassification")
        perturb_adapters(peft_model)
        peft_model.train()
        torch.manual_seed(3)
        peft_model(input_ids=IDS, labels=LABELS).loss.backward()
        return {name: p.grad.clone() for name, p in trainable(peft_model).items()}

    kept, rebuilt = gradients(2**31), gradients(0)
    for name, grad in kept.items():
        torch.testing.assert_close(rebuilt[name], grad, atol=1e-6, rtol=1e-5, msg=name)
