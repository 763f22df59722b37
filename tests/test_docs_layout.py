"""The built docs as a reader sees them: every page in a real headless Chromium at 1280 px, where no table, code
block or display equation may be wider than the text column, and the site loads nothing from another host."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_docs import docs_build_env

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 1280

CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")
try:
    import selenium  # noqa: F401
except ImportError:
    selenium = None

needs_browser = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER and selenium),
    reason="optional dependency: Chromium, chromedriver (apt-get install chromium chromium-driver) and selenium",
)

# Elements that scroll sideways when their content is wider than they are: Material wraps each table in a
# scrollwrap, code blocks and KaTeX's display math scroll by themselves.
MEASURE = """
const wide = [];
for (const el of document.querySelectorAll(
    '.md-typeset__scrollwrap, .md-typeset pre > code, .md-typeset div.arithmatex, .md-typeset .katex-display')) {
  if (el.scrollWidth > el.clientWidth + 1) {
    const kind = el.matches('.md-typeset__scrollwrap') ? 'table' : el.matches('code') ? 'code block' : 'equation';
    const text = Array.from(el.innerText.replace(/\\s+/g, ' ').trim()).slice(0, 60).join('');
    wide.push(`${kind} ${el.scrollWidth} px in ${el.clientWidth} px: ${text}`);
  }
}
const page = document.documentElement;
if (page.scrollWidth > window.innerWidth) wide.push(`page ${page.scrollWidth} px in ${window.innerWidth} px`);
return wide;
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, env=docs_build_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                 f"--window-size={WIDTH},1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    yield driver
    driver.quit()


def pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("index.html") if p.parent.name != "404")


@needs_browser
def test_every_table_code_block_and_equation_fits_the_column_at_1280_px(site, browser):
    too_wide = {}
    seen = 0
    for page in pages(site):
        browser.get(page.as_uri())
        assert browser.execute_script("return window.innerWidth") == WIDTH
        seen += browser.execute_script("return document.querySelectorAll('.md-typeset__scrollwrap').length")
        wide = browser.execute_script(MEASURE)
        if wide:
            too_wide["home" if page.parent == site else page.parent.relative_to(site).as_posix()] = wide
    assert seen > 20, "the measure found no tables: the theme's markup changed, update MEASURE"
    assert not too_wide, "wider than the text column at 1280 px:\n" + "\n".join(
        f"{page}: {item}" for page, items in too_wide.items() for item in items)


@needs_browser
def test_the_measure_sees_a_table_that_is_too_wide(site, browser, tmp_path):
    """The check above can fail: a page with a 40-column table and a long code line is reported."""
    page = next(p for p in pages(site) if p.parent.name == "speed")
    html = page.read_text()
    row = "|".join(f"column_{i}" for i in range(40))
    wide = f"<table><tr><td>{row.replace('|', '</td><td>')}</td></tr></table><pre><code>{'x' * 400}</code></pre>"
    html = html.replace('<h1 id="', f'<div class="md-typeset__scrollwrap"><div class="md-typeset__table">{wide}'
                        '</div></div><h1 id="', 1)
    tampered = page.parent / "tampered.html"
    tampered.write_text(html)
    try:
        browser.get(tampered.as_uri())
        wide = browser.execute_script(MEASURE)
    finally:
        tampered.unlink()
    assert any(w.startswith("table ") for w in wide), wide


def test_the_site_loads_nothing_from_other_hosts(site):
    """Fonts, scripts and styles come with the site (an offline reader sees the same page)."""
    remote = {}
    for file in sorted(site.rglob("*")):
        if file.suffix not in (".html", ".css", ".js"):
            continue
        text = file.read_text(errors="replace")
        found = re.findall(r"""<(?:link|script|img)\b[^>]*\b(?:href|src)=["']((?:https?:)?//[^"']+)""", text)
        if file.suffix == ".css":
            found += re.findall(r"""@import\s+(?:url\()?["']?((?:https?:)?//[^"')]+)""", text)
        found = [u for u in found if not u.startswith(("https://creativecommons", "http://www.w3.org"))]
        if found:
            remote[str(file.relative_to(site))] = found
    assert not remote, remote


def test_the_articles_install_page_is_served(site):
    """The CleanRL articles send users to get-started/installation.md."""
    assert (ROOT / "docs" / "get-started" / "installation.md").is_file()
    page = (site / "get-started" / "installation" / "index.html").read_text()
    assert "requirements/install.py" in page and "requirements/requirements.txt" in page
