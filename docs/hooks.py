"""MkDocs hook: docs show commands and code taken from the source files, so they cannot drift.

Directives, each alone on a line of a docs page:
    <!-- usage: cleanrl/ppo.py -->             the "Run:" commands of the script's docstring, as a bash block
    <!-- code: cleanrl/ppo.py:compute_gae -->  the source of a top-level function or class, as a python block
Inline, anywhere in a line:
    <!-- value: cleanrl/sac_continuous_action.py:HIDDEN -->  the value of a top-level constant (NAME = literal)
A directive may be indented (inside a list item); the block it becomes gets the same indentation.
Shell files (benchmark/*.sh) are included with pymdownx.snippets: --8<-- "benchmark/ppo.sh".
The same functions serve tests/test_docs.py, which runs the commands the docs show.

Links to repository files outside docs/ (README.md's script table links cleanrl/ppo.py, which the home page
includes) have no page on the site. With `repo_url` set in mkdocs.yml they are rewritten to the file on the
repository host, after the snippets are included, and a script's name in code in a table row (`ppo.py` in an
algorithm page's table of variants) becomes a link to its source there; without it (the default until the
project has a public home) the link becomes its text, so no link points at another project's repository. A link
that resolves to neither a docs file nor a repository file is left alone, so `mkdocs build --strict` still fails
on it.
"""

import ast
import posixpath
import re
from pathlib import Path

from markdown import Extension
from markdown.preprocessors import Preprocessor

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BRANCH = "main"  # the branch repository links point to
DIRECTIVE = re.compile(
    r"^(?P<indent>[ \t]*)<!-- (?P<kind>usage|code): (?P<path>[\w./-]+)(?::(?P<name>\w+))? -->$", re.MULTILINE
)
VALUE = re.compile(r"<!-- value: (?P<path>[\w./-]+):(?P<name>\w+) -->")
LINK = re.compile(r"(?P<head>\]\()(?P<target>[^)\s#]+)(?P<tail>(?:#[^)\s]*)?\))")


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


def value_of(path: str, name: str) -> str:
    """The value of the top-level constant `name = <literal>` of a source file, as the page shows it."""
    for node in ast.parse((ROOT / path).read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise ValueError(f"{path}: no top-level constant named {name!r}")


def expand(markdown: str) -> str:
    def replace(m: re.Match) -> str:
        if m["kind"] == "usage":
            block = "```bash\n" + "\n".join(usage_commands(m["path"])) + "\n```"
        elif not m["name"]:
            raise ValueError(f"code directive needs a name: {m[0].strip()}")
        else:
            block = f"```python\n# {m['path']}\n{code_of(m['path'], m['name'])}\n```"
        return "\n".join(m["indent"] + line if line else line for line in block.splitlines())

    markdown = DIRECTIVE.sub(replace, markdown)
    return VALUE.sub(lambda m: value_of(m["path"], m["name"]), markdown)


def repository_link(target: str, page_src: str) -> str | None:
    """The repository path a relative link points to when it is a repository file outside docs/, else None.

    Tried relative to the page (`../../cleanrl/ppo.py` from docs/rl-algorithms/) and, for text included from
    README.md, relative to the repository root (`cleanrl/ppo.py`)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("/"):
        return None
    page_dir = posixpath.dirname(posixpath.join("docs", page_src))
    for candidate in (posixpath.normpath(posixpath.join(page_dir, target)), posixpath.normpath(target)):
        if candidate.startswith("docs/") or candidate.startswith(".."):
            continue
        if (ROOT / candidate).exists():
            return candidate
    return None


UNLINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)\s#]+)(?:#[^)\s]*)?\)")


# A script's name in a table (`ppo.py`, `cleanrl/ppo.py`, `benchmark/report.py`), not already a link's text
SCRIPT_NAME = re.compile(r"(?<!\[)`(?P<name>(?:(?:cleanrl|benchmark|cloud)/)?\w+\.(?:py|sh))`(?!\])")


def link_script_names(markdown: str, repo_url: str) -> str:
    """In table rows, the name of a repository script in code becomes a link to its source at repo_url (a bare
    name is looked for in cleanrl/); other code is left as it is."""

    def replace(m: re.Match) -> str:
        name = m["name"]
        path = name if "/" in name else f"cleanrl/{name}"
        if not (ROOT / path).is_file():
            return m[0]
        return f"[`{name}`]({repo_url.rstrip('/')}/blob/{BRANCH}/{path})"

    return "\n".join(SCRIPT_NAME.sub(replace, line) if line.lstrip().startswith("|") else line
                     for line in markdown.split("\n"))


def rewrite_repository_links(markdown: str, page_src: str, repo_url: str | None) -> str:
    """Links to repository files point at repo_url, and script names in tables link to their source there;
    without repo_url (until the project has a public home) links to repository files become their text."""
    if not repo_url:

        def unlink(m: re.Match) -> str:
            if (DOCS / posixpath.dirname(page_src) / m["target"]).exists() or repository_link(m["target"], page_src) is None:
                return m[0]
            return m["text"]

        return UNLINK.sub(unlink, markdown)

    def replace(m: re.Match) -> str:
        if (DOCS / posixpath.dirname(page_src) / m["target"]).exists():
            return m[0]  # a docs file: MkDocs turns it into a page link
        path = repository_link(m["target"], page_src)
        if path is None:
            return m[0]
        return f"{m['head']}{repo_url.rstrip('/')}/blob/{BRANCH}/{path}{m['tail']}"

    return link_script_names(LINK.sub(replace, markdown), repo_url)


class _RepositoryLinks(Preprocessor):
    """Runs after pymdownx.snippets (priority 32), so included README text is rewritten too."""

    def __init__(self, md, state: dict):
        super().__init__(md)
        self.state = state

    def run(self, lines: list[str]) -> list[str]:
        if self.state.get("page") is None:
            return lines
        return rewrite_repository_links("\n".join(lines), self.state["page"], self.state["repo_url"]).split("\n")


class _RepositoryLinksExtension(Extension):
    def __init__(self, state: dict):
        super().__init__()
        self.state = state

    def extendMarkdown(self, md):
        md.preprocessors.register(_RepositoryLinks(md, self.state), "repository_links", 20)


_STATE: dict = {}  # the page being rendered; MkDocs renders pages one at a time


def on_config(config):
    _STATE["repo_url"] = config.repo_url
    config.markdown_extensions.append(_RepositoryLinksExtension(_STATE))
    return config


def on_page_markdown(markdown, page, config, files):
    _STATE["page"] = page.file.src_uri
    return expand(markdown)


# Inline code keeps its words whole: a browser may break a line after a hyphen, a slash or a dot, so on a narrow
# screen `--resume` could show as `--` / `resume`. Each word of inline code (not of code blocks, which wrap as they
# must) goes into a span that the line breaks around, not inside (docs/assets/extra.css, .nobreak); a word wider
# than the whole column still breaks inside, in its own box. In a table on a phone only a word longer than
# LONG_WORD characters (a path, an ARN) may break inside, so that short ones (flags, env ids) stay whole and the
# table still fits.
LONG_WORD = 20
CODE_OR_PRE = re.compile(r"(?P<pre><pre\b.*?</pre>)|<code>(?P<code>[^<]*)</code>", re.DOTALL)


def keep_words_whole(html: str) -> str:
    def replace(m: re.Match) -> str:
        if m["pre"]:
            return m["pre"]
        words = re.split(r"(\s+)", m["code"])
        return "<code>" + "".join(w if not w or w.isspace() else
                                  f'<span class="nobreak{" long" if len(w) > LONG_WORD else ""}">{w}</span>'
                                  for w in words) + "</code>"

    return CODE_OR_PRE.sub(replace, html)


def on_page_content(html, page, config, files):
    return keep_words_whole(html)
