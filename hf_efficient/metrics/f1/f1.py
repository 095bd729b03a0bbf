"""F1 score, binary or averaged over classes (as the Hub's `f1`, without scikit-learn)."""

import datasets
import evaluate
import numpy as np

_DESCRIPTION = "F1 = 2 * precision * recall / (precision + recall), per class, then averaged."
_CITATION = ""
_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `int`): predicted labels.
    references (`list` of `int`): true labels.
    labels (`list` of `int`, *optional*): classes to include (default: every class in predictions or references).
    pos_label (`int`, defaults to 1): the positive class when `average="binary"`.
    average (`str`, defaults to "binary"): "binary", "micro", "macro", "weighted" or None (per-class scores).
    sample_weight (`list` of `float`, *optional*): per-example weights.
Returns:
    f1 (`float`, or an array of per-class scores when `average=None`). A class with no predictions and no
    references scores 0, as scikit-learn's `zero_division=0`.
Example:
    >>> metric = evaluate.load("hf_efficient/metrics/f1")
    >>> metric.compute(predictions=[0, 2, 1, 0], references=[0, 1, 2, 0], average="macro")
    {'f1': 0.3333333333333333}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class F1(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("int32"), "references": datasets.Value("int32")}),
        )

    def _compute(self, predictions, references, labels=None, pos_label=1, average="binary", sample_weight=None):
        predictions, references = np.asarray(predictions), np.asarray(references)
        weights = np.ones(len(predictions)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
        if average == "binary":
            labels = [pos_label]
        elif labels is None:
            labels = np.union1d(predictions, references)
        true_pos = np.array([(weights * ((predictions == c) & (references == c))).sum() for c in labels])
        predicted = np.array([(weights * (predictions == c)).sum() for c in labels])
        actual = np.array([(weights * (references == c)).sum() for c in labels])
        if average == "micro":
            denominator = predicted.sum() + actual.sum()
            return {"f1": float(2 * true_pos.sum() / denominator) if denominator else 0.0}
        denominator = predicted + actual
        scores = np.divide(2 * true_pos, denominator, out=np.zeros(len(labels)), where=denominator > 0)
        if average in ("binary", "macro"):
            return {"f1": float(scores.mean())}
        if average == "weighted":
            return {"f1": float((scores * actual).sum() / actual.sum()) if actual.sum() else 0.0}
        if average is None:
            return {"f1": scores}
        raise ValueError(f"average must be 'binary', 'micro', 'macro', 'weighted' or None, got {average!r}")
