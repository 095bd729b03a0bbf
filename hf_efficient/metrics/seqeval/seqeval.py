"""Entity-level precision, recall and F1 over tag sequences (as the Hub's `seqeval`, without the `seqeval` package).

Entities are read from the tags by the conlleval rules that `seqeval`'s default mode follows: a chunk
starts at `B-X`, `S-X`, or at an `I-X`/`E-X` that does not continue a chunk of type X (so an `I-` without a
`B-` starts an entity); it ends before `O`, `B-`, `S-` or a tag of another type. An entity counts as found
only when its type, start and end all match.
"""

from collections import Counter

import datasets
import evaluate

_DESCRIPTION = "Precision, recall and F1 of entity spans (IOB1/IOB2/IOBES tags), per type and overall, and tag accuracy."
_CITATION = ""
_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `list` of `str`): predicted tags, one list per sentence.
    references (`list` of `list` of `str`): true tags, same lengths.
Returns:
    for each entity type `X`: {"precision", "recall", "f1", "number" (of true entities)}, and `overall_precision`,
    `overall_recall`, `overall_f1` (micro-averaged over entities), `overall_accuracy` (of the tags). A score with
    a zero denominator is 0.
Example:
    >>> metric = evaluate.load("hf_efficient/metrics/seqeval")
    >>> metric.compute(predictions=[["B-PER", "I-PER", "O"]], references=[["B-PER", "I-PER", "B-LOC"]])["overall_f1"]
    0.6666666666666666
"""


def split_tag(tag: str) -> tuple[str, str]:
    """"B-PER" -> ("B", "PER"); "O" -> ("O", "")."""
    prefix, _, kind = tag.partition("-")
    return (prefix, kind) if kind else ("O" if prefix == "O" else "I", prefix if prefix != "O" else "")


def entities(tags: list[str]) -> set[tuple[str, int, int]]:
    """The (type, first, last) word spans in one tag sequence."""
    found, start, kind = set(), None, ""
    for i, tag in enumerate([*tags, "O"]):  # the sentinel closes the last chunk
        prefix, this = split_tag(tag)
        continues = prefix in ("I", "E") and this == kind and start is not None
        if start is not None and not continues:
            found.add((kind, start, i - 1))
            start = None
        if prefix != "O" and start is None:
            start, kind = i, this
        if prefix in ("E", "S"):  # the chunk ends at this tag
            found.add((kind, start, i))
            start = None
    return found


def ratio(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else 0.0


def scores(correct: int, predicted: int, true: int) -> dict:
    precision, recall = ratio(correct, predicted), ratio(correct, true)
    return {"precision": precision, "recall": recall, "f1": ratio(2 * precision * recall, precision + recall)}


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Seqeval(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Sequence(datasets.Value("string")),
                                        "references": datasets.Sequence(datasets.Value("string"))}),
        )

    def _compute(self, predictions, references):
        correct, predicted, true = Counter(), Counter(), Counter()
        tags = same = 0
        for sentence, (guess, gold) in enumerate(zip(predictions, references, strict=True)):
            if len(guess) != len(gold):
                raise ValueError(f"sentence {sentence}: {len(guess)} predicted tags for {len(gold)} references")
            guessed, truth = entities(guess), entities(gold)
            for counter, spans in ((correct, guessed & truth), (predicted, guessed), (true, truth)):
                counter.update(kind for kind, _, _ in spans)
            tags += len(gold)
            same += sum(a == b for a, b in zip(guess, gold, strict=True))
        results = {kind: {**scores(correct[kind], predicted[kind], true[kind]), "number": true[kind]}
                   for kind in sorted(set(true) | set(predicted))}
        overall = scores(sum(correct.values()), sum(predicted.values()), sum(true.values()))
        results.update({f"overall_{key}": value for key, value in overall.items()})
        results["overall_accuracy"] = ratio(same, tags)
        return results
