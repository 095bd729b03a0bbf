"""What both data builders share: the seed, the record type and the cleaning of reST into paragraphs of prose.

`build_data.py` (the kernel task and domain corpus) and `build_long_tasks.py` (the long tasks, which it runs)
both import it, so that neither imports the other back.
"""

from __future__ import annotations

import re

SEED = 1234
Record = dict[str, str]  # one JSON-lines record


def join_paragraphs(text: str) -> str:
    """Collapse whitespace inside paragraphs; keep blank-line separation."""
    paragraphs = (" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
    return "\n\n".join(p for p in paragraphs if p)


# Directives whose whole block is not prose: navigation, build machinery,
# media and code.
RST_DROP_BLOCK = {
    "code",
    "code-block",
    "contents",
    "figure",
    "image",
    "include",
    "index",
    "kernel-abi",
    "kernel-doc",
    "kernel-feat",
    "kernel-figure",
    "kernel-include",
    "kernel-render",
    "literalinclude",
    "raw",
    "tabularcolumns",
    "toctree",
}
RST_EXPLICIT = re.compile(r"^\s*\.\.(?:\s+(.*))?$")
RST_DIRECTIVE = re.compile(r"([\w:.+-]+)::")
RST_OPTION = re.compile(r"^\s*:[\w -]+:")
RST_FOOTNOTE = re.compile(r"\[[^\]]+\]\s")
RST_ROLE = re.compile(r":[\w.+-]+(?::[\w.+-]+)*:`([^`]*)`")
RST_LINK = re.compile(r"`([^`<]*?)\s*(?:<[^>`]*>)?`__?")
RST_TARGET_IN_ROLE = re.compile(r"\s*<[^>]*>$")
RST_LITERAL = re.compile(r"``([^`]+?)``")
RST_STRONG = re.compile(r"\*\*(\S(?:.*?\S)?)\*\*")
# Section adornments, transitions and table borders: no alphanumerics.
RST_RULE = re.compile(r"^[\s=\-~^*#+`:'\"._|]{3,}$")


def clean_rst(source: str) -> str:
    """Strip reStructuredText noise from a kernel document, keeping prose.

    Drops comments, labels, substitution definitions, literal (``::``) and
    code blocks, toctrees, kernel-doc/include/image directives, the marker and
    option lines of other directives (whose bodies, e.g. notes, are kept),
    section adornments and table borders; unwraps inline roles, links,
    ``literals`` and **strong** text.
    """
    kept = []
    skip_deeper_than: int | None = None  # dropping a block indented past this
    literal_after: int | None = None  # indent of a line that ended with "::"
    in_options = False
    for raw_line in source.splitlines():
        line = raw_line.rstrip()
        indent = len(line) - len(line.lstrip())
        if line and literal_after is not None:
            if indent > literal_after:
                skip_deeper_than = literal_after
            literal_after = None
        if skip_deeper_than is not None:
            if not line or indent > skip_deeper_than:
                continue
            skip_deeper_than = None
        if in_options and RST_OPTION.match(line):
            continue
        in_options = False
        match = RST_EXPLICIT.match(line)
        if match is None:
            if not RST_RULE.match(line):
                kept.append(line)
            if line.endswith("::"):
                literal_after = indent
            continue
        body = match.group(1) or ""
        directive = RST_DIRECTIVE.match(body)
        if RST_FOOTNOTE.match(body):
            kept.append(indent * " " + body)
        elif directive is None or directive.group(1) in RST_DROP_BLOCK:
            skip_deeper_than = indent
        else:
            in_options = True
    text = "\n".join(kept)
    text = RST_LITERAL.sub(r"\1", text)
    text = RST_ROLE.sub(lambda m: RST_TARGET_IN_ROLE.sub("", m.group(1)), text)
    text = RST_LINK.sub(r"\1", text)
    text = RST_STRONG.sub(r"\1", text)
    text = re.sub(r"[ \t]*:?::$", ":", text, flags=re.MULTILINE)
    text = re.sub(r"^:$", "", text, flags=re.MULTILINE)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()
