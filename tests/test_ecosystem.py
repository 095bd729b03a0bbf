"""Ecosystem fit of every family: pipelines (inputs past 512 tokens, the whole document as the model reads it), peft LoRA without target_modules, torch.export, ONNX."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from peft import LoraConfig, PeftModel, TaskType, get_peft_model

import hf_efficient
from hf_efficient.integrations import register_peft_targets
from hf_efficient.pipelines import MAX_ANSWER_LEN, N_BEST, TASK
from hf_efficient.tasks.question_answering import best_spans
from tests import tiny_checkpoints
from tests.families import tiny_config
from tests.tiny_checkpoints import FAMILIES, TEXT

tokenizer_dir = tiny_checkpoints.tokenizer_dir  # fixture
LONG = 1024  # tokens the pipeline models accept
QUESTION = "Which part decides what runs next?"


def family_model(model_type: str, head: str, vocab_size: int = 300, **overrides) -> transformers.PreTrainedModel:
    """A random tiny model of the family with its sparse settings and a position table of LONG tokens."""
    torch.manual_seed(0)
    config = tiny_config(model_type, "sparse", vocab_size=vocab_size, **{"max_position_embeddings": LONG + 2, **overrides})
    return hf_efficient.FAMILIES[model_type].models[head](config).eval()


@pytest.fixture(scope="module")
def long_tokenizer(tokenizer_dir):
    tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    tokenizer.model_max_length = LONG
    return tokenizer


def long_text(tokenizer, tokens: int = 600) -> str:
    text = TEXT
    while len(tokenizer(text)["input_ids"]) < tokens:
        text += TEXT
    return text


# ----------------------------------------------------------------------------------------- pipelines

@pytest.mark.parametrize("model_type", FAMILIES)
def test_pipelines_accept_inputs_longer_than_512_tokens(model_type, long_tokenizer):
    tokenizer = long_tokenizer
    text = long_text(tokenizer)
    assert len(tokenizer(text)["input_ids"]) > 512
    masked = text[: len(text) // 2] + tokenizer.mask_token + text[len(text) // 2:]

    fill = transformers.pipeline("fill-mask", model=family_model(model_type, "ForMaskedLM"), tokenizer=tokenizer)
    assert len(fill(masked, top_k=3)) == 3

    classify = transformers.pipeline("text-classification", model=family_model(model_type, "ForSequenceClassification"), tokenizer=tokenizer)
    assert classify(text)[0]["label"].startswith("LABEL_")

    tag = transformers.pipeline("token-classification", model=family_model(model_type, "ForTokenClassification"), tokenizer=tokenizer)
    tokens = tag(text)
    assert max(token["end"] for token in tokens) > len(text) // 2  # labels reach past the first 512 tokens

    answer = transformers.pipeline(TASK, model=family_model(model_type, "ForQuestionAnswering"), tokenizer=tokenizer)(
        question=QUESTION, context=text)
    assert answer["answer"] == text[answer["start"]:answer["end"]] and answer["score"] is not None

    extract = transformers.pipeline("feature-extraction", model=family_model(model_type, "Model"), tokenizer=tokenizer)
    features = extract(text, return_tensors=True)
    assert features.shape[1] > 512 and torch.isfinite(features).all()


def best_span(model: transformers.PreTrainedModel, tokenizer, context: str, **inputs) -> tuple[float, int, int]:
    """The model called directly on (QUESTION, context) in one window: its best span as the QA workflow finds it."""
    encoded = tokenizer(QUESTION, context, return_offsets_mapping=True, return_tensors="pt")
    offsets = [tuple(offset) if sequence == 1 else None
               for offset, sequence in zip(encoded.pop("offset_mapping")[0].tolist(), encoded.sequence_ids(0), strict=True)]
    with torch.no_grad():
        output = model(**encoded, **inputs)
    spans = best_spans({"example": [0], "offset_mapping": [offsets]}, output.start_logits.numpy(),
                       output.end_logits.numpy(), N_BEST, MAX_ANSWER_LEN)
    return spans[0]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_pipelines_of_a_saved_checkpoint_read_the_whole_document_as_the_model_does(model_type, long_tokenizer, tmp_path):
    """Question answering in one window (no striding) and classification without truncation answer what the model
    called directly on the whole document answers."""
    tokenizer, text = long_tokenizer, long_text(long_tokenizer)
    for head in ("ForQuestionAnswering", "ForSequenceClassification"):
        family_model(model_type, head).save_pretrained(tmp_path / head)
        tokenizer.save_pretrained(tmp_path / head)
    qa = transformers.pipeline(TASK, model=str(tmp_path / "ForQuestionAnswering"))
    assert qa.preprocess({"question": QUESTION, "context": text})["model_inputs"]["input_ids"].shape == (
        1, len(tokenizer(QUESTION, text)["input_ids"]))
    score, start, end = best_span(qa.model, tokenizer, text)
    assert qa(question=QUESTION, context=text) == {"score": pytest.approx(score, abs=1e-4), "start": start, "end": end,
                                                   "answer": text[start:end]}

    classify = transformers.pipeline("text-classification", model=str(tmp_path / "ForSequenceClassification"))
    with torch.no_grad():
        probabilities = classify.model(**tokenizer(text, return_tensors="pt")).logits.softmax(-1)[0]
    assert classify(text) == [{"label": f"LABEL_{int(probabilities.argmax())}",
                               "score": pytest.approx(float(probabilities.max()), abs=1e-5)}]


def test_longformer_style_qa_pipeline_puts_global_attention_on_the_question(long_tokenizer):
    tokenizer, text = long_tokenizer, long_text(long_tokenizer)
    model = family_model("hfe_longformer", "ForQuestionAnswering")
    qa = transformers.pipeline(TASK, model=model, tokenizer=tokenizer)
    logits = qa.forward(qa.preprocess({"question": QUESTION, "context": text}))["start_logits"]
    encoded = tokenizer(QUESTION, text, return_tensors="pt")
    question = torch.arange(encoded["input_ids"].shape[1]) <= len(tokenizer(QUESTION)["input_ids"]) - 2  # <s>, question
    with torch.no_grad():
        on_question = model(**encoded, global_attention_mask=question[None]).start_logits
        on_none = model(**encoded, global_attention_mask=torch.zeros_like(question)[None]).start_logits
    torch.testing.assert_close(logits, on_question)
    assert (on_none - on_question).abs().max() > 1e-3


def test_qa_pipeline_strides_a_short_model_over_a_long_document(long_tokenizer):
    """A dense model of 256 tokens reads the document in windows sharing `doc_stride` tokens; the answer is the best
    span of any window, inside the context."""
    tokenizer, text = long_tokenizer, long_text(long_tokenizer)
    qa = transformers.pipeline(TASK, model=family_model("hfe_roberta", "ForQuestionAnswering", max_position_embeddings=258),
                               tokenizer=tokenizer)
    assert qa.default_max_seq_len() == 256
    windows = qa.preprocess({"question": QUESTION, "context": text}, doc_stride=64)["model_inputs"]["input_ids"]
    assert windows.shape[0] > 2 and windows.shape[1] == 256
    answer = qa(question=QUESTION, context=text, doc_stride=64, max_answer_len=5)
    assert 0 <= answer["start"] < answer["end"] <= len(text) and answer["answer"] == text[answer["start"]:answer["end"]]
    assert len(tokenizer(answer["answer"], add_special_tokens=False)["input_ids"]) <= 6  # a leading space may split off


def test_qa_pipeline_rejects_a_missing_question_in_one_line(long_tokenizer):
    qa = transformers.pipeline(TASK, model=family_model("hfe_roberta", "ForQuestionAnswering"), tokenizer=long_tokenizer)
    with pytest.raises(ValueError, match="non-empty question and context"):
        qa(question="", context="The kernel schedules tasks.")


# ---------------------------------------------------------------------------------------------- peft

PEFT_TASKS = {"ForMaskedLM": None, "ForSequenceClassification": TaskType.SEQ_CLS, "ForTokenClassification": TaskType.TOKEN_CLS,
              "ForQuestionAnswering": TaskType.QUESTION_ANS, "Model": TaskType.FEATURE_EXTRACTION}


def test_every_family_has_default_peft_targets():
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as lora_targets

    register_peft_targets()
    for model_type in FAMILIES:
        assert lora_targets[model_type] == lora_targets["roberta"]


@pytest.mark.parametrize("model_type", FAMILIES)
def test_lora_without_target_modules_trains_saves_reloads_and_merges(model_type, tmp_path):
    register_peft_targets()
    ids = torch.randint(5, 99, (2, 100))
    for head, task in PEFT_TASKS.items():
        model = get_peft_model(family_model(model_type, head, vocab_size=99), LoraConfig(task_type=task, r=4))
        lora = [name for name, _ in model.named_parameters() if "lora_" in name]
        assert any(".attention.self.query." in name for name in lora), lora
        assert any(".attention.self.value." in name for name in lora), lora
    # The MLM adapter: gradients reach it; set to non-zero weights, saved, reloaded onto a fresh base model, merged.
    model = get_peft_model(family_model(model_type, "ForMaskedLM", vocab_size=99), LoraConfig(r=4, lora_alpha=8))
    model(input_ids=ids, labels=ids).loss.backward()
    lora = {name: p for name, p in model.named_parameters() if "lora_" in name}
    assert lora and all(p.grad is not None for name, p in lora.items() if "lora_A" in name or "lora_B" in name)
    with torch.no_grad():
        for p in lora.values():
            p.normal_(std=0.2)
    with torch.no_grad():
        adapted = model(input_ids=ids).logits
    model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    reloaded = PeftModel.from_pretrained(family_model(model_type, "ForMaskedLM", vocab_size=99), tmp_path / "adapter").eval()
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=ids).logits, adapted, atol=1e-5, rtol=1e-5)
        merged = reloaded.merge_and_unload()
        assert not any("lora_" in name for name, _ in merged.named_parameters())
        torch.testing.assert_close(merged(input_ids=ids).logits, adapted, atol=1e-4, rtol=1e-4)
        base = family_model(model_type, "ForMaskedLM", vocab_size=99)(input_ids=ids).logits
    assert (base - adapted).abs().max() > 1e-4  # the adapter did change the model


# -------------------------------------------------------------------------------------------- export

# Exported at the first length, run at every one. 37 and 11 are multiples of no block or window size;
# at 11 eager mode takes the dense paths (BigBird, Longformer) and Linformer's short-sequence fallback
# (8 real tokens in the padded row), which the exported program computes with the sparse path.
EXPORT_LENGTHS = (100, 150, 37, 11)
LENGTH = torch.export.Dim("length", min=2, max=256)


def export_inputs(length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    ids = torch.randint(5, 99, (2, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[1, length * 3 // 4:] = 0
    return {"input_ids": ids.masked_fill(mask == 0, 1), "attention_mask": mask}


def base_model(model_type: str, **overrides) -> transformers.PreTrainedModel:
    """The family's base model, sparse settings, positions for every length of `LENGTH`."""
    torch.manual_seed(0)
    config = tiny_config(model_type, "sparse", max_position_embeddings=258, **overrides)
    return hf_efficient.FAMILIES[model_type].models["Model"](config, add_pooling_layer=False).eval()


class LastHiddenState(torch.nn.Module):
    """The model with its inputs named: torch.export cannot give inputs passed through `**kwargs` a dynamic shape."""

    def __init__(self, model: transformers.PreTrainedModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, global_attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          global_attention_mask=global_attention_mask).last_hidden_state


def global_inputs(length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """`export_inputs` with global tokens: 2 in the first sequence; 1, or 2 past 60 tokens, in the second."""
    inputs = export_inputs(length, seed)
    is_global = torch.zeros_like(inputs["input_ids"])
    is_global[:, 0] = is_global[0, 2] = 1
    if length > 60:
        is_global[1, 50] = 1
    return {**inputs, "global_attention_mask": is_global}


def assert_same_at_real_positions(expected: torch.Tensor, actual: torch.Tensor, inputs: dict) -> None:
    real = inputs["attention_mask"].bool()
    torch.testing.assert_close(actual[real], expected[real], atol=1e-5, rtol=1e-5)


def families(slow_unless_dense: bool = True) -> list:
    return [pytest.param(model_type, marks=[pytest.mark.slow] if slow_unless_dense and model_type != "hfe_roberta" else [])
            for model_type in FAMILIES]


@pytest.mark.parametrize("model_type", families())
def test_torch_export_with_a_dynamic_length(model_type):
    assert_exports_with_a_dynamic_length(base_model(model_type))


def assert_exports_with_a_dynamic_length(model: torch.nn.Module) -> None:
    """Exported at one length, run at others: the exported program matches eager mode at each."""
    first = export_inputs(EXPORT_LENGTHS[0])
    program = torch.export.export(model, (), first, dynamic_shapes={name: {1: LENGTH} for name in first}, strict=False)
    for seed, length in enumerate(EXPORT_LENGTHS):
        inputs = export_inputs(length, seed)
        with torch.no_grad():
            assert_same_at_real_positions(model(**inputs).last_hidden_state,
                                          program.module()(**inputs).last_hidden_state, inputs)


def onnx_export(model: torch.nn.Module, inputs: dict, path: Path, compare_lengths: tuple[int, ...], make_inputs) -> None:
    """Export to ONNX with a dynamic length, check the graph and compare it with eager mode in onnxruntime."""
    onnx = pytest.importorskip("onnx", reason="ONNX export needs the onnx and onnxscript packages")
    pytest.importorskip("onnxscript")
    onnxruntime = pytest.importorskip("onnxruntime", reason="comparing the graph with eager mode needs onnxruntime")
    torch.onnx.export(model, (), kwargs=inputs, f=str(path), dynamo=True,
                      dynamic_shapes={name: {1: LENGTH} for name in inputs})
    onnx.checker.check_model(str(path))
    session = onnxruntime.InferenceSession(str(path))
    for seed, length in enumerate(compare_lengths):
        inputs = make_inputs(length, seed)
        with torch.no_grad():
            expected = model(**inputs)
        expected = getattr(expected, "last_hidden_state", expected)
        actual = session.run(None, {name: value.numpy() for name, value in inputs.items()})[0]
        assert_same_at_real_positions(expected, torch.from_numpy(actual), inputs)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", families(slow_unless_dense=False))
def test_onnx_export_with_a_dynamic_length(model_type, tmp_path):
    onnx_export(base_model(model_type), export_inputs(EXPORT_LENGTHS[0]), tmp_path / "model.onnx",
                EXPORT_LENGTHS, export_inputs)


@pytest.mark.slow
def test_longformer_global_attention_exports_with_a_dynamic_length(tmp_path):
    """The number of global tokens is data-dependent: one program serves every count (torch.export and ONNX)."""
    model = LastHiddenState(base_model("hfe_longformer")).eval()
    first = global_inputs(EXPORT_LENGTHS[0])
    program = torch.export.export(model, (), first, dynamic_shapes={name: {1: LENGTH} for name in first}, strict=False)
    for seed, length in enumerate(EXPORT_LENGTHS):
        inputs = global_inputs(length, seed)
        with torch.no_grad():
            assert_same_at_real_positions(model(**inputs), program.module()(**inputs), inputs)
    onnx_export(model, first, tmp_path / "model.onnx", EXPORT_LENGTHS, global_inputs)


def export_with_a_dynamic_length(model: torch.nn.Module) -> torch.export.ExportedProgram:
    first = export_inputs(EXPORT_LENGTHS[0])
    return torch.export.export(model, (), first, dynamic_shapes={name: {1: LENGTH} for name in first}, strict=False)


@pytest.mark.slow
def test_reformer_dense_threshold_exports_with_a_dynamic_length(tmp_path):
    """Inputs of at most `full_attention_max_length` tokens get dense attention, a different function from the
    hashed one: the exported program switches on the caller's length (torch.cond) as eager mode does."""
    model = base_model("hfe_reformer", full_attention_max_length=60)  # 37 and 11 tokens dense, 100 and 150 not
    program = export_with_a_dynamic_length(model)
    for seed, length in enumerate(EXPORT_LENGTHS):
        inputs = export_inputs(length, seed)
        with torch.no_grad():
            assert_same_at_real_positions(model(**inputs).last_hidden_state,
                                          program.module()(**inputs).last_hidden_state, inputs)
    inputs = export_inputs(37)
    with torch.no_grad():  # the threshold matters at 37 tokens
        hashed = base_model("hfe_reformer")(**inputs).last_hidden_state
        assert (program.module()(**inputs).last_hidden_state - hashed).abs().max() > 1e-3
    onnx_export(model, export_inputs(EXPORT_LENGTHS[0]), tmp_path / "model.onnx", EXPORT_LENGTHS, export_inputs)


def test_reformer_export_needs_a_fixed_bucket_count():
    with pytest.raises(ValueError, match="num_buckets"):
        export_with_a_dynamic_length(base_model("hfe_reformer", num_buckets=None))


@pytest.mark.slow
def test_reformer_export_needs_the_eval_rotations_of_its_seed():
    """Eval-mode rotations are drawn when the model switches to eval mode, so that they are constants of the program."""
    model = base_model("hfe_reformer")
    model.config.hash_seed = 7
    with pytest.raises(ValueError, match=r"model\.eval\(\)"):
        export_with_a_dynamic_length(model)
    program = export_with_a_dynamic_length(model.eval())
    inputs = export_inputs(150)
    with torch.no_grad():
        assert_same_at_real_positions(model(**inputs).last_hidden_state, program.module()(**inputs).last_hidden_state,
                                      inputs)
