"""The task heads (models/heads.py), the family catalogue (models/families.py) and the embeddings' input checks."""

import inspect
import io
import logging
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, Trainer, TrainingArguments

import hf_efficient
from hf_efficient.models.backbone import HfeModel
from hf_efficient.models.families import FAMILIES, HEADS, register_families, register_model
from hf_efficient.models.heads import HfeForMaskedLM
from tests.families import TINY, tiny_config

PACKAGE = Path(hf_efficient.__file__).parent


def random_ids(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, TINY["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def roberta_pair(head: str, **config):
    """transformers' Roberta<head> and the dense family's head with the same weights, in eval mode."""
    torch.manual_seed(0)
    theirs = getattr(transformers, f"Roberta{head}")(
        transformers.RobertaConfig(**TINY, type_vocab_size=1, layer_norm_eps=1e-5, **config)
    ).eval()
    ours = FAMILIES["hfe_roberta"].models[head](tiny_config("hfe_roberta", **config)).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    return theirs, ours


LABELLED = random_ids(2, 12).masked_fill(torch.rand(2, 12, generator=torch.Generator().manual_seed(2)) < 0.5, -100)
HEAD_CASES = {
    "masked LM": ("ForMaskedLM", {}, {"labels": LABELLED}),
    "single-label": ("ForSequenceClassification", {"num_labels": 3}, {"labels": torch.tensor([2, 0])}),
    "regression": ("ForSequenceClassification", {"num_labels": 1}, {"labels": torch.tensor([0.5, -1.0])}),
    "multi-label": ("ForSequenceClassification", {"num_labels": 3, "problem_type": "multi_label_classification"},
                    {"labels": torch.tensor([[1.0, 0, 1], [0, 0, 1]])}),
    "token classification": ("ForTokenClassification", {"num_labels": 3}, {"labels": LABELLED % 3}),
    # The second answer starts past the input: transformers ignores it, and so must we.
    "question answering": ("ForQuestionAnswering", {}, {"start_positions": torch.tensor([1, 40]),
                                                        "end_positions": torch.tensor([4, 45])}),
    "multiple choice": ("ForMultipleChoice", {}, {"labels": torch.tensor([1, 0])}),
}


@pytest.mark.parametrize("case", HEAD_CASES)
def test_heads_compute_what_robertas_heads_compute(case):
    head, config, targets = HEAD_CASES[case]
    theirs, ours = roberta_pair(head, **config)
    ids = random_ids(4, 12).view(2, 2, 12) if head == "ForMultipleChoice" else random_ids(2, 12)
    with torch.no_grad():
        expected, actual = theirs(ids, **targets), ours(ids, **targets)
    for name in ("loss", "logits", "start_logits", "end_logits"):
        if name in expected:
            torch.testing.assert_close(actual[name], expected[name], atol=1e-5, rtol=0, msg=f"{case}: {name}")
    as_tuple = ours(ids, return_dict=False, **targets)
    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], actual.loss)


@pytest.mark.parametrize("head", ["ForMaskedLM", "ForTokenClassification"])
def test_token_losses_divide_by_num_items_in_batch(head):
    """The Trainer passes the labelled-token count of every accumulated batch; the loss is then sum / that count."""
    model = FAMILIES["hfe_roberta"].models[head](tiny_config("hfe_roberta", num_labels=3)).eval()
    labels = LABELLED if head == "ForMaskedLM" else LABELLED % 3
    ids = random_ids(2, 12)
    mean = model(ids, labels=labels).loss
    count = (labels != -100).sum()
    torch.testing.assert_close(model(ids, labels=labels, num_items_in_batch=count * 3).loss, mean / 3)


def test_chunked_mlm_loss_equals_the_full_loss_and_never_holds_the_logits():
    """Training with chunks of 5 labelled tokens: the same loss and gradients; the LM head never sees more than 5
    rows, and autograd keeps no logits between forward and backward (each chunk's are recomputed)."""
    vocab, chunk = TINY["vocab_size"], 5
    ids = random_ids(2, 40)
    labels = ids.masked_fill(torch.arange(40) % 3 != 0, -100)
    results = {}
    for chunk_size in (0, chunk):
        torch.manual_seed(0)
        model = HfeForMaskedLM(tiny_config("hfe_roberta", mlm_loss_chunk_size=chunk_size)).train()
        decoder = model.lm_head.decoder.weight.untyped_storage().data_ptr()
        head_rows, kept_logits = [], []

        def record(module, args, output, head_rows=head_rows):
            head_rows.append(output.numel() // vocab)

        def pack(tensor, kept_logits=kept_logits, decoder=decoder):
            if tensor.dim() > 1 and tensor.shape[-1] == vocab and tensor.untyped_storage().data_ptr() != decoder:
                kept_logits.append(tuple(tensor.shape))
            return tensor

        model.lm_head.register_forward_hook(record)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            loss = model(ids, labels=labels, num_items_in_batch=50).loss
        loss.backward()
        results[chunk_size] = loss.detach(), model.roberta.embeddings.word_embeddings.weight.grad
        if chunk_size:
            assert max(head_rows) == chunk and not kept_logits, (head_rows, kept_logits)
        else:
            assert head_rows == [2 * 40] and kept_logits  # the full loss computes and keeps every position's logits
    torch.testing.assert_close(results[chunk], results[0], atol=1e-6, rtol=0)


def one_sgd_step(head: str, batches: list[dict], accumulation: int, tmp_path) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = FAMILIES["hfe_roberta"].models[head](tiny_config("hfe_roberta", num_labels=3))
    args = TrainingArguments(
        output_dir=str(tmp_path / f"{head}{accumulation}"), per_device_train_batch_size=len(batches) // accumulation,
        gradient_accumulation_steps=accumulation, max_steps=1, learning_rate=1.0, optim="sgd", lr_scheduler_type="constant",
        weight_decay=0.0, max_grad_norm=0.0, report_to="none", save_strategy="no", use_cpu=True, disable_tqdm=True,
    )
    Trainer(model=model, args=args, train_dataset=batches).train()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("head", ["ForMaskedLM", "ForTokenClassification", "ForSequenceClassification"])
def test_gradient_accumulation_equals_one_large_batch(head, tmp_path):
    """Two micro-batches with 1 and 7 labelled tokens: one accumulated step equals one step on both examples.

    Token losses need `num_items_in_batch` (`accepts_loss_kwargs`) for this; the sequence loss, one label per
    example, needs the Trainer's own scaling (a head that wrongly accepted it would get an unknown input)."""
    ids = random_ids(2, 12)
    if head == "ForSequenceClassification":
        labels = [torch.tensor(2), torch.tensor(0)]
    else:
        labels = [torch.full((12,), -100).index_fill(0, torch.tensor(list(positions)), 1) for positions in ([3], range(7))]
    batches = [{"input_ids": ids[i], "labels": labels[i]} for i in range(2)]
    accumulated = one_sgd_step(head, batches, 2, tmp_path)
    large = one_sgd_step(head, batches, 1, tmp_path)
    for name, weight in large.items():
        torch.testing.assert_close(accumulated[name], weight, atol=1e-6, rtol=0, msg=name)


# ----------------------------------------------------------------------------------------- the catalogue

def test_every_family_has_a_named_class_per_head_in_its_modeling_file():
    """Each class is written out in source (greppable), named Hfe<Family><head>, and loads through its Auto class."""
    for model_type, family in FAMILIES.items():
        prefix = family.config_class.__name__.removesuffix("Config")
        assert list(family.models) == list(HEADS), model_type
        for head, model_class in family.models.items():
            source = inspect.getsource(inspect.getmodule(model_class))
            assert model_class.__name__ == f"{prefix}{head}" and f"class {model_class.__name__}(" in source
            assert model_class.config_class is family.config_class
            auto_class = getattr(transformers, HEADS[head])
            assert type(auto_class.from_config(tiny_config(model_type))) is model_class
            assert getattr(hf_efficient, model_class.__name__) is model_class
        assert getattr(hf_efficient, family.config_class.__name__) is family.config_class


def test_package_root_names_no_family():
    """Adding a family edits models/ only: the package root names no family, its config or its classes."""
    for path in (PACKAGE / "__init__.py", PACKAGE / "integrations.py"):
        text = path.read_text()
        named = [family.model_type for family in FAMILIES.values()
                 if family.model_type in text or family.config_class.__name__.removesuffix("Config") in text]
        assert not named, (path.name, named)


def test_a_family_defined_elsewhere_joins_the_catalogue_and_the_auto_classes(monkeypatch):
    from huggingface_hub.dataclasses import strict

    from hf_efficient.models.heads import HfeForSequenceClassification

    @strict
    class HfeTestConfig(hf_efficient.HfeConfig):
        model_type = "hfe_test_family"

    monkeypatch.setattr(hf_efficient.models.families, "FAMILIES", {})
    catalogue = hf_efficient.models.families.FAMILIES

    @register_model
    class HfeTestForSequenceClassification(HfeForSequenceClassification):
        config_class = HfeTestConfig

    assert catalogue["hfe_test_family"].models == {"ForSequenceClassification": HfeTestForSequenceClassification}
    with pytest.raises(ValueError, match=r"'hfe_test_family' has no model class for \['Model', 'ForMaskedLM'"):
        register_families()
    for head in HEADS:
        if head != "ForSequenceClassification":
            base = HfeModel if head == "Model" else getattr(hf_efficient.models.heads, f"Hfe{head}")
            register_model(type(f"HfeTest{head}", (base,), {"config_class": HfeTestConfig}))
    register_families()
    register_families()  # idempotent
    assert type(AutoConfig.for_model("hfe_test_family")) is HfeTestConfig
    model = transformers.AutoModelForSequenceClassification.from_config(HfeTestConfig(**TINY))
    assert type(model) is HfeTestForSequenceClassification


# ------------------------------------------------------------------------------------------ input checks

@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"input_ids": torch.tensor([[0, 5, TINY["vocab_size"]]])},
         rf"`input_ids` must be in \[0, {TINY['vocab_size'] - 1}\].*got values from 0 to {TINY['vocab_size']}"),
        ({"input_ids": torch.tensor([[0, -1, 2]])}, r"`input_ids` must be in .*got values from -1 to 2"),
        ({"input_ids": torch.tensor([[0, 5, 2]]), "token_type_ids": torch.tensor([[0, 1, 0]])},
         r"`token_type_ids` must be in \[0, 0\] \(type_vocab_size is 1\), got values from 0 to 1"),
        ({"input_ids": torch.tensor([[0, 5, 2]]), "position_ids": torch.tensor([[2, 3, 130]])},
         r"`position_ids` must be in \[0, 129\] \(max_position_embeddings is 130\), got values from 2 to 130"),
    ],
    ids=["input_ids above", "input_ids below", "token_type_ids", "position_ids"],
)
def test_out_of_range_inputs_are_named(inputs, message):
    model = FAMILIES["hfe_roberta"].models["ForMaskedLM"](tiny_config("hfe_roberta")).eval()
    with pytest.raises(ValueError, match=message):
        model(**inputs)


@pytest.mark.parametrize("num_items_in_batch", [None, 50])
def test_chunked_mlm_loss_without_row_selection_equals_the_selected_rows(monkeypatch, num_items_in_batch):
    """The torch.compile variant (no boolean row selection: every row, unlabelled ones weighted 0) gives the loss and
    gradients of the eager variant, and still never runs the head on more than a chunk of rows."""
    from hf_efficient.models import heads

    ids = random_ids(2, 40)
    labels = ids.masked_fill(torch.arange(40) % 3 != 0, -100)
    results = []
    for compiling in (False, True):
        torch.manual_seed(0)
        model = HfeForMaskedLM(tiny_config("hfe_roberta", mlm_loss_chunk_size=7)).train()
        head_rows = []
        model.lm_head.register_forward_hook(lambda module, args, output, rows=head_rows: rows.append(args[0].shape[0]))
        monkeypatch.setattr(heads.torch.compiler, "is_compiling", lambda compiling=compiling: compiling)
        loss = model(ids, labels=labels, num_items_in_batch=num_items_in_batch).loss
        monkeypatch.undo()
        loss.backward()
        assert max(head_rows) == 7
        results.append((loss.detach(), model.roberta.embeddings.word_embeddings.weight.grad))
    torch.testing.assert_close(results[1], results[0], atol=1e-6, rtol=1e-5)


def loading_messages(load) -> str:
    """What transformers' loggers print while `load()` runs (its loading report among them)."""
    printed = io.StringIO()
    handler = logging.StreamHandler(printed)
    logging.getLogger("transformers").addHandler(handler)
    try:
        load()
    finally:
        logging.getLogger("transformers").removeHandler(handler)
    return printed.getvalue()


def test_a_new_task_head_is_one_line_and_the_report_keeps_the_other_keys(tmp_path):
    model_class = FAMILIES["hfe_roberta"].models
    model_class["ForMaskedLM"](tiny_config("hfe_roberta")).save_pretrained(tmp_path)
    printed = loading_messages(lambda: model_class["ForSequenceClassification"].from_pretrained(tmp_path))
    assert "LOAD REPORT" not in printed and len(printed.splitlines()) == 1, printed
    assert "head classifier.dense, classifier.out_proj is new" in printed
    assert "the checkpoint's lm_head, lm_head.dense, lm_head.layer_norm (another task's head) is not loaded" in printed
    assert loading_messages(lambda: model_class["ForMaskedLM"].from_pretrained(tmp_path)) == ""
    # `output_loading_info` still lists them, as transformers' models do (its ModelTesterMixin checks it)
    _, info = model_class["ForSequenceClassification"].from_pretrained(tmp_path, output_loading_info=True)
    assert {"classifier.dense.weight", "classifier.out_proj.bias"} <= set(info["missing_keys"])
    assert "lm_head.dense.weight" in set(info["unexpected_keys"])

    weights = load_file(tmp_path / "model.safetensors")
    save_file({**weights, "roberta.encoder.extra": torch.zeros(2)}, tmp_path / "model.safetensors", {"format": "pt"})
    printed = loading_messages(lambda: model_class["ForSequenceClassification"].from_pretrained(tmp_path))
    report = printed[printed.index("LOAD REPORT"):]
    assert "roberta.encoder.extra" in report and "classifier" not in report and "lm_head" not in report, printed
    assert "head classifier.dense, classifier.out_proj is new" in printed


def test_pair_pooling_classifies_the_two_segments_means_and_their_interactions():
    """`classifier_pooling="pair"`: logits are the head on [u, v, |u - v|, u * v] of the two segments' real tokens."""
    torch.manual_seed(0)
    model = FAMILIES["hfe_roberta"].models["ForSequenceClassification"](
        tiny_config("hfe_roberta", num_labels=3, classifier_pooling="pair", type_vocab_size=2)).eval()
    ids = random_ids(2, 10)
    types = torch.tensor([[0] * 4 + [1] * 6, [0] * 6 + [1] * 2 + [0] * 2])  # the second row padded (type 0) from 8
    mask = torch.tensor([[1] * 10, [1] * 8 + [0] * 2])
    with torch.no_grad():
        logits = model(ids, attention_mask=mask, token_type_ids=types).logits
        hidden = model.roberta(ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        head = model.classifier
        for row, (first, end) in enumerate([(4, 10), (6, 8)]):
            u, v = hidden[row, :first].mean(0), hidden[row, first:end].mean(0)
            expected = head.out_proj(torch.tanh(head.dense(torch.cat([u, v, (u - v).abs(), u * v]))))
            assert (logits[row] - expected).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="reads the two texts from token_type_ids"):
        model(ids, attention_mask=mask)


def test_pair_pooling_needs_two_token_types():
    with pytest.raises(ValueError, match="needs `type_vocab_size` >= 2, got 1"):
        tiny_config("hfe_roberta", classifier_pooling="pair", type_vocab_size=1)
