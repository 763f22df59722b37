"""Only the project's own failures say `error:`, and a run prints nothing that is not about it (issue 59, item 6):
no SDL display error when --capture-video renders, no MuJoCo deprecation of gymnasium's HalfCheetah model, help
that reads as written."""

import contextlib
import importlib
import io
import os
import re
import subprocess
import sys

import pytest
import tyro

import environments
import flags
from tests.helpers import ROOT, run_script, script_env, single_run_dir
from tests.scripts import SCRIPTS

HEADLESS = {"DISPLAY", "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR", "SDL_VIDEODRIVER"}  # a server, a batch job


def headless_env(**extra: str) -> dict:
    return {k: v for k, v in script_env(**extra).items() if k not in HEADLESS}


def test_capture_video_on_a_machine_without_a_display_says_no_error(workdir):
    pytest.importorskip("pygame")
    pytest.importorskip("moviepy")
    proc = run_script("ppo.py", "--env-id", "CartPole-v1", "--num-steps", "32", "--total-timesteps", "256",
                      "--capture-video", "--no-progress", cwd=workdir, env=headless_env())
    assert "error" not in (proc.stdout + proc.stderr).lower(), proc.stderr  # SDL's XDG_RUNTIME_DIR line was one
    assert list((workdir / "videos" / single_run_dir(workdir).name).glob("*.mp4"))


@pytest.mark.heavy  # about 20 s: MuJoCo draws its frames in software
def test_capture_video_of_a_mujoco_env_on_a_machine_without_a_display_draws_through_egl(workdir):
    pytest.importorskip("mujoco")
    pytest.importorskip("moviepy")
    proc = run_script("ppo_continuous_action.py", "--env-id", "HalfCheetah-v5", "--num-envs", "1", "--num-steps", "64",
                      "--total-timesteps", "128", "--capture-video", "--eval-episodes", "0", "--no-progress",
                      cwd=workdir, env=headless_env())  # MuJoCo's default, GLFW, crashed here without a display
    assert "error" not in (proc.stdout + proc.stderr).lower(), proc.stderr
    assert list((workdir / "videos" / single_run_dir(workdir).name).glob("*.mp4"))


def test_gymnasiums_halfcheetah_builds_without_mujocos_deprecation_and_leaves_no_log_file(tmp_path):
    pytest.importorskip("mujoco")
    code = ("import sys, gymnasium as gym, environments; sys.argv = ['ppo_continuous_action.py']; "
            "environments.probe_env('HalfCheetah-v5', gym.spaces.Box, finite_actions=True).close(); "
            "environments.make_envs('HalfCheetah-v5', 2, False, 'x').close()")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env=script_env(PYTHONPATH=str(ROOT / "cleanrl")))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout + proc.stderr == "" and list(tmp_path.iterdir()) == []  # no MUJOCO_LOG.TXT either


def test_other_mujoco_warnings_still_come_as_one_warning_line(capsys):
    pytest.importorskip("mujoco")
    environments.mujoco_warning("Nan, Inf or huge value in QACC at DOF 0. The simulation is unstable.")
    environments.mujoco_warning("compiler attribute 'settotalmass' is deprecated and will be removed")
    assert capsys.readouterr().err == "warning: MuJoCo: Nan, Inf or huge value in QACC at DOF 0. The simulation is unstable.\n"


def help_text(args_cls) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        tyro.cli(args_cls, args=["--help"])
    return out.getvalue()


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_flags_help_reads_as_one_paragraph(script, monkeypatch):
    """A docstring written over several lines is shown as one paragraph (tyro would break it before each
    indented line: `--torch-threads`' help broke after "(for")."""
    monkeypatch.setenv("COLUMNS", "1000")  # wide enough that no help wraps
    try:
        module = importlib.import_module(f"cleanrl.{script[:-3]}")
    except ImportError as e:
        pytest.skip(f"{script} needs an optional dependency: {e}")
    text = help_text(module.Args)
    docs = {**flags.field_docstrings(flags.RunArgs), **flags.field_docstrings(module.Args)}
    assert docs["torch_threads"].count("\n") and "seed" in docs
    lines = [line.strip("│ ") for line in text.splitlines()]
    for name, doc in docs.items():
        at = next((i for i, line in enumerate(lines) if re.match(rf"--{name.replace('_', '-')}(?:[ ,]|$)", line)), None)
        assert at is not None, name
        # the help follows the flag on its line, or (a long flag) fills the next line alone
        assert any(flags.one_line_help(doc) in line for line in lines[at : at + 2]), (name, lines[at : at + 2])
