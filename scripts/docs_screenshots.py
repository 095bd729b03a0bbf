#!/usr/bin/env python3
"""Screenshots of the documentation site in headless Chromium, and a check of what a reader would see as broken.

Builds the site (`mkdocs build --strict` into a temporary folder), serves it on localhost, loads each page at a
laptop width and a narrow one, saves a full-page PNG of each to `--output_dir`, and exits 1 with one line per
problem:

- a clipped table: part of it outside its visible box, unless the box scrolls and says so (the "scroll" hint
  that docs/javascripts/tables.js puts above a table wider than the page);
- a name that wraps mid-word although it would fit on a line of its own (a model, class or field name broken
  in two; a name longer than the whole line may break). A name is a run of letters, digits and underscores.

    python scripts/docs_screenshots.py                                  # the default pages, into docs_screenshots/
    python scripts/docs_screenshots.py --pages index.md api/longformer.md --widths 1280

Needs Chromium (`apt-get install chromium`) and the `playwright` package (the dev extra), which drives that
Chromium: no browser download. tests/test_docs_screenshots.py runs it (a slow test).
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The home page, the decision page (whichever of its names exists), the quality page and one API page.
DECISION_PAGES = ("decide.md", "guides/which_family.md")
DEFAULT_PAGES = ("index.md", "quality.md", "api/index.md", "api/longformer.md")
WIDTHS = (1280, 600)  # a laptop; a narrow window (the site's navigation folds away below 960 px)
BROWSERS = ("chromium", "chromium-browser", "google-chrome")

# Run in the page: the problems a reader sees, one string each. A table's scroll box is Material's
# `.md-typeset__scrollwrap`; a word is a run of letters, digits and underscores (a line may break at a space, a
# hyphen or the dot of a dotted path, never inside `hfe_longformer`).
CHECK_PAGE = """() => {
  const problems = [];
  const article = document.querySelector("article") || document.body;
  for (const table of article.querySelectorAll("table")) {
    const box = table.closest(".md-typeset__scrollwrap") || table.parentElement;
    const scrolls = ["auto", "scroll"].includes(getComputedStyle(box).overflowX);
    const said = box.previousElementSibling?.classList.contains("hfe-scroll-hint") ?? false;
    const hidden = box.scrollWidth - box.clientWidth - parseFloat(getComputedStyle(table.parentElement).paddingRight);
    if (hidden > 1 && !(scrolls && said)) {
      const head = [...table.querySelectorAll("th")].map(th => th.textContent.trim()).slice(0, 3).join(" | ");
      problems.push(`table [${head}] is ${table.offsetWidth} px wide in a ${box.clientWidth} px box that `
                    + (scrolls ? "scrolls without saying so" : "does not scroll: clipped"));
    }
  }
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT, {
    acceptNode: node => node.parentElement.closest("pre, .headerlink, script, style")
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT,
  });
  const seen = new Set();
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const block = node.parentElement.closest("td, th, li, p, h1, h2, h3, h4, h5, h6, div") || article;
    const line = block.clientWidth;
    for (const match of node.textContent.matchAll(/[\\p{L}\\p{N}_]+/gu)) {
      const range = document.createRange();
      range.setStart(node, match.index);
      range.setEnd(node, match.index + match[0].length);
      const rects = [...range.getClientRects()].filter(rect => rect.width > 0);
      const tops = new Set(rects.map(rect => Math.round(rect.top)));
      const width = rects.reduce((sum, rect) => sum + rect.width, 0);
      if (tops.size > 1 && width <= line && !seen.has(match[0])) {
        seen.add(match[0]);
        problems.push(`"${match[0]}" wraps mid-word (in a ${line} px line)`);
      }
    }
  }
  return problems;
}"""


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per file served
        pass


def build_site(site: Path) -> None:
    """`mkdocs build --strict` into `site`, run from its parent (mkdocs-jupyter writes a cache where it runs)."""
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(site)],
        cwd=site.parent, capture_output=True, text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": os.pathsep.join(filter(None, [
            str(ROOT), os.environ.get("PYTHONPATH")]))},
    )
    if result.returncode:
        sys.exit(f"mkdocs build --strict failed:\n{result.stdout[-3000:]}{result.stderr[-3000:]}")


def page_url(page: str) -> str:
    """The site path of a docs page: `api/longformer.md` -> `api/longformer/`, `index.md` -> ``."""
    stem = page.removesuffix(".md")
    return "" if stem == "index" else stem.removesuffix("/index").removesuffix("index") + "/"


def default_pages() -> list[str]:
    decision = [page for page in DECISION_PAGES if (ROOT / "docs" / page).is_file()][:1]
    return [DEFAULT_PAGES[0], *decision, *DEFAULT_PAGES[1:]]


def find_browser() -> str | None:
    return next(filter(None, map(shutil.which, BROWSERS)), None)


def check_pages(site: Path, pages: list[str], widths: list[int], output_dir: Path, browser: str) -> list[str]:
    """Screenshot each page at each width into `output_dir`; the problems found, one line each."""
    from playwright.sync_api import sync_playwright

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    output_dir.mkdir(parents=True, exist_ok=True)
    problems = []
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=browser, args=["--no-sandbox"])
            for page_name in pages:
                for width in widths:
                    page = chromium.new_page(viewport={"width": width, "height": 900})
                    page.goto(f"http://127.0.0.1:{server.server_port}/{page_url(page_name)}", wait_until="load")
                    page.wait_for_timeout(300)  # the scroll hints are placed once the page has laid out
                    shot = output_dir / f"{page_name.removesuffix('.md').replace('/', '_')}-{width}.png"
                    page.screenshot(path=str(shot), full_page=True)
                    problems += [f"{page_name} at {width} px: {problem}" for problem in page.evaluate(CHECK_PAGE)]
                    page.close()
            chromium.close()
    finally:
        server.shutdown()
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", nargs="+", help="docs pages (paths under docs/); default: "
                        "the home, decision, quality and API overview and Longformer-style pages")
    parser.add_argument("--widths", nargs="+", type=int, default=list(WIDTHS), help="window widths in px")
    parser.add_argument("--output_dir", type=Path, default=ROOT / "docs_screenshots", help="where the PNGs go")
    parser.add_argument("--site_dir", type=Path, help="a site already built there (default: build one)")
    args = parser.parse_args(argv)
    pages = args.pages or default_pages()
    missing = [page for page in pages if not (ROOT / "docs" / page).is_file()]
    if missing:
        sys.exit(f"no such docs page: {', '.join(missing)}")
    browser = find_browser()
    if browser is None:
        sys.exit(f"no Chromium found (looked for {', '.join(BROWSERS)}): apt-get install chromium")
    with tempfile.TemporaryDirectory() as tmp:
        site = args.site_dir
        if site is None:
            site = Path(tmp) / "site"
            build_site(site)
        problems = check_pages(site, pages, args.widths, args.output_dir, browser)
    for problem in problems:
        print(problem)
    print(f"{len(pages)} pages at {', '.join(map(str, args.widths))} px: {len(problems)} problems; "
          f"screenshots in {args.output_dir}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
