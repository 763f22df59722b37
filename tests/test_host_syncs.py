"""Host-device synchronisations in a training step, counted on the CPU by tests/census.py.

On a CUDA device, reading a tensor's value on the host (.item(), .cpu(), .numpy(), bool(t), ...), an operation whose
output size depends on the data (a boolean mask, nonzero, unique) and a blocking copy from the host (torch.as_tensor
of an array with device=, an index given as a numpy array) each make the host wait until the device has finished
all the work it was given, so host and device stop overlapping. The GPU-speed issue asks that a training step make
none of them but the one copy of its actions to the environments. The calls are the same on the CPU, so the census
counts them there, per line of cleanrl/, in the tiny run of every script of tests/scripts.py on the GPU code path
(tests/standin.py sets speed.GPU_PATH_ON_CPU: device replay memories, frames in device memory, pinned staging,
batched critics), and holds each to:
  1. the lines that synchronise on at least half of the environment steps are exactly the row's action_copy: the
     actions, sampled on the device, copied to the environments, which no step can do without;
  2. every other line synchronises only when the run logs: on at most len(loss_steps) + 1 occasions, the logging
     points of the tiny run and the set-up before its first step. An occasion is a point of the run's progress (env
     steps, optimizer steps so far): a line that reads three losses in one logging block synchronises on one
     occasion, a line in the update on every gradient step.
A script that fails prints a table of its lines: where, what kind, how often, the source. The census itself is
checked on a small script of known synchronisations, and a run under it must log what it logs without it.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, read_scalars, run_script, script_env, single_run_dir
from tests.scripts import SCRIPTS, names, script_params

CENSUS = ROOT / "tests" / "census.py"
STANDIN = ROOT / "tests" / "standin.py"
TIMEOUT = 300

# The one line per script allowed to synchronise at every step is its row's action_copy (tests/scripts.py), matched
# by a piece of its source text: the sampled actions copied from the device to the environments (numpy). Only the
# copy itself is allowed, not the line's other calls: a line is one site, so a second synchronisation on it shows as a
# second kind in the table.
COPY_KINDS = {"cpu", "to-cpu", "copy-to-cpu", "numpy", "tolist"}  # the ways a copy of the actions reaches the host


def take_census(script: str, args, cwd: Path) -> dict:
    """The census of cleanrl/<script> with args in cwd, on the GPU code path (`python tests/standin.py --census`:
    speed.GPU_PATH_ON_CPU, so the device replay memories, frames, staging and batched critics a GPU run uses are
    what is counted)."""
    out = Path(cwd) / "census.json"
    cmd = [sys.executable, str(STANDIN), "--census", str(out), str(ROOT / "cleanrl" / script), *args]
    proc = subprocess.run(cmd, check=False, cwd=cwd, env=script_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout[-1000:]}\n{proc.stderr[-3000:]}"
    return json.loads(out.read_text())["census"]


def census_args(row) -> list[str]:
    """The row's tiny budget, on the CPU (ppo_atari_multigpu.py's row says --no-cuda already), without torchrun:
    a plain-python run of the multi-GPU script is its one-process run."""
    return [*row.args, *(() if "--no-cuda" in row.args else ("--no-cuda",))]


def table(sites: dict) -> str:
    """The sites as aligned lines: file:line, kind, count, occasions, source."""
    rows = [(key, s["kind"], str(s["count"]), str(s["occasions"]), s["source"]) for key, s in sites.items()]
    widths = [max([len(r[i]) for r in rows] + [len(h)]) for i, h in enumerate(("site", "kind", "count", "occasions"))]
    lines = [f"{'site':{widths[0]}}  {'kind':{widths[1]}}  {'count':>{widths[2]}}  {'occasions':>{widths[3]}}  source"]
    lines += [f"{r[0]:{widths[0]}}  {r[1]:{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}  {r[4]}" for r in rows]
    return "\n".join(lines)


def per_step(census: dict) -> dict:
    """The sites that synchronised on at least half of the environment steps."""
    return {k: s for k, s in census["sites"].items() if s["occasions"] >= census["steps"] / 2}


@pytest.mark.heavy
@pytest.mark.parametrize("row", script_params(names(lambda row: row.action_copy is not None)))
def test_a_training_step_synchronises_only_to_copy_its_actions(row, workdir):
    census = take_census(row.name, census_args(row), workdir)
    steps, sites = census["steps"], census["sites"]
    assert steps > 0, "the census counted no environment step of the script"
    allowed, bound = row.action_copy, len(row.loss_steps) + 1  # once per logging point, and at the set-up
    every_step = per_step(census)
    copies = {k: s for k, s in every_step.items() if allowed in s["source"]}
    problems = []
    unexpected = {k: s for k, s in every_step.items() if k not in copies}
    if unexpected:
        problems.append(f"lines other than the action copy that synchronise on at least half of the steps:\n"
                        f"{table(unexpected)}")
    if not copies:
        problems.append(f"no line containing {allowed!r} synchronises on at least half of the steps (the row's "
                        f"action_copy in tests/scripts.py is stale, or the actions no longer come from the device)")
    impure = {k: s for k, s in copies.items()
              if not set(s["kind"].split(",")) <= COPY_KINDS or s["count"] != s["occasions"]}
    if impure:
        problems.append(f"the action copy's line synchronises more than once per step, or not only to copy:\n"
                        f"{table(impure)}")
    frequent = {k: s for k, s in sites.items() if k not in every_step and s["occasions"] > bound}
    if frequent:
        problems.append(f"lines that synchronise on more than {bound} occasions (once per logging point and at the "
                        f"set-up):\n{table(frequent)}")
    assert not problems, (f"{row.name}: {steps} env steps, {census['updates']} optimizer steps, losses logged at "
                          f"{row.loss_steps}\n" + "\n".join(problems) + f"\nall the lines:\n{table(sites)}")


# ---- the census itself


TOY = """
import gymnasium as gym
import numpy as np
import torch

envs = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
envs.reset(seed=0)
device = torch.device("cpu")
weights = torch.ones(4, 2, device=device)
buffer = torch.zeros(8, 2, device=device)
staged = torch.zeros(8, 2)
for step in range(8):
    obs = torch.as_tensor(envs.reset()[0], dtype=torch.float32, device=device)
    action = (obs @ weights).argmax(1)
    envs.step(action.cpu().numpy())
    buffer[step] = torch.from_numpy(np.ones(2, np.float32)).to(device, non_blocking=True)
    staged.copy_(buffer)
    buffer[buffer > 0] = 0.0
    buffer[np.array([0, 1])] += 1.0
    if step % 4 == 3:
        print(float(buffer.sum()), buffer.mean().item(), staged.sum().item())
"""
# the toy's lines that synchronise: (kinds, count). Not the upload with non_blocking=True, nor numpy() of the copy
# .cpu() made, nor .item() of a host tensor (`staged`).
TOY_SYNCS = {
    "obs = torch.as_tensor(envs.reset()[0], dtype=torch.float32, device=device)": ("h2d", 8),
    "envs.step(action.cpu().numpy())": ("cpu", 8),
    "staged.copy_(buffer)": ("copy-to-cpu", 8),
    "buffer[buffer > 0] = 0.0": ("bool-mask", 8),  # the mask's size is known only once it is computed
    "buffer[np.array([0, 1])] += 1.0": ("h2d", 16),  # the index is uploaded for the read and for the write
    "print(float(buffer.sum()), buffer.mean().item(), staged.sum().item())": ("float,item", 4),
}


def test_the_census_counts_each_kind_of_synchronisation_at_its_line(tmp_path):
    script = tmp_path / "toy.py"
    script.write_text(TOY)
    out = tmp_path / "census.json"
    proc = subprocess.run([sys.executable, str(CENSUS), str(out), str(script)], check=False, cwd=tmp_path,
                          timeout=TIMEOUT, env=script_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    census = json.loads(out.read_text())
    assert {s["source"]: (s["kind"], s["count"]) for s in census["sites"].values()} == TOY_SYNCS
    assert census["steps"] == 8 and census["updates"] == 0


def test_a_run_under_the_census_logs_what_it_logs_without_it(workdir):
    row = SCRIPTS["ppo.py"]
    (workdir / "plain").mkdir()  # the same GPU code path, without the census
    run_script(row.name, *census_args(row), cwd=workdir / "plain", launcher=[sys.executable, str(STANDIN), "r.json"])
    (workdir / "census").mkdir()
    take_census(row.name, census_args(row), workdir / "census")
    plain, counted = read_scalars(single_run_dir(workdir / "plain")), read_scalars(single_run_dir(workdir / "census"))
    assert plain.keys() == counted.keys()
    for key in plain.keys() - {"charts/SPS"}:
        assert plain[key] == counted[key], key
