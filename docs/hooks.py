"""MkDocs hook: docs show commands and code taken from the source files, so they cannot drift.

Directives, each alone on a line of a docs page:
    <!-- usage: cleanrl/ppo.py -->             the "Run:" commands of the script's docstring, as a bash block
    <!-- code: cleanrl/ppo.py:compute_gae -->  the source of a top-level function or class, as a python block
Shell files (benchmark/*.sh) are included with pymdownx.snippets: --8<-- "benchmark/ppo.sh".
The same functions serve tests/test_docs.py, which runs the commands the docs show.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIRECTIVE = re.compile(r"^<!-- (?P<kind>usage|code): (?P<path>[\w./-]+)(?::(?P<name>\w+))? -->$", re.MULTILINE)


def usage_commands(path: str) -> list[str]:
    """The indented command lines under "Run:" in a script's module docstring."""
    doc = ast.get_docstring(ast.parse((ROOT / path).read_text())) or ""
    lines = doc.splitlines()
    if "Run:" not in lines:
        raise ValueError(f"{path}: module docstring has no 'Run:' section")
    commands = []
    for line in lines[lines.index("Run:") + 1 :]:
        if not line.startswith("    "):
            break
        commands.append(line.strip())
    if not commands:
        raise ValueError(f"{path}: the 'Run:' section of the docstring is empty")
    return commands


def code_of(path: str, name: str) -> str:
    source = (ROOT / path).read_text()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return ast.get_source_segment(source, node)
    raise ValueError(f"{path}: no top-level function or class named {name!r}")


def expand(markdown: str) -> str:
    def replace(m: re.Match) -> str:
        if m["kind"] == "usage":
            return "```bash\n" + "\n".join(usage_commands(m["path"])) + "\n```"
        if not m["name"]:
            raise ValueError(f"code directive needs a name: {m[0]}")
        return f"```python\n# {m['path']}\n{code_of(m['path'], m['name'])}\n```"

    return DIRECTIVE.sub(replace, markdown)


def on_page_markdown(markdown, page, config, files):
    return expand(markdown)
