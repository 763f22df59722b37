"""The run lifecycle (docs/saving-resuming.md), every run a real subprocess: kill -9 then resume (bit-identical to an
uninterrupted run where the environments' state is saved, else the same run continued with episodes restarted),
SIGTERM/SIGINT (a checkpoint, exit 143/130), --eval-only, the non-finite stop, what a checkpoint holds, and bad input.

The runs several tests look at are made once per pytest run, by whichever test process asks first (the `resumed`
and `stopped` fixtures, through tests/helpers.py's `once`): a run killed after its first checkpoint and resumed to
the end (RESUMES), and a run stopped by SIGTERM (STOPS). A test that changes such a run copies it first."""

import math
import os
import re
import shutil
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

import checkpoints
from cleanrl.dqn import Args as DQNArgs
from cleanrl.ppg_procgen import Args as PPGArgs
from cleanrl.ppg_procgen import AuxBuffer
from procgen_envs import RewardNormalizer
from cleanrl.ppo import Args as PPOArgs
from cleanrl.ppo_atari import Args as PPOAtariArgs
from cleanrl.sac_continuous_action import Args as SACArgs
from cleanrl.td3_continuous_action import Args as TD3Args
from tests.helpers import (
    CHECKSUM, ReachedTheRun, assert_bad_input_rejected, assert_losses_close, assert_same_run, checksums, eval_line,
    eval_mean_std, kill_after_first_checkpoint, load, once, read_scalars, run_dirs, run_in_process, run_script,
    single_run_dir, start, stop, stop_after_first_checkpoint, values, wait_for_checkpoint, wait_until, worker_pids,
)
from tests.scripts import (
    SCRIPTS, TIMEOUT, cartpole_updates, names, needs, pendulum_updates, script_params, torchrun,
)

# Each row of tests/scripts.py names its cases here: resume (kill -9, then --resume), stop (SIGTERM), evaluation
# (--eval-only), non_finite (NaN planted in a checkpoint), bad_lifecycle; saves_envs, whether its environments'
# state is checkpointed, decides what a resume must reproduce.
RESUMES = {name: SCRIPTS[name].resume for name in names(lambda row: row.resume)}
# the environments' state is saved (and the replay memory, where there is one): the resumed run equals an
# uninterrupted one
EXACT = [name for name, case in RESUMES.items() if case.uninterrupted]
# Atari's and Procgen's environments cannot be saved: the resumed run continues with its episodes restarted
RESTARTED = [name for name in RESUMES if not SCRIPTS[name].saves_envs]
STOPS = {name: SCRIPTS[name].stop for name in names(lambda row: row.stop)}
NOTE = "note: the environments' state cannot be saved ({why}); a resumed run restarts its episodes"


def with_flags(args: tuple, values: dict) -> list:
    """args with the given flags' values replaced (a flag given twice is refused)."""
    args = list(args)
    for flag, value in values.items():
        args[args.index(flag) + 1] = value
    return args


def kill_then_resume(script: str, folder: Path) -> dict:
    case = RESUMES[script]
    cwd = folder / "run"
    cwd.mkdir()
    # `--resume auto` starts a fresh run the first time, and the same command resumes it after the kill: what an
    # automatic restart (torchrun --max-restarts, a retried batch job) does
    command = [*case.args, "--checkpoint-frequency", str(case.every)] + ([] if case.by_path else ["--resume", "auto"])
    path = kill_after_first_checkpoint(script, command, cwd)
    killed = shutil.copytree(path.parent, folder / "killed" / path.parent.name)  # the run as the kill left it
    resume = ["--resume", f"runs/{path.parent.name}"] if case.by_path else command
    result = {"cwd": str(cwd), "killed": str(killed), "run_dir": str(path.parent),
              "resumed": run_script(script, *resume, cwd=cwd).stdout}
    if case.again:
        result["again"] = run_script(script, *command, cwd=cwd).stdout
    if case.uninterrupted:
        (folder / "uninterrupted").mkdir()
        run_script(script, *case.args, cwd=folder / "uninterrupted")
        result["uninterrupted"] = str(single_run_dir(folder / "uninterrupted"))
    return result


def stop_by_sigterm(script: str, folder: Path) -> dict:
    cwd = folder / "run"
    cwd.mkdir()
    path, stdout = stop_after_first_checkpoint(script, STOPS[script].args, cwd, signal.SIGTERM)
    return {"cwd": str(cwd), "run_dir": str(path.parent), "stdout": stdout}


@pytest.fixture(scope="session")
def shared(tmp_path_factory) -> Path:
    """A folder every test process of this pytest run sees (pytest-xdist's workers have sibling base folders)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture
def resumed(shared):
    """resumed(script): the run of RESUMES[script] killed and resumed, made once per pytest run."""
    return lambda script: once(shared, f"resumed-{script[:-3]}", lambda folder: kill_then_resume(script, folder))


@pytest.fixture
def stopped(shared):
    """stopped(script): the run of STOPS[script] stopped by SIGTERM, made once per pytest run."""
    return lambda script: once(shared, f"stopped-{script[:-3]}", lambda folder: stop_by_sigterm(script, folder))


def copy_run(run_dir: Path, cwd: Path) -> Path:
    """A copy of a run directory under cwd/runs, for a test that changes it."""
    return Path(shutil.copytree(run_dir, cwd / "runs" / Path(run_dir).name))


# ---------------------------------------------------------------------------------------------------------------
# where a resumed run writes, and a write that fails
def test_a_run_resumed_from_another_directory_goes_on_in_its_own(stopped, workdir):
    run_dir = copy_run(Path(stopped("ppo.py")["run_dir"]), workdir / "home")
    before = load(run_dir / "checkpoint.pt")["global_step"]
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    proc = start("ppo.py", "--resume", str(run_dir), cwd=elsewhere)
    wait_until(lambda: load(run_dir / "checkpoint.pt")["global_step"] > before, proc, "a checkpoint after the resume")
    stdout = stop(proc, signal.SIGTERM)
    assert stdout.startswith(f"run directory: {run_dir}; resuming {run_dir.name} after iteration ")
    assert f"checkpoint saved to {run_dir}/checkpoint.pt" in stdout
    assert not (elsewhere / "runs").exists() and len(list(run_dir.glob("events.out.tfevents.*"))) == 2


def test_a_checkpoint_that_cannot_be_written_fails_in_one_line_and_the_last_one_stays(stopped, workdir):
    # a real failed write: a file-size limit below the checkpoint's size (bash ignores SIGXFSZ, so write() fails with
    # EFBIG as on a full disk) on the resumed run's first checkpoint
    run_dir = copy_run(Path(stopped("ppo.py")["run_dir"]), workdir)
    last = (run_dir / "checkpoint.pt").read_bytes()
    limit_kib = len(last) // 2048
    launcher = ["bash", "-c", f'trap "" XFSZ; ulimit -f {limit_kib}; exec "$@"', "bash", sys.executable]
    proc = run_script("ppo.py", "--resume", f"runs/{run_dir.name}", cwd=workdir, launcher=launcher, check=False)
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1].startswith(
        f"error: cannot save runs/{run_dir.name}/checkpoint.pt: "), proc.stderr[-2000:]
    assert proc.stderr.splitlines()[-1].endswith("; the previous one is intact")
    assert (run_dir / "checkpoint.pt").read_bytes() == last and not list(run_dir.glob("*.tmp*"))


# ---------------------------------------------------------------------------------------------------------------
# kill -9, then resume
@pytest.mark.parametrize("row", script_params(EXACT))
def test_killed_and_resumed_equals_an_uninterrupted_run(row, resumed):
    case, run = RESUMES[row.name], resumed(row.name)
    killed = load(Path(run["killed"]) / "checkpoint.pt")
    assert killed["envs"] is not None, "classic control's state (and Pendulum's) is saved"
    if "--save-buffer" in case.args:
        assert killed["replay_buffer"] is not None
    if case.updates:
        assert killed["updates"] % case.every == 0 and killed["updates"] > 0
        assert killed["updates"] == case.updates(killed["global_step"])
    assert f"after iteration {killed['iteration']} (global step {killed['global_step']})" in run["resumed"]
    resumed_dir = single_run_dir(run["cwd"])
    assert resumed_dir.name == killed["run_name"]
    # the same final networks, optimizers, generators and counters, and the same curves step for step
    assert_same_run(Path(run["uninterrupted"]), resumed_dir)
    final = load(resumed_dir / "checkpoint.pt")
    assert final["global_step"] == case.total and final["iteration"] == case.iterations
    if case.updates:
        assert final["updates"] == case.updates(case.total)
    scalars = read_scalars(resumed_dir)
    for key in row.losses:
        assert [s for s, _ in scalars[key]] == list(case.loss_steps), key
    if case.episodes:
        assert [s for s, _ in scalars["charts/episodic_return"]] == list(case.episodes)
    assert (resumed_dir / f"{row.name[:-3]}.cleanrl_model").stat().st_size > 0
    if case.again:
        # the same command once more: the run has finished, so there is nothing to do (and no new run)
        again = run["again"]
        assert f"{resumed_dir.name} has already finished; nothing to resume" in again
        assert run_dirs(run["cwd"]) == [resumed_dir]


@pytest.mark.parametrize("row", script_params(RESTARTED))
def test_killed_and_resumed_continues_the_run_with_its_episodes_restarted(row, resumed):
    # Atari and Procgen envs cannot be saved: the resumed run is not step for step the uninterrupted one, but the
    # run itself continues (directory, global step, counters, optimizer, one TensorBoard log)
    case, run = RESUMES[row.name], resumed(row.name)
    killed = load(Path(run["killed"]) / "checkpoint.pt")
    assert killed["envs"] is None
    note = NOTE.format(why=case.why) if case.why else NOTE.split("(")[0]
    assert note in run["resumed"] and NOTE.split(")")[-1] in run["resumed"], run["resumed"]
    assert f"after iteration {killed['iteration']} (global step {killed['global_step']})" in run["resumed"]
    run_dir = single_run_dir(run["cwd"])
    assert run_dir.name == killed["run_name"]
    final = load(run_dir / "checkpoint.pt")
    assert final["finished"] and final["global_step"] == case.total and final["iteration"] == case.iterations
    scalars = read_scalars(run_dir)
    for key in row.losses[:2] + tuple(k for k in ("charts/learning_rate",) if k in scalars):
        # one value per update, none twice: what the killed process logged after its checkpoint was purged
        assert [s for s, _ in scalars[key]] == list(case.loss_steps), key
    assert (run_dir / f"{row.name[:-3]}.cleanrl_model").stat().st_size > 0
    assert len(values(scalars, "eval/episodic_return")) == 1


@needs("atari")
def test_ppo_atari_resumed_continues_its_learning_rate_schedule_and_adam(resumed):
    run = resumed("ppo_atari.py")
    killed = load(Path(run["killed"]) / "checkpoint.pt")
    assert killed["global_step"] == 64 * killed["iteration"]
    run_dir = single_run_dir(run["cwd"])
    # Adam continued from the checkpoint: 10 updates x 1 epoch x 2 minibatches steps in all, not just the resumed ones
    final = load(run_dir / "checkpoint.pt")
    assert {int(state["step"]) for state in final["optimizer"]["state"].values()} == {20}
    scalars = read_scalars(run_dir)
    for key in ("losses/value_loss", "losses/policy_loss", "losses/approx_kl", "charts/learning_rate"):
        assert [s for s, _ in scalars[key]] == [64 * i for i in range(1, 11)], key
    # the annealed learning rate continues its schedule over the whole run
    assert values(scalars, "charts/learning_rate") == pytest.approx([2.5e-4 * (1 - i / 10) for i in range(10)])


@needs("procgen")
def test_ppg_killed_inside_a_policy_phase_then_resumed_continues_the_same_run(resumed):
    run = resumed("ppg_procgen.py")
    killed = load(Path(run["killed"]) / "checkpoint.pt")
    iteration, stopped_at = killed["iteration"], killed["global_step"]
    assert 1 <= iteration <= 3 and stopped_at == 32 * iteration, "not killed inside the policy phase"
    run_dir = single_run_dir(run["cwd"])
    assert run_dir.name.startswith("StarpilotEasy-v0__ppg_procgen__1__")
    scalars = read_scalars(run_dir)
    for key in ("losses/aux_kl_loss", "losses/aux_value_loss", "losses/aux_pi_value_loss"):
        assert [s for s, _ in scalars[key]] == [128], key  # the auxiliary phase ran once, at the phase's end
        assert all(math.isfinite(v) and v >= 0 for _, v in scalars[key]), key
    # episodes restart on resume: one that ends after the resume is no longer than the steps since then
    lengths = dict(scalars.get("charts/episodic_length", []))
    assert all(length <= (step - stopped_at) // 2 for step, length in lengths.items() if step > stopped_at)
    final = load(run_dir / "checkpoint.pt")
    assert final["aux"] is None, "after the auxiliary phase the buffer is spent and not saved"


@pytest.mark.heavy
@needs("procgen")
def test_ppg_stopped_inside_its_auxiliary_phase_goes_on_there_and_ends_as_an_uninterrupted_run(workdir):
    # The budget is one phase, so all that follows a stop inside its auxiliary phase is distillation of the saved
    # buffer: no environment steps, which a resume would restart. 16 auxiliary epochs of 8 one-rollout minibatches
    # (about 0.1 s each here) make the phase last about 12 s. The first checkpoint (after iteration 3) is the policy
    # phase's last safe point; iteration 4 and the recording of pi_old take well under a second after it, so a
    # signal sent 2.5 s later falls inside a distillation epoch.
    # the row's resume budget (--save-model among its flags) with longer distillation
    command = with_flags(RESUMES["ppg_procgen.py"].args, {"--num-aux-rollouts": "1", "--e-auxiliary": "16"})
    (workdir / "a").mkdir(), (workdir / "b").mkdir()
    run_script("ppg_procgen.py", *command, cwd=workdir / "a")
    command += ["--checkpoint-frequency", "3", "--resume", "auto"]
    proc = start("ppg_procgen.py", *command, cwd=workdir / "b")
    path = wait_for_checkpoint(proc, workdir / "b")
    time.sleep(2.5)
    assert "SIGTERM: stopped after global step 128; checkpoint saved" in stop(proc, signal.SIGTERM)
    stopped_at = load(path)
    position = stopped_at["aux_phase"]
    assert stopped_at["iteration"] == 4 and not stopped_at["finished"]
    assert 0 <= position["epoch"] < 16 and 0 < position["start"] <= 8, f"not stopped while distilling: {position}"
    assert sorted(position["order"].tolist()) == list(range(8)), "the order is a permutation of the 8 rollouts"
    assert position["order"].tolist() != list(range(8)), "the epoch's order is shuffled"
    assert len(position["losses"]) == (position["start"] if position["epoch"] == 15 else 0)
    aux = stopped_at["aux"]
    assert aux["obs"].shape == (8, 16, 3, 64, 64) and aux["old_logits"].shape == (8, 16, 15)
    assert aux["old_logits"].abs().min() > 0, "pi_old's logits were recorded for every observation"
    resumed = run_script("ppg_procgen.py", *command, cwd=workdir / "b").stdout
    part = f"epoch {position['epoch'] + 1}/16, from rollout {position['start']}/8"
    assert f"continuing the auxiliary phase: {part}" in resumed, resumed
    assert re.search(r"done: 128 steps; \d+ s since resuming at step 128, (mean return of the last|no episode finished)", resumed)
    # the same final networks, Adam state and generators bit for bit, and the same curves; not the same next_obs,
    # as the resumed process built new environments (Procgen's cannot be saved) and took no step in them
    assert_same_run(single_run_dir(workdir / "a"), single_run_dir(workdir / "b"), apart_from=("next_obs",))
    assert load(single_run_dir(workdir / "b") / "checkpoint.pt")["aux"] is None


@pytest.mark.parametrize("row", script_params(["ddpg_continuous_action.py"]))
def test_killed_and_resumed_without_the_replay_memory_refills_it_before_learning(row, resumed):
    case, run = RESUMES[row.name], resumed(row.name)
    killed = load(Path(run["killed"]) / "checkpoint.pt")
    assert killed["envs"] is not None and killed["replay_buffer"] is None
    stopped_at = killed["global_step"]
    assert f"(global step {stopped_at})" in run["resumed"]
    assert f"learning resumes after global step {stopped_at + 200}" in run["resumed"]
    run_dir = single_run_dir(run["cwd"])
    final = load(run_dir / "checkpoint.pt")
    assert final["finished"] and final["global_step"] == case.total
    assert final["updates"] == pendulum_updates(case.total) - 200, "no gradient step while the memory refilled"
    steps = [s for s, _ in read_scalars(run_dir)["losses/qf1_loss"]]
    assert steps == sorted(set(steps)), "no duplicate steps after the purge"
    after = [s for s in steps if s > stopped_at]
    assert after and all(s > stopped_at + 200 for s in after)
    assert (run_dir / f"{row.name[:-3]}.cleanrl_model").exists()


@pytest.mark.parametrize("row", script_params(["dqn.py"]))
def test_dqn_sigterm_then_resume_without_buffer_refills_the_memory(row, stopped, workdir):
    checkpoint = load(Path(stopped("dqn.py")["run_dir"]) / "checkpoint.pt")
    stopped_at, updates = checkpoint["global_step"], checkpoint["updates"]
    assert checkpoint["replay_buffer"] is None
    run_dir = copy_run(Path(stopped("dqn.py")["run_dir"]), workdir)
    # resume without a replay memory: learning waits until the memory has refilled for --learning-starts steps.
    # Losses are logged at multiples of 100 steps: wait for a checkpoint at or past the first such step after the
    # refill and 5 more gradient steps (a checkpoint comes after that iteration's logging), then stop again.
    first_log = (stopped_at + 500) // 100 * 100 + 100
    proc = start("dqn.py", "--resume", str(run_dir), "--checkpoint-frequency", "5", "--no-progress", cwd=workdir)

    def far_enough() -> bool:
        now = load(run_dir / "checkpoint.pt")
        return now["global_step"] >= first_log and now["updates"] >= updates + 5

    wait_until(far_enough, proc, f"a checkpoint after global step {first_log}")
    stdout = stop(proc, signal.SIGTERM)
    assert f"learning resumes after global step {stopped_at + 500}" in stdout
    after = load(run_dir / "checkpoint.pt")
    # every gradient step since the resume came after the refill: one at each 10th step past stopped_at + 500
    assert after["updates"] == updates + after["global_step"] // 10 - (stopped_at + 500) // 10
    losses = read_scalars(run_dir)["losses/td_loss"]
    resumed_steps = [s for s, _ in losses if s > stopped_at]
    assert resumed_steps and resumed_steps[0] == first_log  # no gradient step (nor loss) while the memory refilled
    assert run_dirs(workdir) == [run_dir]


@needs("mujoco")
def test_halfcheetah_sigint_then_resume_restarts_episodes(workdir):
    # 1 env x 64 steps an iteration, 40 iterations; HalfCheetah episodes are 1000 steps long
    checkpoint_path, stdout = stop_after_first_checkpoint(
        "ppo_continuous_action.py", ["--env-id", "HalfCheetah-v5", "--num-steps", "64", "--num-minibatches", "2",
                                     "--update-epochs", "1", "--total-timesteps", "2560", "--save-model",
                                     "--checkpoint-frequency", "1", "--eval-episodes", "1", "--no-progress"],
        workdir, signal.SIGINT)
    assert NOTE.format(why="HalfCheetahEnv keeps its state outside Python, where it cannot be saved") in stdout
    checkpoint = load(checkpoint_path)
    assert f"SIGINT: stopped after global step {checkpoint['global_step']}; checkpoint saved" in stdout
    assert checkpoint["envs"] is None and not checkpoint["finished"]
    stopped_at = checkpoint["global_step"]
    assert stopped_at < 1000

    run_script("ppo_continuous_action.py", "--resume", str(checkpoint_path), cwd=workdir)
    scalars = read_scalars(single_run_dir(workdir))
    assert [s for s, _ in scalars["losses/value_loss"]] == [64 * i for i in range(1, 41)]
    # the episode in progress was dropped: the first one ends 1000 steps after the resume, not at step 1000
    assert [s for s, _ in scalars["charts/episodic_length"]] == [stopped_at + 1000, stopped_at + 2000][
        : 1 + (stopped_at + 2000 <= 2560)]
    assert load(checkpoint_path)["finished"]


@needs("mujoco")
def test_sac_halfcheetah_sigint_then_resume_restarts_episodes_and_refills_the_memory(workdir):
    command = ["--env-id", "HalfCheetah-v5", "--total-timesteps", "100000", "--learning-starts", "100",
               "--batch-size", "32", "--buffer-size", "1000", "--save-model", "--checkpoint-frequency", "20",
               "--no-progress"]
    checkpoint_path, stdout = stop_after_first_checkpoint("sac_continuous_action.py", command, workdir, signal.SIGINT)
    assert NOTE.format(why="HalfCheetahEnv keeps its state outside Python, where it cannot be saved") in stdout
    first = load(checkpoint_path)
    assert f"SIGINT: stopped after global step {first['global_step']}; checkpoint saved" in stdout
    assert first["envs"] is None and first["updates"] >= 20
    # resume (episodes restart from a fresh reset), then stop again once 20 more gradient steps are checkpointed
    proc = start("sac_continuous_action.py", "--resume", "auto", *command, cwd=workdir)
    wait_until(lambda: load(checkpoint_path)["updates"] >= first["updates"] + 20, proc, "20 more gradient steps")
    stdout = stop(proc, signal.SIGTERM)
    assert f"after iteration {first['iteration']} (global step {first['global_step']})" in stdout
    second = load(checkpoint_path)
    # the replay memory was not saved, so learning waited for --learning-starts new steps
    assert second["global_step"] >= first["global_step"] + 100 + 20
    assert second["updates"] == first["updates"] + second["global_step"] - first["global_step"] - 100
    assert len(run_dirs(workdir)) == 1


@pytest.mark.heavy
@needs("atari")
def test_torchrun_restarts_a_killed_rank_and_the_job_finishes_from_the_checkpoint(workdir):
    iterations = 20  # 2 envs in all (1 per rank) x 32 steps = 64 global steps an iteration
    script = "ppo_atari_multigpu.py"
    # ppo_atari.py's resume budget (1 env a rank here), run for 20 iterations
    args = [*with_flags(RESUMES["ppo_atari.py"].args, {"--total-timesteps": str(64 * iterations)}),
            "--checkpoint-frequency", "1", "--resume", "auto"]
    launcher = torchrun("--standalone", "--nnodes=1", "--nproc_per_node=2", "--max-restarts=1")
    proc = start(script, *args, cwd=workdir, launcher=launcher, merge_stderr=True)
    checkpoint_path = wait_for_checkpoint(proc, workdir, timeout=TIMEOUT)
    victims = worker_pids(workdir, script, rank=1)
    assert len(victims) == 1, victims
    os.kill(victims[0], signal.SIGKILL)
    killed_at = load(checkpoint_path)
    assert not killed_at["finished"], "the run finished before the kill; the test did not test a restart"

    output, _ = proc.communicate(timeout=TIMEOUT + 30)
    assert proc.returncode == 0, output[-4000:]
    # torchrun restarted both ranks, and the new rank 0 continued the run from a checkpoint of the first attempt
    assert output.count("rank 1/2 (node 0, local rank 1)") == 2, output[-4000:]
    resumed_lines = [line for line in output.splitlines() if "resuming" in line and " after iteration " in line]
    assert len(resumed_lines) == 1, output[-4000:]
    resumed_from = int(resumed_lines[0].split(" after iteration ")[1].split()[0])
    assert killed_at["iteration"] <= resumed_from < iterations

    run_dir = single_run_dir(workdir)  # one run directory for both attempts
    final = load(checkpoint_path)
    assert final["finished"] and final["iteration"] == iterations and final["global_step"] == 64 * iterations
    assert len(final["rng"]) == 2, "every rank's generators are saved"
    # Adam continued: 20 updates x 2 minibatches steps in all, not only the restarted job's
    assert {int(state["step"]) for state in final["optimizer"]["state"].values()} == {2 * iterations}
    scalars = read_scalars(run_dir)
    for key in ("losses/value_loss", "losses/policy_loss", "charts/learning_rate"):
        # one value per update and none twice: the killed attempt's events after the checkpoint were purged
        assert [s for s, _ in scalars[key]] == [64 * i for i in range(1, iterations + 1)], key
    assert values(scalars, "charts/learning_rate") == pytest.approx(
        [2.5e-4 * (1 - i / iterations) for i in range(iterations)])
    # the restarted replicas end identical; rank 0 alone saved the final model and evaluated it
    sums = checksums(output)
    assert set(sums) == {0, 1} and sums[0] == sums[1] and len(CHECKSUM.findall(output)) == 2
    assert [p.name for p in run_dir.glob("*.cleanrl_model")] == ["ppo_atari_multigpu.cleanrl_model"]
    assert len(scalars["eval/episodic_return"]) == 1


@needs("atari")
def test_resume_auto_finds_the_run_of_an_ale_id(workdir):
    # run directories of ALE/ ids use "-" for "/"; `auto` must find them, else every restart would start afresh.
    # A finished run: the same command exits 0 without training again (and makes no new run).
    run_dir = workdir / "runs" / "ALE-Pong-v5__ppo_atari__1__1700000000"
    run_dir.mkdir(parents=True)
    args = {**asdict(PPOAtariArgs()), "env_id": "ALE/Pong-v5"}
    torch.save({"script": "ppo_atari.py", "args": args, "run_name": run_dir.name, "iteration": 3,
                "global_step": 3072, "finished": True, "envs": None, "rng": {}, "next_obs": torch.zeros(1)},
               run_dir / "checkpoint.pt")
    proc = run_script("ppo_atari.py", "--env-id", "ALE/Pong-v5", "--resume", "auto", cwd=workdir, timeout=120)
    assert f"{run_dir.name} has already finished; nothing to resume" in proc.stdout
    assert run_dirs(workdir) == [run_dir]


def test_a_plain_run_resumes_with_compile(resumed, workdir):
    # --compile changes speed only, so a run may switch it on when resumed; the losses follow the uninterrupted
    # plain run within float rounding (the parity tolerance of tests/test_ppo.py)
    run = resumed("ppo.py")
    killed = copy_run(Path(run["killed"]), workdir)  # the run directory as the kill left it, resumed again
    checkpoint = load(killed / "checkpoint.pt")
    proc = run_script("ppo.py", *RESUMES["ppo.py"].args, "--checkpoint-frequency", "1", "--resume", "auto",
                      "--compile", cwd=workdir)
    assert f"after iteration {checkpoint['iteration']} (global step {checkpoint['global_step']})" in proc.stdout
    assert run_dirs(workdir) == [killed]
    plain, resumed_scalars = read_scalars(Path(run["uninterrupted"])), read_scalars(single_run_dir(workdir))
    assert_losses_close(plain, resumed_scalars, ["losses/value_loss", "losses/policy_loss", "losses/entropy",
                                                 "losses/approx_kl"], rtol=1e-4, atol=1e-6)
    assert checkpoint["global_step"] < plain["losses/value_loss"][-1][0]
    assert load(killed / "checkpoint.pt")["finished"]


# ---------------------------------------------------------------------------------------------------------------
# SIGTERM and SIGINT: a checkpoint at the next safe point, exit 128 + signal (143, 130)
@pytest.mark.parametrize("row", script_params(list(STOPS)))
def test_sigterm_saves_a_loadable_checkpoint_and_exits_143(row, stopped):
    case, run = STOPS[row.name], stopped(row.name)
    run_dir = Path(run["run_dir"])
    checkpoint = load(run_dir / "checkpoint.pt")  # weights_only: the whole checkpoint is plain tensors and values
    step = checkpoint["global_step"]
    assert f"SIGTERM: stopped after global step {step}; checkpoint saved to runs/{run_dir.name}/checkpoint.pt" in (
        run["stdout"])
    assert not checkpoint["finished"] and step == case.per_iteration * checkpoint["iteration"] and step > 0
    assert not list(run_dir.glob("checkpoint.pt.tmp*"))
    assert not list(run_dir.glob("*.cleanrl_model")), "a stopped run is not finished: no final model"
    logged = read_scalars(run_dir).get(row.losses[0], [])
    if case.logs_every_iteration:
        assert logged[-1][0] == step, "the last logged update is the checkpoint's"
    else:
        assert not logged or logged[-1][0] <= step


def test_max_runtime_stops_as_sigterm_does_and_the_resumed_run_goes_on(workdir):
    # A scheduler's hard time limit (AWS Batch's timeout ends a job for good) is never reached: --max-runtime stops
    # the run at its first safe point after the limit, with a checkpoint and exit 143, which a retry resumes.
    args = ("--total-timesteps", "1000000", "--save-model", "--max-runtime", "1.5", "--no-progress")
    first = run_script("dqn.py", *args, cwd=workdir, check=False, timeout=120)
    run_dir = single_run_dir(workdir)
    stopped = load(run_dir / "checkpoint.pt")
    assert first.returncode == 143, first.stderr[-2000:]
    assert (f"--max-runtime: stopped after global step {stopped['global_step']}; checkpoint saved to "
            f"runs/{run_dir.name}/checkpoint.pt") in first.stdout
    assert not stopped["finished"] and 0 < stopped["global_step"] < 1000000
    second = run_script("dqn.py", *args, "--resume", "auto", cwd=workdir, check=False, timeout=120)
    assert second.returncode == 143 and f"after iteration {stopped['iteration']}" in second.stdout
    assert load(run_dir / "checkpoint.pt")["global_step"] > stopped["global_step"]


# ---------------------------------------------------------------------------------------------------------------
# --eval-only
# the rows' evaluation cases: the greedy policy (or seeded sampling) and the seeded evaluation envs make them
# deterministic; the mean return lies in the case's range
EVALS = {name: SCRIPTS[name].evaluation for name in names(lambda row: row.evaluation)}


@pytest.mark.parametrize("row", script_params(list(EVALS)))
def test_eval_only_on_a_run_directory_and_on_its_model_file(row, resumed, workdir):
    # a run directory (its checkpoint brings the env id) and the bare .cleanrl_model (evaluated on --env-id)
    case, run = EVALS[row.name], resumed(row.name)
    run_dir = single_run_dir(run["cwd"])
    episodes = ("--eval-episodes", str(case.episodes))
    # in this test process (the evaluation is what runs, not the start-up of a process), one of them as a process
    # of its own for every script: the exit status and output of the real thing
    by_dir = run_script(row.name, "--eval-only", str(run_dir), *episodes, *case.flags, cwd=workdir)
    by_file = run_in_process(row.name, "--eval-only", str(run_dir / f"{row.name[:-3]}.cleanrl_model"), *episodes,
                             *case.flags, *case.file_flags, cwd=workdir, evaluate=True)
    assert by_file.returncode == 0, by_file.stderr[-3000:]
    line = eval_line(by_dir.stdout)
    assert line.endswith(f"over {case.episodes} episodes of {case.env}"), line
    mean, std = eval_mean_std(line)
    assert case.mean[0] <= mean <= case.mean[1] and std >= 0, line
    assert eval_line(by_file.stdout) == line
    assert run_dirs(workdir) == [] and run_dirs(run["cwd"]) == [run_dir], "evaluation must not create a run"
    if "--capture-video" in case.file_flags:
        assert list((workdir / "videos").glob("*-eval/*.mp4"))


# ---------------------------------------------------------------------------------------------------------------
# A non-finite loss or parameter stops the run, naming step and quantity, and keeps the last checkpoint
# the rows' non_finite cases: NaN planted in one of Adam's first moments of the checkpoint the row's resume (kill)
# or stop (SIGTERM) left; the next optimizer step writes NaN into a network
NON_FINITE = {name: SCRIPTS[name].non_finite for name in names(lambda row: row.non_finite)}


@pytest.mark.parametrize("row", script_params(list(NON_FINITE)))
def test_non_finite_stops_naming_step_and_quantity_and_keeps_the_checkpoint(row, resumed, stopped, workdir):
    case = NON_FINITE[row.name]
    source = Path(resumed(row.name)["killed"] if case.source == "resumed" else stopped(row.name)["run_dir"])
    run_dir = copy_run(source, workdir)
    checkpoint = load(run_dir / "checkpoint.pt")
    case.poison(checkpoint)
    torch.save(checkpoint, run_dir / "checkpoint.pt")
    before = (run_dir / "checkpoint.pt").read_bytes()
    proc = run_script(row.name, "--resume", str(run_dir), cwd=workdir, check=False)
    assert proc.returncode == 1, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: non-finite "), proc.stderr[-3000:]
    for part in case.expected(checkpoint) + ["; stopped without saving, so the last good checkpoint is kept"]:
        assert part in last, (part, last)
    assert run_dirs(workdir) == [run_dir], "the resumed run is the copied one"
    assert (run_dir / "checkpoint.pt").read_bytes() == before, "the last good checkpoint was overwritten"
    assert not list(run_dir.glob("*.cleanrl_model"))


# ---------------------------------------------------------------------------------------------------------------
# What a checkpoint holds
@needs("procgen")
def test_a_ppg_checkpoint_inside_a_phase_holds_its_stored_rollouts(resumed, stopped):
    killed = load(Path(resumed("ppg_procgen.py")["killed"]) / "checkpoint.pt")
    iteration = killed["iteration"]
    # inside the phase: the rollouts stored so far, 2 per iteration (one per env), whole and uint8
    aux = killed["aux"]
    assert aux["obs"].shape == (2 * iteration, 16, 3, 64, 64) and aux["obs"].dtype == torch.uint8
    assert aux["returns"].shape == aux["valid"].shape == (2 * iteration, 16)
    assert aux["obs"].untyped_storage().nbytes() == aux["obs"].numel(), "a slice saved with its whole storage"
    assert aux["obs"].float().std() > 0, "the saved observations are frames, not empty memory"
    assert set(killed["reward_normalizer"]) == {"mean", "var", "count"}
    assert killed["reward_normalizer"]["count"] > 1  # it has seen the first iteration's returns
    # with policy phases of 2 iterations, a SIGTERM sent once the first checkpoint (iteration 1) exists is served at
    # the next safe point, the first minibatch of iteration 2's auxiliary phase: the checkpoint holds the whole
    # buffer (4 rollouts), pi_old's logits, and where to go on
    sigterm = load(Path(stopped("ppg_procgen.py")["run_dir"]) / "checkpoint.pt")
    assert sigterm["iteration"] == 2 and sigterm["global_step"] == 64
    assert sigterm["aux"]["obs"].shape == (4, 16, 3, 64, 64) and sigterm["aux"]["old_logits"].shape == (4, 16, 15)
    assert sigterm["aux_phase"]["epoch"] in (-1, 0), sigterm["aux_phase"]


@pytest.mark.parametrize("row", script_params(names(lambda row: row.resume and not row.saves_envs,
                                                 family="value")))
def test_an_atari_value_checkpoint_holds_the_frame_memory_and_learning_goes_on_at_once(row, resumed):
    run = resumed(row.name)
    killed = load(Path(run["killed"]) / "checkpoint.pt")
    # the games' state is not saved; the frame memory is, with its bookkeeping and its sampling Generator
    assert killed["envs"] is None and killed["updates"] == 25 and killed["global_step"] == killed["iteration"] == 200
    memory = killed["replay_buffer"]
    assert memory["frames"].dtype == torch.uint8 and memory["written"].sum().item() >= 200
    # the memory came back, so learning went on at once: (400 - 100) / 4 gradient steps over the whole run
    final = load(single_run_dir(run["cwd"]) / "checkpoint.pt")
    assert final["updates"] == 75


@pytest.mark.parametrize("row", script_params(["sac_continuous_action.py"]))
def test_a_sac_checkpoint_holds_the_learned_temperature(row, resumed, stopped):
    sigterm = load(Path(stopped(row.name)["run_dir"]) / "checkpoint.pt")
    assert sigterm["replay_buffer"] is None and sigterm["updates"] >= 20
    assert sigterm["updates"] == sigterm["global_step"] - 200
    assert sigterm["log_alpha"].shape == (1,)
    assert sigterm["a_optimizer"]["state"], "the temperature's optimizer has taken steps"
    final = load(single_run_dir(resumed(row.name)["cwd"]) / "checkpoint.pt")
    assert not torch.equal(final["log_alpha"], torch.zeros(1))


@pytest.mark.parametrize("row", script_params(["dqn.py"]))
def test_a_dqn_checkpoint_holds_the_replay_memory_only_with_save_buffer(row, resumed, stopped):
    sigterm = load(Path(stopped(row.name)["run_dir"]) / "checkpoint.pt")
    assert sigterm["replay_buffer"] is None and sigterm["updates"] >= 10
    assert sigterm["global_step"] >= 510 and sigterm["updates"] == cartpole_updates(sigterm["global_step"])
    logged = read_scalars(Path(stopped(row.name)["run_dir"]))["losses/td_loss"]
    assert logged and logged[-1][0] <= sigterm["global_step"]
    # with --save-buffer even the final checkpoint holds the whole memory: 2000 transitions in a memory of 10000
    final = load(single_run_dir(resumed(row.name)["cwd"]) / "checkpoint.pt")
    assert final["finished"] and final["replay_buffer"]["pos"] == 2000 and not final["replay_buffer"]["full"]


def test_aux_buffer_state_round_trip_holds_only_the_stored_iterations():
    n_iteration, num_envs, num_steps = 3, 2, 4
    buf = AuxBuffer(n_iteration, num_envs, num_steps, (1, 2, 2), n_actions=3)
    for it in range(2):  # two of the phase's three iterations stored, as at a checkpoint after its 2nd iteration
        code = torch.tensor([[it * 50 + env * 10 + step for env in range(num_envs)] for step in range(num_steps)])
        buf.store(it, code.to(torch.uint8)[:, :, None, None, None].expand(num_steps, num_envs, 1, 2, 2),
                  returns=code.float() / 2, valid=(code % 3 != 0))
    state = buf.state_dict()
    assert state["obs"].shape == (4, num_steps, 1, 2, 2) and state["returns"].shape == (4, num_steps)
    # copies, so torch.save writes these rows and not the whole (partly unfilled) buffer
    assert state["obs"].untyped_storage().nbytes() == 4 * num_steps * 4
    restored = AuxBuffer(n_iteration, num_envs, num_steps, (1, 2, 2), n_actions=3)
    restored.load_state_dict(state)
    rows = np.arange(4)
    for a, b in zip(buf.batch(rows, torch.device("cpu"))[:2], restored.batch(rows, torch.device("cpu"))[:2]):
        assert torch.equal(a, b)
    assert torch.equal(buf.valid[:4], restored.valid[:4])
    # row 3 = iteration 1, env 1: codes 60..63
    assert restored.obs[3, :, 0, 0, 0].tolist() == [60, 61, 62, 63]


def test_reward_normalizer_state_round_trip_restarts_the_running_returns():
    norm = RewardNormalizer(num_envs=2, gamma=0.5)
    for reward in ([2.0, 4.0], [1.0, -3.0], [0.5, 7.0]):
        norm(np.array(reward), done=np.zeros(2, bool), valid=np.ones(2, bool))
    state = norm.state_dict()
    assert all(type(v) is float for v in state.values())  # plain floats load with weights_only=True
    restored = RewardNormalizer(num_envs=2, gamma=0.5)
    restored.load_state_dict(state)
    assert (restored.mean, restored.var, restored.count) == (norm.mean, norm.var, norm.count)
    np.testing.assert_array_equal(restored.ret, [0.0, 0.0])  # new episodes after a resume
    # with the same statistics and the returns restarted, the next rewards are scaled the same way
    norm.ret[:] = 0.0
    step = (np.array([3.0, -1.0]), np.zeros(2, bool), np.ones(2, bool))
    np.testing.assert_array_equal(restored(*step), norm(*step))


# ---------------------------------------------------------------------------------------------------------------
# Bad lifecycle input: one `error:` line, exit 1, before any run directory
def bad(script: str, args, message: str, one_line: bool = True, exact: bool = False):
    return pytest.param(script, list(args), message, one_line, exact, id=f"{script[:-3]}:{' '.join(args)}",
                        marks=script_params([script])[0].marks)


# the rows' bad_lifecycle cases: what --resume and --eval-only name, another script's checkpoint, flags a resumed
# run may not change, the checkpoint flags
BAD_INPUT = [bad(row.name, c.args, c.message, c.one_line, c.exact) for row in SCRIPTS.values()
             for c in row.bad_lifecycle]


@pytest.mark.parametrize("script, args, message, one_line, exact", BAD_INPUT)
def test_bad_lifecycle_input_fails_in_one_line_before_any_run_directory(workdir, script, args, message, one_line,
                                                                        exact):
    common = {"run_name": "x", "iteration": 8, "global_step": 1024, "finished": False, "envs": None,
              "rng": checkpoints.rng_state(), "next_obs": torch.zeros(1)}
    def save(checkpoint: dict, name: str) -> None:  # as the scripts write them: sealed with their checksum
        checkpoints.save_checkpoint(checkpoint, str(workdir / name))

    save({"script": "ppo.py", "args": asdict(PPOArgs()), **common}, "ppo.pt")
    save({"script": "ppo.py", "args": asdict(PPOArgs()), **common, "finished": True}, "finished.pt")
    save({"script": "dqn.py", "args": asdict(DQNArgs()), **common}, "dqn.pt")
    (workdir / "dqn_run").mkdir()
    shutil.copy(workdir / "dqn.pt", workdir / "dqn_run" / "checkpoint.pt")
    if SCRIPTS[script].copied_from == "dqn.py":  # a copy's dqn.pt, which dqn.py's cases resume, is its own
        save({"script": script, "args": asdict(DQNArgs()), **common}, "dqn.pt")
    save({"script": "ppg_procgen.py", "args": asdict(PPGArgs()), **common}, "ppg.pt")
    (workdir / "garbage.pt").write_bytes(b"not a checkpoint")
    save({"actor.weight": torch.zeros(4, 512), "actor.bias": torch.zeros(4)}, "torch.cleanrl_model")  # a torch model
    (workdir / "hello.txt").write_text("hello world\n")
    save({"script": "ppo.py", "args": asdict(PPOArgs())}, "partial.pt")
    # TD3's and SAC's critics as checkpoints held them before they were stacked into one network: two of them (the
    # actor, restored first, is left out: None entries are not loaded)
    critics = {key: {"fc1.weight": torch.zeros(256, 4)} for key in ("qf1", "qf2", "qf1_target", "qf2_target")}
    for name, defaults in (("sac", SACArgs(env_id="Pendulum-v1")), ("td3", TD3Args(env_id="Pendulum-v1"))):
        save({"script": f"{name}_continuous_action.py", "args": asdict(defaults), **common, "actor": None, **critics},
             f"two_critics_{name}.pt")
        # and as they held them next: one network of both critics' weights stacked per layer (Pendulum: 3 + 1 inputs)
        shapes = {"w1": (2, 4, 256), "b1": (2, 1, 256), "w2": (2, 256, 256), "b2": (2, 1, 256), "w3": (2, 256, 1),
                  "b3": (2, 1, 1)}
        stacked = {key: {k: torch.zeros(shape) for k, shape in shapes.items()} for key in ("qf", "qf_target")}
        save({"script": f"{name}_continuous_action.py", "args": asdict(defaults), **common, "actor": None, **stacked},
             f"stacked_critics_{name}.pt")
    try:  # in this test process where the case fails before the run would start (most do), else as a process
        proc = assert_bad_input_rejected(script, args, message, workdir, one_line=one_line, in_process=True)
    except ReachedTheRun:  # it fails later (a checkpoint entry the restore reads): a real run is needed
        proc = assert_bad_input_rejected(script, args, message, workdir, one_line=one_line, timeout=120)
    if exact:
        assert proc.stderr.strip().splitlines()[-1] == message
