"""Extractive question answering as a transformers pipeline, over a context of any length.

transformers 5 removed its `question-answering` pipeline (`pipeline("question-answering")` raises a KeyError that
points to chat models) and refuses that task name before looking at registered ones. `import hf_efficient`
registers this one as `extractive-question-answering`: `pipeline("extractive-question-answering", model=folder)`.
It reads the question and the context in windows of `max_seq_len` tokens that share `doc_stride` tokens, as the
old pipeline and `finetune --task question_answering` do, and answers with the best span over all of them; a
model whose position table holds the whole document reads it in one window. Longformer-style models put global
attention on the question: their QA head does so when it is given no `global_attention_mask`.
"""

from __future__ import annotations

from transformers import AutoModelForQuestionAnswering, Pipeline
from transformers.pipelines import PIPELINE_REGISTRY

from .tasks.question_answering import best_spans, windows

TASK = "extractive-question-answering"
DOC_STRIDE = 128  # the old pipeline's and transformers' QA examples' default
MAX_ANSWER_LEN = 30  # transformers' QA examples' default, in tokens
N_BEST = 20  # best starts and ends tried per window


class QuestionAnsweringPipeline(Pipeline):
    """`qa(question=..., context=...)` or `qa({"question": ..., "context": ...})` -> {"score", "start", "end",
    "answer"}: the span of the context with the highest start + end logit (`score`) in any window, its character
    offsets in the context, and its text ("" and score None when no window holds a valid span).

    Options (at construction or per call): `doc_stride` (tokens shared by neighbouring windows, default 128),
    `max_seq_len` (tokens per window, question included; default the tokenizer's `model_max_length`, at most the
    model's position table), `max_answer_len` (tokens, default 30).
    """

    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_tokenizer = True

    def __call__(self, inputs: dict | None = None, *, question: str | None = None, context: str | None = None,
                 **kwargs):
        if inputs is None:
            inputs = {"question": question, "context": context}
        return super().__call__(inputs, **kwargs)

    def _sanitize_parameters(self, doc_stride: int | None = None, max_seq_len: int | None = None,
                             max_answer_len: int | None = None):
        preprocess = {name: value for name, value in (("doc_stride", doc_stride), ("max_seq_len", max_seq_len))
                      if value is not None}
        postprocess = {"max_answer_len": max_answer_len} if max_answer_len is not None else {}
        return preprocess, {}, postprocess

    def default_max_seq_len(self) -> int:
        """The tokenizer's `model_max_length`, at most what the model's position table holds (our families say)."""
        return min(self.tokenizer.model_max_length,
                   getattr(self.model.config, "max_sequence_length", self.tokenizer.model_max_length))

    def preprocess(self, inputs: dict, doc_stride: int = DOC_STRIDE, max_seq_len: int | None = None) -> dict:
        question, context = (inputs.get(key) if isinstance(inputs, dict) else None for key in ("question", "context"))
        if not (isinstance(question, str) and question.strip() and isinstance(context, str) and context.strip()):
            raise ValueError("question answering takes a non-empty question and context: qa(question=..., context=...)")
        encoded = windows({"question": [question], "context": [context], "example": [0]}, self.tokenizer,
                          max_seq_len or self.default_max_seq_len(), doc_stride)
        model_inputs = self.tokenizer.pad({name: encoded[name] for name in self.tokenizer.model_input_names
                                           if name in encoded}, return_tensors="pt")
        return {"model_inputs": dict(model_inputs), "offset_mapping": encoded["offset_mapping"], "context": context}

    def _forward(self, inputs: dict) -> dict:
        output = self.model(**inputs["model_inputs"])
        return {"start_logits": output.start_logits, "end_logits": output.end_logits,
                "offset_mapping": inputs["offset_mapping"], "context": inputs["context"]}

    def postprocess(self, outputs: dict, max_answer_len: int = MAX_ANSWER_LEN) -> dict:
        offsets = outputs["offset_mapping"]
        best = best_spans({"example": [0] * len(offsets), "offset_mapping": offsets},
                          outputs["start_logits"].float().numpy(), outputs["end_logits"].float().numpy(), N_BEST,
                          max_answer_len)
        if not best:
            return {"score": None, "start": 0, "end": 0, "answer": ""}
        score, start, end = best[0]
        return {"score": score, "start": start, "end": end, "answer": outputs["context"][start:end]}


def register_pipelines() -> None:
    """File the question-answering pipeline under `TASK` (idempotent)."""
    if TASK not in PIPELINE_REGISTRY.get_supported_tasks():
        PIPELINE_REGISTRY.register_pipeline(TASK, pipeline_class=QuestionAnsweringPipeline,
                                            pt_model=AutoModelForQuestionAnswering, type="text")

