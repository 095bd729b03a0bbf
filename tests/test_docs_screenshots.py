"""The site as a reader sees it, in headless Chromium (scripts/docs_screenshots.py): on the home, decision, quality
and API pages, at a laptop width and a narrow one, no table is clipped and no name wraps mid-word. Slow (a site
build and a browser): `scripts/test.sh --slow tests/test_docs_screenshots.py`."""

from __future__ import annotations

import pytest

from tests.script_loader import load_script


@pytest.fixture
def screenshots():
    """scripts/docs_screenshots.py, with the Chromium it drives as `screenshots.browser`."""
    pytest.importorskip("playwright", reason="the dev extra installs playwright, which drives the system Chromium")
    module = load_script("docs_screenshots")
    module.browser = module.find_browser()
    if module.browser is None:
        pytest.skip(f"no Chromium ({', '.join(module.BROWSERS)}); apt-get install chromium")
    return module


@pytest.mark.slow
def test_pages_show_no_clipped_table_and_no_name_broken_mid_word(screenshots, tmp_path):
    pytest.importorskip("mkdocstrings_handlers.python", reason="the dev extra installs the documentation tools")
    (tmp_path / "build").mkdir()
    site = tmp_path / "build" / "site"
    screenshots.build_site(site)
    problems = screenshots.check_pages(site, screenshots.default_pages(), list(screenshots.WIDTHS),
                                       tmp_path / "screenshots", screenshots.browser)
    assert not problems, "\n".join(problems)


def test_the_page_check_finds_a_clipped_table_and_a_name_broken_mid_word(screenshots, tmp_path):
    """The check itself, on a page made to fail it: a table in a box that does not scroll, a name in a narrow cell."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text(
        '<article><div style="width: 200px; overflow: hidden"><table><tr><th>family</th><th>row</th></tr>'
        '<tr><td>hfe_bigbird</td><td style="white-space: nowrap">' + "wide " * 50 + "</td></tr></table></div>"
        '<table><tr><td style="width: 150px"><code style="word-break: break-all">dense, then hfe_longformer</code>'
        "</td></tr></table></article>"
    )
    problems = screenshots.check_pages(tmp_path / "site", ["index.md"], [1280], tmp_path / "shots",
                                       screenshots.browser)
    assert any("does not scroll: clipped" in problem for problem in problems), problems
    assert any('"hfe_longformer" wraps mid-word' in problem for problem in problems), problems
