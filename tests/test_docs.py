"""The docs: the site builds strictly, every logged key is documented, and the commands shown work."""

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tyro

from docs.hooks import expand
from tests.helpers import ROOT, run_script

SCRIPTS = sorted((ROOT / "cleanrl").glob("*.py"))
KEY_CALL = re.compile(r"""add_scalar\(\s*(f?)(["'])(?P<key>[^"']+)\2""")


def docs_page(script: Path) -> Path:
    first = script.read_text().splitlines()[0]
    m = re.fullmatch(r"# docs: (docs/\S+\.md)", first)
    assert m, f"{script.name}: line 1 must be '# docs: docs/<page>.md', found {first!r}"
    return ROOT / m[1]


def logged_keys(script: Path) -> set[str]:
    keys = set()
    for m in KEY_CALL.finditer(script.read_text()):
        assert not m[1], f"{script.name}: TensorBoard key {m['key']!r} is an f-string; write keys literally so docs can be checked"
        keys.add(m["key"])
    return keys


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_logged_key_is_documented(script):
    page = docs_page(script)
    assert page.exists(), f"{script.name}: docs page {page.relative_to(ROOT)} is missing"
    text = page.read_text()
    keys = logged_keys(script)
    assert keys, f"{script.name}: no add_scalar call found"
    missing = sorted(k for k in keys if f"`{k}`" not in text)
    assert not missing, f"{page.relative_to(ROOT)} does not document {missing} written by {script.name}"


def test_mkdocs_build_strict(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "index.html").exists()


def shown_commands() -> list[tuple[str, str]]:
    """(page, command) for every `python cleanrl/...` or `torchrun ... cleanrl/...` line the docs show."""
    found = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = expand(page.read_text())
        # shell files included with pymdownx.snippets
        for inc in re.findall(r'^--8<-- "([^":]+\.sh)"$', text, re.MULTILINE):
            text += "\n```bash\n" + (ROOT / inc).read_text() + "\n```\n"
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                if re.match(r"^(python|torchrun)\b.*\bcleanrl/\w+\.py", line):
                    found.append((str(page.relative_to(ROOT)), line))
    return found


def split_command(command: str) -> tuple[str, list[str]]:
    words = shlex.split(command)
    i = next(i for i, w in enumerate(words) if re.fullmatch(r"cleanrl/\w+\.py", w))
    return Path(words[i]).name, words[i + 1 :]


def test_docs_show_commands():
    pages = {page for page, _ in shown_commands()}
    assert "docs/get-started.md" in pages


CHEAP_BUDGET = 4096  # a shown command with at most this many --total-timesteps is run for real


@pytest.mark.parametrize("page, command", shown_commands(), ids=lambda x: x if " " not in x else None)
def test_shown_command_works(page, command, tmp_path):
    """Cheap commands (--help, tiny budgets) run for real; every other one must parse with the script's CLI."""
    script, argv = split_command(command)
    if "--help" in argv:
        proc = run_script(script, "--help", cwd=tmp_path, timeout=120)
        assert "--env-id" in proc.stdout
        return
    args = tyro.cli(importlib.import_module(f"cleanrl.{script[:-3]}").Args, args=argv)
    if args.total_timesteps <= CHEAP_BUDGET and not command.startswith("torchrun"):
        run_script(script, *argv, cwd=tmp_path, timeout=600)
