"""MkDocs hook: a page's table of contents lists no heading title twice.

A page that includes several measured tables (docs/measured/) gets their headings too, one per length ("1024
tokens", ...) under each of its own sections; listed in the table of contents they read as the same entries
again and again. Every heading whose title occurs more than once on the page is left out of the table of
contents (its children move up to its place); the headings and their anchors stay on the page.
"""

from __future__ import annotations

from collections import Counter


def titles(items) -> list[str]:
    return [title for item in items for title in (item.title, *titles(item.children))]


def unique(items, repeated: set[str]) -> list:
    kept = []
    for item in items:
        item.children = unique(item.children, repeated)
        kept += item.children if item.title in repeated else [item]
    return kept


def on_page_content(html: str, page, config, files) -> str:
    counts = Counter(titles(page.toc.items))
    page.toc.items = unique(page.toc.items, {title for title, count in counts.items() if count > 1})
    return html
