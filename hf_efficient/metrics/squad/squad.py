"""SQuAD exact match and F1 (as the Hub's `squad` and the official v1.1 script), without the network.

Answers are normalised before comparison: lower case, punctuation removed, the articles a/an/the removed,
whitespace collapsed. Each prediction is scored against its best-matching reference answer.
"""

import re
import string
from collections import Counter

import datasets
import evaluate

_DESCRIPTION = "Exact match and token-level F1 of predicted answer texts, in percent, SQuAD v1.1 normalisation."
_CITATION = ""
_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `dict`): {"id": str, "prediction_text": str} per question.
    references (`list` of `dict`): {"id": str, "answers": {"text": [str, ...], "answer_start": [int, ...]}}.
Returns:
    exact_match (`float`, 0-100) and f1 (`float`, 0-100), averaged over the references.
Example:
    >>> metric = evaluate.load("hf_efficient/metrics/squad")
    >>> metric.compute(predictions=[{"id": "1", "prediction_text": "The Cat"}],
    ...                references=[{"id": "1", "answers": {"text": ["cat"], "answer_start": [0]}}])
    {'exact_match': 100.0, 'f1': 100.0}
"""

PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in PUNCTUATION)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def f1(prediction: str, truth: str) -> float:
    guess, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    same = sum((Counter(guess) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(guess), same / len(gold)
    return 2 * precision * recall / (precision + recall)


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Squad(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({
                "predictions": {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")},
                "references": {"id": datasets.Value("string"),
                               "answers": datasets.Sequence({"text": datasets.Value("string"),
                                                             "answer_start": datasets.Value("int32")})},
            }),
        )

    def _compute(self, predictions, references):
        answers = {prediction["id"]: prediction["prediction_text"] for prediction in predictions}
        missing = [reference["id"] for reference in references if reference["id"] not in answers]
        if missing:
            raise ValueError(f"no prediction for the questions {missing[:10]}")
        if not references:
            return {"exact_match": 0.0, "f1": 0.0}
        totals = {"exact_match": 0.0, "f1": 0.0}
        for reference in references:
            truths = reference["answers"]["text"] or [""]
            guess = answers[reference["id"]]
            totals["exact_match"] += max(exact_match(guess, truth) for truth in truths)
            totals["f1"] += max(f1(guess, truth) for truth in truths)
        return {key: 100.0 * value / len(references) for key, value in totals.items()}
