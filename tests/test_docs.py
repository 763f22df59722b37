"""The docs: the site builds strictly, every logged key is documented, and the commands shown work."""

import ast
import contextlib
import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tyro

from docs.hooks import expand
from tests.helpers import ROOT, ReachedTheRun, run_in_process, run_script, script_env
from tests.scripts import SCRIPTS as REGISTRY

RUNTIME = ROOT / "cleanrl" / "runtime.py"  # the run lifecycle, whose Run methods log keys for the scripts
SCRIPTS = sorted(ROOT / "cleanrl" / name for name in REGISTRY)  # the scripts (tests/scripts.py), no companion module


def docs_page(script: Path) -> Path:
    first = script.read_text().splitlines()[0]
    m = re.fullmatch(r"# docs: (docs/\S+\.md)", first)
    assert m, f"{script.name}: line 1 must be '# docs: docs/<page>.md', found {first!r}"
    return ROOT / m[1]


def _dict_keys(tree: ast.AST, name: str, where: str) -> set[str]:
    """The string keys given to the dict `name` in a literal (`name = {"a/b": ...}`) or by `name["a/b"] = ...`."""
    keys, found = set(), False
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
                    found = True
                    for k in node.value.keys:
                        assert isinstance(k, ast.Constant) and isinstance(k.value, str), f"{where}: {name} has a non-literal key"
                        keys.add(k.value)
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and target.value.id == name:
                    assert isinstance(target.slice, ast.Constant), f"{where}: {name}[...] with a non-literal key"
                    keys.add(target.slice.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
            assert not (isinstance(node.func.value, ast.Name) and node.func.value.id == name), f"{where}: {name}.update(...) hides keys"
    assert found, f"{where}: no dict literal assigned to {name}"
    return keys


def logged_keys(script: Path) -> set[str]:
    """Every TensorBoard key the script writes: the literal first argument of each add_scalar call, or, for
    `for key, value in d.items(): writer.add_scalar(key, ...)`, the literal keys of the dict d. Anything else
    (f-strings, computed keys) fails, because then the docs could not be checked."""
    tree = ast.parse(script.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    keys = set()
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_scalar"):
            continue
        where = f"{script.name}:{call.lineno}"
        arg = call.args[0] if call.args else None
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            keys.add(arg.value)
            continue
        loop = parents.get(call)
        while loop is not None and not isinstance(loop, ast.For):
            loop = parents.get(loop)
        ok = (
            isinstance(arg, ast.Name) and loop is not None
            and isinstance(loop.target, ast.Tuple) and isinstance(loop.target.elts[0], ast.Name)
            and loop.target.elts[0].id == arg.id
            and isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Attribute)
            and loop.iter.func.attr == "items" and isinstance(loop.iter.func.value, ast.Name)
        )  # fmt: skip
        assert ok, f"{where}: write TensorBoard keys as string literals (or loop over a literal dict) so the docs can be checked"
        keys |= _dict_keys(tree, loop.iter.func.value.id, where)
    return keys


def run_method_keys() -> dict[str, set[str]]:
    """The keys each method of runtime.Run (and of its logging half, run_log.RunLog) writes, itself or through the
    Run methods it calls."""
    classes = [n for path, name in ((RUNTIME, "Run"), (RUNTIME.parent / "run_log.py", "RunLog"))
               for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef) and n.name == name]
    assert len(classes) == 2
    direct, calls = {}, {}
    for method in (m for run_class in classes for m in run_class.body):
        if isinstance(method, ast.FunctionDef):
            nodes = [n for n in ast.walk(method) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
            direct[method.name] = {n.args[0].value for n in nodes if n.func.attr == "add_scalar"
                                   and isinstance(n.args[0], ast.Constant)}
            calls[method.name] = {n.func.attr for n in nodes if isinstance(n.func.value, ast.Name)
                                  and n.func.value.id == "self"}
    def closure(name: str, seen: frozenset = frozenset()) -> set[str]:
        return direct[name].union(*(closure(c, seen | {name}) for c in calls[name] if c in direct and c not in seen))
    return {name: closure(name) for name in direct}


def script_keys(script: Path) -> set[str]:
    """What a script writes: its own add_scalar keys and those of the runtime.Run methods it calls (run.X(...))."""
    methods = run_method_keys()
    called = {n.func.attr for n in ast.walk(ast.parse(script.read_text())) if isinstance(n, ast.Call)
              and isinstance(n.func, ast.Attribute) and n.func.attr in methods}
    return logged_keys(script).union(*(methods[m] for m in called))


def logged_metrics_section(page: Path) -> str:
    """The text of the page's `## Logged metrics` section (up to the next `## ` heading)."""
    m = re.search(r"^## Logged metrics\n(.*?)(?=^## |\Z)", page.read_text(), re.MULTILINE | re.DOTALL)
    assert m, f"{page.relative_to(ROOT)} has no '## Logged metrics' section"
    return m[1]


def documented_keys(page: Path) -> set[str]:
    """The keys the page's Logged metrics section explains: bullets that start with `group/key`."""
    return set(re.findall(r"^\s*[-*] `(\w+/\w+)`", logged_metrics_section(page), re.MULTILINE))


def pages_of(script: Path) -> list[Path]:
    """The page its line 1 names, and every algorithm page that shows the script's usage."""
    pages = [docs_page(script)]
    directive = f"<!-- usage: cleanrl/{script.name} -->"
    pages += [p for p in sorted((ROOT / "docs" / "rl-algorithms").glob("*.md")) if directive in p.read_text() and p not in pages]
    return pages


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_logged_key_is_documented(script):
    keys = script_keys(script)
    assert keys, f"{script.name}: no add_scalar call found"
    for page in pages_of(script):
        assert page.exists(), f"{script.name}: docs page {page.relative_to(ROOT)} is missing"
        missing = sorted(keys - documented_keys(page))
        assert not missing, f"{page.relative_to(ROOT)} does not explain {missing} written by {script.name} (as '- `key`: meaning' under '## Logged metrics')"


def test_no_documented_key_is_stale():
    """A key a page explains must be written by one of the scripts the page documents."""
    written: dict[Path, set[str]] = {}
    for script in SCRIPTS:
        for page in pages_of(script):
            written.setdefault(page, set()).update(script_keys(script))
    assert written
    for page, keys in written.items():
        stale = sorted(documented_keys(page) - keys)
        assert not stale, f"{page.relative_to(ROOT)} explains {stale}, which none of its scripts writes"


def test_every_algorithm_page_documents_a_script():
    documented = {page for script in SCRIPTS for page in pages_of(script)}
    orphans = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs" / "rl-algorithms").glob("*.md")) if p not in documented]
    assert not orphans, f"{orphans} show no script's usage (<!-- usage: cleanrl/X.py -->) and no script's line 1 names them"


TEMPLATE = ["Overview", "Implemented variants", "Usage", "Logged metrics", "Implementation details", "Benchmark results"]


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "rl-algorithms").glob("*.md")), ids=lambda p: p.name)
def test_algorithm_page_follows_the_template(page):
    text = page.read_text()
    sections = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert sections == TEMPLATE, f"{page.name}: sections {sections}, expected {TEMPLATE}"
    overview = re.search(r"^## Overview\n(.*?)^## ", text, re.MULTILINE | re.DOTALL)[1]
    assert "$$" in overview and "](http" in overview, f"{page.name}: the overview needs the paper (a link) and a display equation"
    usage = re.search(r"^## Usage\n(.*?)^## ", text, re.MULTILINE | re.DOTALL)[1]
    assert "<!-- usage: cleanrl/" in usage, f"{page.name}: Usage must include the script's commands with <!-- usage: cleanrl/X.py -->"


def test_key_check_reads_literal_keys_only(tmp_path):
    script = tmp_path / "x.py"
    script.write_text('writer.add_scalar("charts/SPS", 1, 2)\nwriter.add_scalar(\n    "losses/a", 1, 2)\n')
    assert logged_keys(script) == {"charts/SPS", "losses/a"}
    # keys from a literal dict written in a loop are found, including one added by subscript
    script.write_text('d = {"losses/x": 1, "losses/y": 2}\nd["losses/z"] = 3\nfor k, v in d.items():\n    w.add_scalar(k, v, 2)\n')
    assert logged_keys(script) == {"losses/x", "losses/y", "losses/z"}
    for hidden in (
        'for k, v in d.items():\n    w.add_scalar(k, v, 2)\n',  # d is not a literal dict
        'w.add_scalar(f"losses/{name}", 1, 2)\n',
        'w.add_scalar(KEY, 1, 2)\n',
        'd = {"losses/x": 1}\nd.update(other)\nfor k, v in d.items():\n    w.add_scalar(k, v, 2)\n',
    ):
        script.write_text(hidden)
        with pytest.raises(AssertionError):
            logged_keys(script)


def test_mkdocs_build_strict(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=docs_build_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the build says only what concerns the site: Material's end-of-life notice, which docs/contributing.md answers
    # with a plan, is off under the variable the page gives
    assert "end of life" not in proc.stdout + proc.stderr, proc.stderr
    assert (tmp_path / "site" / "index.html").exists()
    raw = {}
    for html in sorted((tmp_path / "site").rglob("*.html")):
        text = raw_math_left(html.read_text())
        if text:
            raw[str(html.relative_to(tmp_path / "site"))] = text
    assert not raw, f"math that KaTeX will not render (a $$ block needs a blank line before it, and in a list item 4 spaces of indent; no bare | inside table math): {raw}"


def docs_build_env() -> dict:
    """The environment the docs are built in, as docs/contributing.md builds them (NO_MKDOCS_2_WARNING=1)."""
    command = re.search(r"^export (NO_MKDOCS_2_WARNING)=(\S+)", (ROOT / "docs" / "contributing.md").read_text(), re.M)
    assert command, "docs/contributing.md no longer sets NO_MKDOCS_2_WARNING before its mkdocs commands"
    return dict(os.environ, **{command[1]: command[2]})


def raw_math_left(html: str) -> str | None:
    """Text around the first `$`, `\\(` or `\\[` left outside code and outside arithmatex's math elements, or None."""
    text = re.sub(r"<(pre|code|script)\b[^>]*>.*?</\1>", "", html, flags=re.DOTALL)
    text = re.sub(r'<(span|div) class="arithmatex">.*?</\1>', "", text, flags=re.DOTALL)
    m = re.search(r"\$|\\\(|\\\[", text)
    return None if m is None else " ".join(text[max(0, m.start() - 60) : m.start() + 60].split())


def test_raw_math_check():
    assert raw_math_left('<p>a <span class="arithmatex">\\(x\\)</span> and <code>$@</code></p>') is None
    assert raw_math_left("<p>$$\ny = r\n$$</p>") is not None
    assert raw_math_left("<td>entropy $-</td>") is not None


# Values the docs write as names in commands to be filled in by the reader (torchrun --node-rank=R --master-addr=HOST).
PLACEHOLDERS = {"R": "0", "HOST": "127.0.0.1"}
PROJECT_FILE = re.compile(r"\b(?:cleanrl|benchmark)/\w+\.(?:py|sh)\b")
CHEAP_BUDGET = 4096  # a shown command with at most this many --total-timesteps is run for real


def command_lines(block: str) -> list[str]:
    """The commands of a shell block: continuations joined, comments dropped, `a && b` split."""
    commands = []
    for line in block.replace("\\\n", " ").splitlines():
        line = re.split(r"(?:^|\s)#", line, maxsplit=1)[0].strip()
        commands += [part.strip() for part in re.split(r"\s(?:&&|;)\s", line) if part.strip()]
    return commands


def shown_commands() -> list[tuple[str, str]]:
    """(where, command) for every command of the docs that calls a project file (cleanrl/*.py, benchmark/*).

    Taken from the shell blocks of every docs page and of README.md (after the usage directives and the benchmark/*.sh
    snippets are included), from inline code spans that start with python/torchrun/bash, and from every
    benchmark/*.sh whether a page includes it or not."""
    found = []
    pages = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]  # the README is the repository's front page
    sources = [(str(p.relative_to(ROOT)), expand(p.read_text())) for p in pages]
    sources += [(str(p.relative_to(ROOT)), f"```bash\n{p.read_text()}```\n") for p in sorted((ROOT / "benchmark").glob("*.sh"))]
    for where, text in sources:
        blocks = re.findall(r"^[ \t]*```(?:bash|sh|shell|console)\n(.*?)^[ \t]*```", text, re.DOTALL | re.MULTILINE)
        commands = [c for block in blocks for c in command_lines(block)]
        # inline code like `python cleanrl/ppo.py --env-id CartPole-v1 --total-timesteps 20480`
        without_blocks = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.DOTALL | re.MULTILINE)
        commands += [
            " ".join(span.split())
            for span in re.findall(r"`([^`]+)`", without_blocks)
            if re.match(r"^(?:[A-Z_]+=\S+\s+)*(?:python3?|torchrun|bash|docker run)\s", span.strip())
        ]
        found += [(where, c) for c in commands if PROJECT_FILE.search(c) and not c.startswith("--8<--")]
    return found


def relative_to_root(word: str) -> str:
    path = Path(word)
    return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else word


def parse_cli(what: str, parse, argv: list[str]):
    """Run a CLI parser; a parse error (tyro/argparse exit) becomes an assertion naming the command."""
    try:
        return parse(argv)
    except SystemExit as e:
        raise AssertionError(f"{what} rejects {shlex.join(argv)!r} (exit {e.code})") from None


def check_script_args(script: str, argv: list[str]):
    """Parse argv with the script's own tyro Args (None for --help, which is run instead)."""
    assert re.fullmatch(r"cleanrl/\w+\.py", script), f"{script}: not a cleanrl/<name>.py script"
    assert (ROOT / script).is_file(), f"{script} does not exist"
    if "--help" in argv:
        return None
    module = importlib.import_module(f"cleanrl.{Path(script).stem}")
    return parse_cli(script, lambda a: tyro.cli(module.Args, args=a), argv)


def check_torchrun(argv: list[str]) -> None:
    """torchrun's own flags parsed by torchrun's parser, the script's flags by the script's Args."""
    from torch.distributed.run import get_args_parser

    argv = [re.sub(r"=(\w+)$", lambda m: "=" + PLACEHOLDERS.get(m[1], m[1]), w) for w in argv]
    ns = parse_cli("torchrun", get_args_parser().parse_args, argv)
    check_script_args(relative_to_root(ns.training_script), list(ns.training_script_args))


def check_command(command: str) -> list[list[str]]:
    """Check a shown command against every CLI it calls, without running training.

    Returns the argv lists ([path, *args]) that are cheap to run for real: `--help`, and cleanrl scripts
    with --total-timesteps <= CHEAP_BUDGET. Raises AssertionError when a flag, a value or a file is wrong."""
    words = [w for w in shlex.split(command) if w != "$@"]  # "$@" of the benchmark/*.sh: the user's extra flags
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words.pop(0)  # environment assignments such as CUDA_VISIBLE_DEVICES=0,1
    assert words, f"empty command: {command!r}"
    if words[:2] == ["docker", "run"]:  # docker run [options] IMAGE COMMAND: check COMMAND
        starts = [i for i, w in enumerate(words) if w in ("python", "python3", "torchrun")]
        assert starts, f"{command}: no python or torchrun command after docker run"
        words = words[starts[0] :]
    prog, rest = words[0], [relative_to_root(w) for w in words[1:]]
    if prog in ("python", "python3") and rest[:2] == ["-m", "torch.distributed.run"]:
        prog, rest = "torchrun", rest[2:]
    if prog == "torchrun":
        check_torchrun(rest)
        return []  # launches of several processes are parsed, not run
    if prog == "bash":
        assert (ROOT / rest[0]).is_file(), f"{command}: {rest[0]} does not exist"
        return []  # its commands are checked as a benchmark/*.sh source
    assert prog in ("python", "python3"), f"{command}: unknown program {prog!r}"
    path, argv = rest[0], rest[1:]
    assert (ROOT / path).is_file(), f"{command}: {path} does not exist"
    if path.startswith("cleanrl/"):
        args = check_script_args(path, argv)
        return [[path, *argv]] if args is None or args.total_timesteps <= CHEAP_BUDGET else []
    if path == "benchmark/run.py":
        from benchmark import run as runner

        if "--help" in argv:
            return [[path, *argv]]
        args, training = parse_cli(path, runner.parse, argv)
        with contextlib.chdir(ROOT):  # the runner checks the command's files relative to the working directory
            _, runs = runner.plan_runs(args, training)
        for run in runs:  # exactly the commands the runner would start, --env-id and --seed appended
            check_command(shlex.join(run.argv))
        return []
    if path.startswith("benchmark/") and path.endswith(".py"):
        if "--help" in argv:
            return [[path, *argv]]
        module = importlib.import_module(f"benchmark.{Path(path).stem}")
        assert hasattr(module, "Args"), f"{command}: {path} has no tyro Args to check the command with"
        cut = argv.index("--") if "--" in argv else len(argv)
        parse_cli(path, lambda a: tyro.cli(module.Args, args=a), argv[:cut])
        if cut < len(argv) and hasattr(module, "SCRIPT"):  # flags after `--` go to the script the tool runs
            check_script_args(relative_to_root(str(module.SCRIPT)), argv[cut + 1 :])
        return []
    if path == "cloud/submit.py":  # its commands that name a project file: submit-tune's --tuner-args
        from cloud import batch_jobs, submit

        args = parse_cli(path, lambda a: tyro.cli(submit.Command, args=a), argv)
        if isinstance(args, submit.SubmitTune):
            try:
                batch_jobs.plan_tune(args)  # the tuner's flags, by the tuner's parser
            except submit.SubmitError as e:
                raise AssertionError(f"{command}: {e}") from None
        return []
    raise AssertionError(f"{command}: no check for {path}")


def test_docs_show_commands():
    shown = shown_commands()
    pages = {page for page, _ in shown}
    assert "docs/get-started/installation.md" in pages
    # torchrun launches and the runner's commands from benchmark/*.sh are among the checked commands
    assert any(c.startswith("torchrun") for _, c in shown)
    assert any(c.startswith("python benchmark/run.py") and " -- " in c for _, c in shown)


def test_command_check_rejects_what_the_clis_reject():
    """The check must fail when a documented flag is renamed, in every form of command it handles."""
    # valid commands pass, and cheap ones are returned to be run
    assert check_command("python cleanrl/ppo.py --env-id CartPole-v1 --total-timesteps 1000") == [
        ["cleanrl/ppo.py", "--env-id", "CartPole-v1", "--total-timesteps", "1000"]
    ]
    assert check_command("python cleanrl/ppo.py --total-timesteps 500000") == []
    assert check_command("torchrun --standalone --nproc_per_node=2 cleanrl/ppo_atari_multigpu.py --num-envs 4") == []
    assert check_command("python benchmark/run.py --env-ids CartPole-v1 --seeds 1 -- python cleanrl/ppo.py") == []
    bad = [
        "python cleanrl/ppo.py --no-such-flag 3",  # a flag the script does not have
        "python cleanrl/ppo.py --total-timesteps many",  # a value of the wrong type
        "python cleanrl/no_such_script.py --help",
        "torchrun --standalone --nproc_per_node=2 cleanrl/ppo_atari_multigpu.py --num-env 4",
        "torchrun --no-such-torchrun-flag cleanrl/ppo_atari_multigpu.py",
        "torchrun --nnodes=2 --node-rank=X cleanrl/ppo_atari_multigpu.py",  # not an int, not a known placeholder
        "python benchmark/run.py --env-ids CartPole-v1 -- python cleanrl/ppo.py --learning-rat 0.1",
        "python benchmark/run.py --env-idz CartPole-v1 -- python cleanrl/ppo.py",
        "python benchmark/ppo_atari_multigpu_scaling.py --ranks 1 2 -- --env-backnd gymnasium",
        "bash benchmark/no_such_benchmark.sh",
        "python cloud/submit.py submit-tune --storage-secret s --tuner-args='--script cleanrl/ppo.py --parms x=int:1:2'",
    ]
    for command in bad:
        with pytest.raises(AssertionError):
            check_command(command)


def run_cheap(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A cheap command, run: a script's --help inside this test process (it ends in the flag parser), a training
    command as a process of its own."""
    path, *args = argv
    if path.startswith("cleanrl/"):
        try:
            return run_in_process(Path(path).name, *args, cwd=cwd)
        except ReachedTheRun:
            return run_script(Path(path).name, *args, cwd=cwd, timeout=600, check=False)
    return subprocess.run(
        [sys.executable, str(ROOT / path), *args], cwd=cwd, env=script_env(), capture_output=True, text=True, timeout=600
    )


_FINISHED: dict[tuple[str, ...], subprocess.CompletedProcess] = {}  # a command shown on several pages runs once


@pytest.mark.parametrize("where, command", shown_commands(), ids=lambda x: x if " " not in x else None)
def test_shown_command_works(where, command, tmp_path):
    """Every shown command parses with the CLIs it calls; cheap ones (--help, tiny budgets) run for real."""
    for argv in check_command(command):
        if tuple(argv) not in _FINISHED:
            _FINISHED[tuple(argv)] = run_cheap(argv, tmp_path)
        proc = _FINISHED[tuple(argv)]
        assert proc.returncode == 0, f"{command} exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        if "--help" in argv:
            assert "usage:" in proc.stdout.lower() and "--help" in proc.stdout, proc.stdout[-2000:]


@pytest.mark.parametrize("name", ["ddpg", "td3", "sac"])
def test_the_off_policy_pages_give_the_width_the_script_names(name):
    """The networks' width is one line of each script (HIDDEN); its docs page shows that value through the value
    directive, so a width changed in the script needs no other edit."""
    from docs.hooks import expand

    script = f"cleanrl/{name}_continuous_action.py"
    hidden = re.search(r"^HIDDEN = (\d+)", (ROOT / script).read_text(), re.M)
    assert hidden, f"{script} names no HIDDEN width"
    width, directive = hidden.group(1), f"<!-- value: {script}:HIDDEN -->"
    rows = [line for line in (ROOT / "docs" / "rl-algorithms" / f"{name}.md").read_text().splitlines()
            if line.startswith("| Networks |")]
    assert len(rows) == 1 and f"{directive}-{directive} ReLU MLPs" in rows[0], rows
    assert f"| {width}-{width} ReLU MLPs" in expand(rows[0])


def test_script_names_in_tables_link_to_their_source_once_the_site_has_a_repository():
    from docs.hooks import rewrite_repository_links

    page = "| `ppo.py` | `cleanrl/dqn.py` | `benchmark/report.py` | `no_such.py` | [`c51.py`](x) |\nsee `ppo.py`"
    linked = rewrite_repository_links(page, "rl-algorithms/ppo.md", "https://example.org/cleanrl/")
    assert linked == (
        "| [`ppo.py`](https://example.org/cleanrl/blob/main/cleanrl/ppo.py) "
        "| [`cleanrl/dqn.py`](https://example.org/cleanrl/blob/main/cleanrl/dqn.py) "
        "| [`benchmark/report.py`](https://example.org/cleanrl/blob/main/benchmark/report.py) | `no_such.py` "
        "| [`c51.py`](x) |\nsee `ppo.py`")  # a file that exists, in a table row, not already a link
    # without a repository (mkdocs.yml's repo_url stays unset until the project has a public home): no link
    assert rewrite_repository_links(page, "rl-algorithms/ppo.md", None) == page
