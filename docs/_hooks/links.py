"""MkDocs hook: links from a page to repository files outside docs/ (e.g. `../scripts/build_data.py`).

They work on GitHub but are not part of the site. Each one is checked: a target that does not exist
in the repository is a warning (so `mkdocs build --strict` fails on it, as on any broken link); an
existing one is shown as its repository path in code font instead of a dead link.

A link is placed by its path as written, without following symbolic links: docs/notebooks links to
../notebooks, and `notebooks/01_quickstart.ipynb` from a page is a page of the site, kept as a link.

A notebook links the pages as `../docs/page.md` (which works in Jupyter and on GitHub); mkdocs-jupyter
renders notebooks itself, so those links are pointed at the pages' URLs here, and a missing page is a
warning too.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from mkdocs.utils import get_relative_url

log = logging.getLogger("mkdocs.hooks.links")
LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")
NOTEBOOK_LINK = re.compile(r'href="\.\./docs/(?P<page>[^"#]+\.md)(?P<anchor>#[^"]*)?"')


def on_page_markdown(markdown: str, page, config, files) -> str:
    docs_dir = Path(config["docs_dir"]).resolve()
    root = docs_dir.parent
    page_dir = (docs_dir / page.file.src_uri).parent

    def replace(match: re.Match) -> str:
        target = match["target"]
        if "://" in target or target.startswith(("mailto:", "/")):
            return match[0]
        resolved = Path(os.path.normpath(page_dir / target))  # not resolve(): docs/notebooks is a link
        if resolved.is_relative_to(docs_dir) or not resolved.is_relative_to(root):
            return match[0]  # a page of the site (mkdocs checks it) or outside the repository
        path = resolved.relative_to(root).as_posix()
        if not resolved.exists():
            log.warning("%s: link to %s, which does not exist in the repository", page.file.src_uri, path)
            return match[0]
        text = match["text"]
        return text if text.strip("`") == path else f"{text} (`{path}`)"

    return LINK.sub(replace, markdown)


def on_page_content(html: str, page, config, files) -> str:
    if not page.file.src_uri.endswith(".ipynb"):
        return html

    def replace(match: re.Match) -> str:
        target = files.get_file_from_path(match["page"])
        if target is None:
            log.warning("%s: link to docs/%s, which is not a page of the site", page.file.src_uri, match["page"])
            return match[0]
        return f'href="{get_relative_url(target.url, page.url)}{match["anchor"] or ""}"'

    return NOTEBOOK_LINK.sub(replace, html)
