"""The built docs as a reader sees them: every page in a real headless Chromium at 1280 px, where no table, code
block or display equation may be wider than the text column, and on a phone (390 px), where the page never scrolls
sideways, code blocks wrap, a table of up to three columns fits, what is still wider scrolls in its box and shows
that it does, inline code breaks only between its words and figures keep their text readable; and the site loads
nothing from another host."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_docs import docs_build_env

ROOT = Path(__file__).resolve().parent.parent
WIDTH = 1280
PHONE = 390  # CSS px: an iPhone 12 to 15's width

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


@pytest.fixture
def phone(browser):
    """The browser as a phone: 390 CSS px wide, a mobile viewport (Chromium's window cannot be that narrow)."""
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": PHONE, "height": 844, "deviceScaleFactor": 1, "mobile": True})
    yield browser
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


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


# On a phone: what is wider than its box, and whether it says it scrolls; tables by column count; figures by the
# scale they are drawn at; inline code by where its lines break (a break between two characters of one word, where
# the word would fit the column whole).
MEASURE_PHONE = """
const found = {wide: [], silent: [], table: [], figure: [], code: []};
const page = document.documentElement;
if (page.scrollWidth > window.innerWidth) found.wide.push(`page ${page.scrollWidth} px in ${window.innerWidth} px`);
const label = (el) => Array.from(el.innerText.replace(/\\s+/g, ' ').trim()).slice(0, 50).join('');
for (const el of document.querySelectorAll('.md-typeset pre > code')) {
  if (el.scrollWidth > el.clientWidth + 1) found.wide.push(`code block ${el.scrollWidth} px: ${label(el)}`);
}
for (const el of document.querySelectorAll(
    '.md-typeset__scrollwrap, .md-typeset div.arithmatex, .md-typeset p:has(> img)')) {
  if (el.scrollWidth <= el.clientWidth + 1) continue;
  const style = getComputedStyle(el);
  const hint = style.backgroundImage.includes('gradient') && style.backgroundAttachment.includes('local');
  if (!['auto', 'scroll'].includes(style.overflowX) || !hint) found.silent.push(`${el.scrollWidth} px: ${label(el)}`);
  const table = el.querySelector('table');
  if (table && table.rows.length && table.rows[0].cells.length <= 3)
    found.table.push(`${table.rows[0].cells.length} columns, ${el.scrollWidth} px in ${el.clientWidth} px: ${label(el)}`);
}
for (const img of document.querySelectorAll('.md-typeset img')) {
  if (img.naturalWidth && img.width / img.naturalWidth < 0.6)
    found.figure.push(`${img.getAttribute('src')} at ${(img.width / img.naturalWidth).toFixed(2)} of its size`);
}
const range = document.createRange();
for (const code of document.querySelectorAll('.md-typeset code')) {
  if (code.closest('pre') || code.getClientRects().length < 2) continue;
  const chars = [];
  const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) for (let i = 0; i < n.data.length; i++) chars.push([n, i]);
  const text = chars.map(([n, i]) => n.data[i]).join('');
  const rects = chars.map(([n, i]) => { range.setStart(n, i); range.setEnd(n, i + 1); return range.getClientRects()[0]; });
  const box = getComputedStyle(code.parentElement);  // the width a line of the parent's content has
  const column = code.parentElement.clientWidth - parseFloat(box.paddingLeft) - parseFloat(box.paddingRight);
  for (let k = 1; k < rects.length; k++) {
    const space = (c) => /\\s/.test(c);
    if (!rects[k] || !rects[k - 1] || rects[k].top < rects[k - 1].bottom - 2 || space(text[k]) || space(text[k - 1]))
      continue;
    let a = k, b = k, width = 0;
    while (a > 0 && !space(text[a - 1])) a--;
    while (b < text.length && !space(text[b])) b++;
    for (let j = a; j < b; j++) width += rects[j] ? rects[j].width : 0;
    if (width < column) found.code.push(`${text.slice(a, k)} / ${text.slice(k, b)}`);
  }
}
return found;
"""


@needs_browser
def test_on_a_phone_nothing_is_cut_off_unannounced_and_nothing_is_too_small(site, phone):
    problems, scrolling = {}, 0
    for page in pages(site):
        phone.get(page.as_uri())
        assert phone.execute_script("return window.innerWidth") == PHONE
        found = phone.execute_script(MEASURE_PHONE)
        scrolling += phone.execute_script(
            "return Array.from(document.querySelectorAll('.md-typeset__scrollwrap, .md-typeset div.arithmatex'))"
            ".filter(el => el.scrollWidth > el.clientWidth + 1).length")
        items = [f"{kind}: {item}" for kind, found_items in found.items() for item in found_items]
        if items:
            problems["home" if page.parent == site else page.parent.relative_to(site).as_posix()] = items
    assert scrolling > 5, "no table or equation scrolls at 390 px: the measure no longer sees them"
    assert not problems, f"at {PHONE} px (wide: wider than the screen; silent: scrolls without a hint; table: a table " \
        "of up to 3 columns that does not fit; figure: drawn too small; code: inline code broken inside a word):\n" + \
        "\n".join(f"{page}: {item}" for page, items in problems.items() for item in items)


@needs_browser
def test_the_phone_measure_sees_a_broken_word_a_silent_scroll_and_a_small_figure(site, phone, tmp_path):
    """The check above can fail: inline code broken after its hyphens, a table without the scroll hint, a
    figure squeezed to the column."""
    page = next(p for p in pages(site) if p.parent.name == "speed")
    html = page.read_text()
    words = " ".join(["--long-flag-name"] * 40)
    tampered_html = html.replace('<h1 id="', f'<p><code>{words}</code></p>'
                                 '<div class="md-typeset__scrollwrap" style="background: none">'
                                 '<div class="md-typeset__table"><table><tr>'
                                 + "".join(f"<td>column_{i}</td>" for i in range(40)) + '</tr></table></div></div>'
                                 '<p><img src="../benchmark/ppo/curves.svg" style="width: 100px; min-width: 0"></p>'
                                 '<h1 id="', 1)
    tampered = page.parent / "tampered.html"
    tampered.write_text(tampered_html)
    try:
        phone.get(tampered.as_uri())
        phone.execute_script("return new Promise(done => { const img = document.querySelector('img'); "
                             "img.complete ? done() : img.onload = done; })")
        found = phone.execute_script(MEASURE_PHONE)
    finally:
        tampered.unlink()
    assert found["code"] and all(" / " in item and "-" in item for item in found["code"]), found
    assert found["silent"] and found["figure"], found


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
