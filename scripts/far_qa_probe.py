#!/usr/bin/env python3
"""far_qa's meaning probe: how often a reader that never sees a heading with the quoted sentence picks the answer
anyway, by the heading whose section start reads most like the sentence.

The build drops the questions that a word match (TF-IDF) of a heading and its section's start answers
(scripts/build_long_tasks.py). A window holding a heading holds the question, so a model that matches meaning rather
than words can still pick the section a sentence comes from. This probe is such a matcher without training: the
context's heading whose title, with the first `reach` tokens of its section, is nearest the quoted sentence by
all-MiniLM-L6-v2's sentence embedding (mean-pooled, cosine). Headings are estimated from the text alone, as
tests/test_data.py does. Its exact match, against the chance of a random heading (docs/quality/):

    python scripts/far_qa_probe.py --splits test --reaches 0 128 256 --markdown docs/quality/far_qa_probe.md
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

import torch
from transformers import AutoModel

from hf_efficient.hub import load_tokenizer
from hf_efficient.tasks import task_data as training_data
from hf_efficient.training.long_context import minilm_folder

MAX_TITLE_WORDS = 12  # the longest title a question names


def headings(context: str, answer: str, answer_start: int) -> list[tuple[str, int]]:
    """(title, character offset) of the context's headings: its answer and every paragraph of at most
    `MAX_TITLE_WORDS` words without final punctuation, in order."""
    found, offset = {answer_start: answer}, 0
    for paragraph in context.split("\n\n"):
        if paragraph and len(paragraph.split()) <= MAX_TITLE_WORDS and not re.search(r"[.,;:!?)]$", paragraph):
            found.setdefault(offset, paragraph)
        offset += len(paragraph) + 2
    return [(title, start) for start, title in sorted(found.items())]


class Embedder:
    """all-MiniLM-L6-v2 as a sentence encoder: mean of the last hidden states over the tokens, unit length."""

    def __init__(self, max_length: int) -> None:
        self.tokenizer = load_tokenizer(minilm_folder())
        self.model = AutoModel.from_pretrained(minilm_folder()).eval()
        self.max_length = max_length

    @torch.no_grad()
    def __call__(self, texts: list[str]) -> torch.Tensor:
        batch = self.tokenizer(texts, truncation=True, max_length=self.max_length, padding=True, return_tensors="pt")
        hidden = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def probe(rows, reaches: list[int], embed: Embedder) -> dict:
    """Exact match (%) of the nearest heading at each reach over `rows`, the chance of a random heading (%) and the
    median number of headings per context."""
    hits, counts = dict.fromkeys(reaches, 0), []
    for row in rows:
        context, answer = row["context"], row["answers"]["text"][0]
        found = headings(context, answer, row["answers"]["answer_start"][0])
        ends = [start for _, start in found[1:]] + [len(context)]
        quoted = embed([row["question"].split(': "', 1)[1].removesuffix('"?')])
        counts.append(len(found))
        for reach in reaches:
            shown = []
            for (title, start), end in zip(found, ends, strict=True):
                body = embed.tokenizer(context[start + len(title):end], add_special_tokens=False)["input_ids"][:reach]
                shown.append(f"{title} {embed.tokenizer.decode(body)}" if reach else title)
            hits[reach] += found[int((embed(shown) @ quoted.T).argmax())][0] == answer
    return {"questions": len(counts), "headings": statistics.median(counts),
            "chance": 100 * statistics.mean(1 / c for c in counts),
            "exact_match": {reach: 100 * hit / len(counts) for reach, hit in hits.items()}}


def markdown(results: dict[str, dict], reaches: list[int]) -> str:
    shown = [f"title + {reach} tokens" if reach else "title only" for reach in reaches]
    lines = ["Exact match (%) of the heading nearest the quoted sentence by all-MiniLM-L6-v2's sentence embedding, "
             "each heading read as:", "",
             f"| split | questions | headings per context (median) | random heading | {' | '.join(shown)} |",
             "|---" * (4 + len(reaches)) + "|"]
    lines += [f"| {split} | {r['questions']} | {r['headings']:g} | {r['chance']:.1f} | "
              + " | ".join(f"{r['exact_match'][reach]:.1f}" for reach in reaches) + " |" for split, r in results.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--splits", nargs="+", default=["test"], help="far_qa splits: train, validation, test")
    parser.add_argument("--reaches", type=int, nargs="+", default=[0, 128, 256],
                        help="tokens of each heading's section read with its title (0: the title alone)")
    parser.add_argument("--markdown", type=Path, help="also write the table to this file")
    args = parser.parse_args(argv)
    splits = training_data.EMBEDDED_TASKS["far_qa"][1]()
    bad = sorted(set(args.splits) - set(splits)) or [r for r in args.reaches if r < 0]
    if bad:
        print(f"far_qa_probe: no split or reach {bad}: give splits of {sorted(splits)} and reaches of 0 or more",
              file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    embed = Embedder(max_length=max(args.reaches) + MAX_TITLE_WORDS * 4)
    table = markdown({split: probe(splits[split], args.reaches, embed) for split in args.splits}, args.reaches)
    if args.markdown:
        args.markdown.write_text(table)
    print(table, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
