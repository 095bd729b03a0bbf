"""The held-out task: "what does option X do?" over Debian manual pages, a corpus no recipe choice reads.

Called by ``scripts/build_data.py``, which fetches the packages of ``MAN_PACKAGES``, writes the files and records
them in ``manifest.json`` and ``LICENSES.md``.  ``long_qa`` and ``far_qa`` come from the kernel documentation;
this task comes from the manual pages of command-line tools, so its text, its vocabulary and its layout (option
lists rather than headed sections) are new to every setting chosen on them.  ``bench-quality`` reports it apart,
and no recipe choice reads its scores (docs/quality.md).

Each page of sections 1 and 8 is rendered to plain text by ``groff -mandoc`` (the formatter ``man`` uses) and
read back by its layout: section headings at the margin, an option's tag (``-a, --all``) on its own line or
before a gap, its description indented below.  The context is the page's first ``QA_MAX_CONTEXT_TOKENS`` tokens
of all-MiniLM-L6-v2's tokenizer, cut at a paragraph boundary, every heading, tag and description a paragraph of
its own; pages shorter than ``QA_MIN_CONTEXT_TOKENS`` tokens are left out.  A question asks
``What does the option "--all" of ls do?`` (the tag's long spelling where it has one); its answer is the first
sentence of the description.  The option and the sentence each occur once as such in the context; up to
``QUESTIONS_PER_PAGE`` per page, at most ``MAX_EARLY_QUESTIONS`` of them within the first 512 tokens, and at most
``MAX_PAGES_PER_PACKAGE`` pages per package, so that no one tool's style dominates.  Pages whose text repeats another's are read once, and an answer
asked on two pages (``--help``) on neither.  Pages, not questions, are
split: test first, then validation, until each holds ``HELD_OUT_QUESTIONS``; the rest train.
"""

from __future__ import annotations

import gzip
import random
import re
import subprocess
from collections import Counter
from pathlib import Path

from build_long_tasks import (
    EVIDENCE_TOKEN,
    QA_MAX_CONTEXT_TOKENS,
    QA_MIN_CONTEXT_TOKENS,
    SENTENCE_END,
    count_tokens,
    cut_at_tokens,
    qa_record,
    qa_report,
    token_index,
)
from text_cleaning import SEED, Record

# Tools whose manual pages list options, across packaging styles (GNU help2man, util-linux, mdoc, hand-written).
MAN_PACKAGES = {
    "apt": "2.6.1", "bind9-dnsutils": "1:9.18.49-1~deb12u1", "binutils": "2.40-2", "btrfs-progs": "6.2-1+deb12u2",
    "coreutils": "9.1-1", "cpio": "2.13+dfsg-7.1", "cryptsetup-bin": "2:2.6.1-4~deb12u2",
    "curl": "7.88.1-10+deb12u15", "diffutils": "1:3.8-4", "dosfstools": "4.2-1", "dpkg": "1.21.23",
    "e2fsprogs": "1.47.0-2+b2", "ethtool": "1:6.1-1", "fdisk": "2.38.1-5+deb12u3", "ffmpeg": "7:5.1.9-0+deb12u1",
    "findutils": "4.9.0-4", "gawk": "1:5.2.1-2", "git-man": "1:2.39.5-0+deb12u3",
    "gnupg-utils": "2.2.40-1.1+deb12u2", "gpg": "2.2.40-1.1+deb12u2", "graphviz": "2.42.2-7+deb12u1",
    "grep": "3.8-5", "gzip": "1.12-1", "imagemagick-6.q16": "8:6.9.11.60+dfsg-1.6+deb12u11", "iproute2": "6.1.0-3",
    "iptables": "1.8.9-2", "iputils-ping": "3:20221126-1+deb12u1", "iw": "5.19-1", "jq": "1.6-2.1+deb12u2",
    "less": "590-2.1~deb12u2", "lsof": "4.95.0-1", "lvm2": "2.03.16-2", "make": "4.3-4.1", "man-db": "2.11.2-2",
    "mdadm": "4.2-5", "mount": "2.38.1-5+deb12u3", "nano": "7.2-1+deb12u1", "net-tools": "2.10-0.1+deb12u2",
    "netcat-openbsd": "1.219-1", "nftables": "1.0.6-2+deb12u2", "nmap": "7.93+dfsg1-1",
    "openssh-client": "1:9.2p1-2+deb12u10", "openssl": "3.0.20-1~deb12u2",
    "p7zip-full": "16.02+really26.01+dfsg-0+deb12u1", "pandoc": "2.17.1.1-2~deb12u1", "parted": "3.5-3",
    "procps": "2:4.0.2-3", "psmisc": "23.6-1", "rsync": "3.2.7-1+deb12u6", "screen": "4.9.0-4",
    "sed": "4.9-1+deb12u1", "socat": "1.7.4.4-2", "sox": "14.4.2+git20190427-3.5", "sqlite3": "3.40.1-2+deb12u2",
    "strace": "6.1-0.1", "systemd": "252.39-1~deb12u2", "tar": "1.34+dfsg-1.2+deb12u1", "tcpdump": "4.99.3-1",
    "tmux": "3.3a-3", "traceroute": "1:2.1.2-1", "unzip": "6.0-28", "util-linux": "2.38.1-5+deb12u3",
    "vim-runtime": "2:9.0.1378-2+deb12u2", "wget": "1.21.3-1+deb12u1", "wireless-tools": "30~pre9-14",
    "xfsprogs": "6.1.0-1", "xz-utils": "5.4.1-1+deb12u1", "zip": "3.0-13", "zstd": "1.5.4+dfsg2-5",
}
MAN_SECTIONS = ("man1", "man8")
QUESTIONS_PER_PAGE = 4
MAX_EARLY_QUESTIONS = 1
MAX_PAGES_PER_PACKAGE = 8
HELD_OUT_QUESTIONS = 100  # test, then validation; the rest of the pages train
ANSWER_WORDS = (3, 60)  # a description's first sentence shorter or longer than this is not asked for
OPTION = re.compile(r"--?[A-Za-z0-9][\w-]*")  # an option's spelling in a tag: -a, --all, -o (not its argument)
HEADING_INDENT = 7  # groff -man sets a section heading at 0 and a subsection's at 3, text and tags from 7
TAG_GAP = re.compile(r"^(-\S.*?)\s{2,}(\S.*)$")  # "-c     with -lt: sort by ...": a short tag, then its description


def render(page: Path) -> str | None:
    """The page as ``man`` shows it, as plain text, or None for a page that only includes another (``.so``)."""
    raw = page.read_bytes()
    raw = gzip.decompress(raw) if page.suffix == ".gz" else raw
    if raw.lstrip().startswith(b".so "):
        return None
    shown = subprocess.run(["groff", "-t", "-mandoc", "-Tutf8", "-P-cbou", "-rLL=200n", "-rHY=0"], input=raw,
                           capture_output=True, check=True).stdout.decode("utf-8", "replace")
    lines = shown.splitlines()
    return "\n".join(lines[1:-1])  # the running header and footer


def indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def paragraphs(shown: str) -> tuple[str, list[tuple[str, int]]]:
    """The page as paragraphs joined by blank lines, and each option tag with the offset of its description.

    Headings are paragraphs of their own.  A block (lines between blank lines) whose first line starts with ``-`` and either continues past a gap of
    spaces or has deeper-indented lines below is an option: its tag becomes a paragraph, its description the
    next one.  A tag alone before a deeper-indented block takes that block as its description.
    """
    blocks = []
    for block in (block.splitlines() for block in re.split(r"\n\s*\n", shown) if block.strip()):
        while len(block) > 1 and indent(block[0]) < min(HEADING_INDENT, indent(block[1])):  # a heading, then its text
            blocks.append(block[:1])
            block = block[1:]
        blocks.append(block)
    parts: list[tuple[str, str | None]] = []  # (paragraph, the tag it describes)
    pending = None  # a tag alone in its block, with its indent: the next block may be its description
    for block in blocks:
        first, rest = block[0], block[1:]
        head = first.strip()
        tag, pending = pending, None
        if tag is not None and indent(first) > tag[1] and not head.startswith("-"):
            parts.append((" ".join(block), tag[0]))
        elif head.startswith("-") and (gap := TAG_GAP.match(head)):
            parts += [(gap[1], None), (" ".join([gap[2], *rest]), gap[1])]
        elif head.startswith("-") and rest and indent(rest[0]) > indent(first):
            parts += [(head, None), (" ".join(rest), head)]
        elif head.startswith("-") and not rest:
            parts.append((head, None))
            pending = head, indent(first)
        else:
            parts.append((" ".join(block), None))
    text, tags = "", []
    for paragraph, tag in parts:
        paragraph = " ".join(paragraph.split())
        if not paragraph:
            continue
        text += "\n\n" * bool(text)
        if tag is not None:
            tags.append((" ".join(tag.split()), len(text)))
        text += paragraph
    return text, tags


def option_name(tag: str) -> str | None:
    """The spelling a question names: the tag's first long option (``--all``), else its first option (``-a``)."""
    options = OPTION.findall(tag.split("=")[0] if tag.startswith("--") else tag)
    return next((o for o in options if o.startswith("--")), options[0] if options else None)


def first_sentence(text: str, start: int) -> tuple[int, int]:
    """The span of the first sentence of the paragraph at ``start``."""
    end = text.find("\n\n", start)
    end = len(text) if end < 0 else end
    stop = SENTENCE_END.search(text, start, end)
    return start, stop.start() if stop else end


def page_questions(page: dict, tokenizer, rng: random.Random) -> list[Record]:
    """Up to ``QUESTIONS_PER_PAGE`` questions on the options of one page's context (see the module's text)."""
    text, command = page["text"], page["command"]
    token_at = token_index(tokenizer, text)
    names = [option_name(tag) for tag, _ in page["tags"]]
    candidates = []
    for (tag, start), name in zip(page["tags"], names, strict=True):
        if name is None or names.count(name) != 1 or start >= len(text):
            continue
        answer = first_sentence(text, start)
        sentence = text[answer[0]:answer[1]]
        if ANSWER_WORDS[0] <= len(sentence.split()) <= ANSWER_WORDS[1] and text.count(sentence) == 1:
            candidates.append((name, answer, start - len(tag) - 2))
    rng.shuffle(candidates)
    chosen, early = [], 0
    for name, answer, tag_start in candidates:
        is_early = token_at(answer[0]) < EVIDENCE_TOKEN
        if len(chosen) < QUESTIONS_PER_PAGE and (not is_early or early < MAX_EARLY_QUESTIONS):
            chosen.append((name, answer, tag_start))
            early += is_early
    chosen.sort(key=lambda question: question[1][0])
    return [qa_record(page, f'What does the option "{name}" of {command} do?', answer, tag_start, token_at, n)
            for n, (name, answer, tag_start) in enumerate(chosen)]


def read_pages(roots: dict[str, Path], tokenizer) -> list[dict]:
    """Every English section 1 and 8 page of each package (unpacked under ``roots[package]``) long enough to
    ask past token 512, cut to ``QA_MAX_CONTEXT_TOKENS``: path, package, command, text and option tags."""
    pages, seen = [], set()
    for package, root in sorted(roots.items()):
        for section in MAN_SECTIONS:
            for path in sorted((root / "usr/share/man" / section).glob("*")):
                if path.is_symlink() or not path.is_file() or (shown := render(path)) is None:
                    continue
                text, tags = paragraphs(shown)
                if text in seen or count_tokens(tokenizer, text) < QA_MIN_CONTEXT_TOKENS:
                    continue
                text = cut_at_tokens(text, tokenizer, QA_MAX_CONTEXT_TOKENS)
                seen.add(text)
                command = path.name.split(".")[0]
                pages.append({"path": f"{package}/{section}/{path.name}", "package": package, "command": command,
                              "text": text, "tags": [(tag, start) for tag, start in tags if start < len(text)]})
    return pages


def build_man_qa(roots: dict[str, Path]) -> tuple[dict[str, list[Record]], dict]:
    """The task's splits (split -> records) and its report, from the packages unpacked under ``roots``."""
    from transformers import AutoTokenizer

    from hf_efficient.training.long_context import minilm_folder

    tokenizer = AutoTokenizer.from_pretrained(minilm_folder())
    pages = read_pages(roots, tokenizer)
    asked = {page["path"]: page_questions(page, tokenizer, random.Random(f"{SEED}-man_qa-{page['path']}"))
             for page in pages}
    answers = Counter(r["answers"]["text"][0] for questions in asked.values() for r in questions)
    by_page = {}
    for page in pages:
        # an answer asked on two pages is boilerplate (--help, --version): a split could learn it from another
        questions = [r for r in asked[page["path"]] if answers[r["answers"]["text"][0]] == 1]
        if questions:
            by_page[page["path"]] = (page["package"], questions)
    rng = random.Random(f"{SEED}-man_qa")
    per_package: dict[str, list[str]] = {}
    for path in sorted(by_page):
        per_package.setdefault(by_page[path][0], []).append(path)
    kept = [path for paths in per_package.values() for path in rng.sample(paths, min(len(paths), MAX_PAGES_PER_PACKAGE))]
    rng.shuffle(kept)
    splits: dict[str, list[Record]] = {"test": [], "validation": [], "train": []}
    for path in kept:
        split = next(s for s in ("test", "validation", "train") if s == "train" or len(splits[s]) < HELD_OUT_QUESTIONS)
        splits[split] += by_page[path][1]
    splits = {split: splits[split] for split in ("train", "validation", "test")}
    report = qa_report(splits, tokenizer)
    for split, records in splits.items():
        report[split]["packages"] = len({r["path"].split("/")[0] for r in records})
    return splits, report
