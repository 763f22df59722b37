# docs: tests/mutations.md
"""Deliberate bugs, one or more per kind of behaviour the test suite protects, and a check that the tests named for
each one catch it: before tests are cut or merged, and after, the same list says whether the suite still guards
every kind (tests/mutations.md has the list, the results and how they were measured).

For each mutation: the repository's files (tracked, and untracked ones git does not ignore) are copied into a fresh
temporary directory, so the working tree is never touched, even when interrupted; one exact string is replaced in
one file there (it must occur exactly once) or a file is added; then `python -m pytest -p no:xdist -q <node ids>`
runs in that copy with this Python (`-m heavy` for the tests the default run deselects). CAUGHT: pytest exits 1
with at least one failed test. MISSED: the tests pass. ERROR: anything else (a collection error, a named test that
is not found or deselected, a timeout).

Run:
    python tests/mutations.py --list
    python tests/mutations.py --dry-run                  # only apply each mutation to a copy: do the strings match?
    python tests/mutations.py --check-unmutated          # the named tests pass without the bugs
    python tests/mutations.py                            # every mutation
    python tests/mutations.py --only skip_optimizer_restore sigterm_exits_0
"""

import contextlib
import os
import re
import signal
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import tyro

ROOT = Path(__file__).resolve().parent.parent

KINDS = {
    "resume": "a resume restores everything the run had (networks, optimizer, counters, generators)",
    "signal": "SIGTERM/SIGINT/SIGHUP: a checkpoint, then exit 128 + signal",
    "flag-range": "a flag's declared range refuses what lies outside it",
    "gae": "advantages bootstrap a truncated episode and not a terminated one",
    "weights-only": "checkpoints and models are read with the weights-only unpickler",
    "docs-command": "every command the docs show parses (and, when cheap, runs)",
    "greedy-eval": "the evaluation runs the deterministic (greedy) policy",
    "logged-keys": "the TensorBoard keys each script logs, at their steps, documented",
    "progress": "the plain progress lines written into a log file",
    "one-line-errors": "bad input fails in one `error:` line, never a traceback",
    "registry": "every script of cleanrl/ has its row in tests/scripts.py",
    "compile-parity": "--compile computes what the plain path computes",
    "replay-sampling": "a replay memory samples only the transitions written",
    "c51-projection": "C51's categorical projection keeps all the mass",
    "run-lock": "one process at a time holds a run directory",
    "td-target": "DQN's TD target does not bootstrap past a termination",
    "gpu-path": "the GPU path (--cudagraphs replays, device memories) computes what the plain path computes",
    "determinism": "one seed gives one run: two processes of the same seed log the same losses on the CPU",
    "host-syncs": "a training step makes the host wait for the device only to copy its actions",
}


@dataclass(frozen=True)
class Mutation:
    name: str
    kind: str  # a key of KINDS
    file: str  # relative to the repository root
    old: Optional[str]  # the exact text replaced (it must occur once); None: `file` is added
    new: str  # its replacement, or (old None) the added file's text
    tests: tuple  # pytest node ids (a test function's id without parameters selects all of them)
    run: str = "default"  # "default": the default run holds the tests; "heavy": they are marked heavy
    keyword: Optional[str] = None  # a -k expression, where the mutation changes the ids of the tests (docs commands)
    copy_of: Optional[str] = None  # (old None) the added file is a copy of this one, `new` ignored
    why: str = ""  # how the tests see it


PPO_RUN = "tests/test_run.py::test_runs_through_updates_then_saves_evaluates_and_says_where_into_a_log_file[ppo.py]"

MUTATIONS = [
    Mutation(
        "skip_optimizer_restore", "resume", "cleanrl/runtime.py",
        "            if checkpoint is not None and obj is not None and checkpoint[key] is not None:\n",
        "            if checkpoint is not None and obj is not None and checkpoint[key] is not None "
        "and \"optimizer\" not in key:\n",
        ("tests/test_lifecycle.py::test_killed_and_resumed_equals_an_uninterrupted_run[ppo.py]",),
        why="Adam restarts from zero moments: the resumed run's networks and checkpoint differ from the "
            "uninterrupted run's (assert_same_run)"),
    Mutation(
        "sigterm_exits_0", "signal", "cleanrl/runtime.py",
        "self.received, self.exit_status = signal.Signals(signum).name, 128 + signum\n",
        "self.received, self.exit_status = signal.Signals(signum).name, (\n"
        "                0 if signum == signal.SIGTERM else 128 + signum)\n",
        ("tests/test_lifecycle.py::test_sigterm_saves_a_loadable_checkpoint_and_exits_143[ppo.py]",),
        why="tests/helpers.py stop() requires exit 128 + signal"),
    Mutation(
        "dqn_tau_range_takes_0", "flag-range", "cleanrl/dqn.py",
        '    tau: Annotated[float, Range("(0, 1]")] = 1.0\n',
        '    tau: Annotated[float, Range("[0, 1]")] = 1.0\n',
        ("tests/test_bad_input.py::test_bad_input_fails_in_one_line_before_any_run_directory[dqn --tau 0]",),
        why="dqn.py --tau 0 starts its default 500k-step run instead of failing: the test's 120 s timeout ends it "
            "(a slow catch, about 2 minutes)"),
    Mutation(
        "open_lower_end_taken_as_closed", "flag-range", "cleanrl/flags.py",
        "(low <= value if interval[0] == \"[\" else low < value)",
        "low <= value",
        ("tests/test_runtime.py::test_flag_ranges_take_their_ends_as_declared_and_refuse_what_lies_outside",
         "tests/test_runtime.py::test_ranges_read_as_words"),
        why="every range that excludes its lower end ((0, inf), (0, 1]) takes 0"),
    Mutation(
        "ppo_truncation_not_bootstrapped", "gae", "cleanrl/ppo.py",
        "            next_values = torch.where(truncated, final_values, next_values)\n",
        "",
        ("tests/test_ppo.py::test_a_truncated_episode_bootstraps_from_its_final_observation_in_the_loop[ppo.py]",
         "tests/test_ppo.py::test_gae_with_a_truncated_and_a_terminated_episode_in_one_rollout",
         PPO_RUN,
         "tests/test_lifecycle.py::test_killed_and_resumed_equals_an_uninterrupted_run[ppo.py]"),
        why="a truncated step then bootstraps from V(the next episode's first observation). No ppo.py run of the "
            "suite reaches a truncation (CartPole cuts episodes at 500 steps, beyond every test's episodes), and "
            "the GAE tests call compute_gae with next_values made by hand"),
    Mutation(
        "ppo_continuous_truncation_not_bootstrapped", "gae", "cleanrl/ppo_continuous_action.py",
        "            next_values = torch.where(truncated, final_values, next_values)\n",
        "",
        ("tests/test_ppo.py::test_a_truncated_episode_bootstraps_from_its_final_observation_in_the_loop"
         "[ppo_continuous_action.py]",
         "tests/test_ppo_continuous_action.py::test_truncation_bootstrap_sees_final_obs_normalized_like_the_policy_"
         "inputs",
         "tests/test_ppo_continuous_action.py::test_the_saved_model_holds_the_agent_and_both_normalization_statistics",
         "tests/test_run.py::test_runs_through_updates_then_saves_evaluates_and_says_where_into_a_log_file"
         "[ppo_continuous_action.py]",
         "tests/test_lifecycle.py::test_killed_and_resumed_equals_an_uninterrupted_run[ppo_continuous_action.py]"),
        why="the same line where the tests do reach a truncation (Pendulum's 200-step limit): exercised, but no "
            "test compares the bootstrapped values with ones computed another way"),
    Mutation(
        "gae_truncation_as_termination", "gae", "cleanrl/ppo.py",
        "    deltas = rewards + gamma * next_values * (1.0 - terminations) - values\n",
        "    deltas = rewards + gamma * next_values * (1.0 - dones) - values\n",
        ("tests/test_ppo.py::test_gae_with_a_truncated_and_a_terminated_episode_in_one_rollout",),
        why="compute_gae drops the bootstrap at a truncation as at a termination"),
    Mutation(
        "truncation_final_obs_dropped", "gae", "cleanrl/environments.py",
        "        if not truncated.any():\n            return None\n",
        "        return None\n",
        ("tests/test_ppo.py::test_the_envs_on_the_device_hand_over_a_truncated_episodes_final_observation",),
        why="the envs on the device never hand over a truncated episode's final observation, so the PPO loops "
            "bootstrap a time limit from 0"),
    Mutation(
        "weights_only_off", "weights-only", "cleanrl/checkpoints.py",
        'torch.load(path, map_location="cpu", weights_only=True, mmap=is_zip)',
        'torch.load(path, map_location="cpu", weights_only=False, mmap=is_zip)',
        ("tests/test_integrity.py::test_a_planted_pickle_in_a_checkpoint_or_model_never_runs",),
        why="the planted payload is unpickled (and runs) instead of being refused in one line"),
    Mutation(
        "docs_flag_misspelled", "docs-command", "docs/rl-algorithms/dqn.md",
        "python cleanrl/dqn.py --env-id CartPole-v1 --compile\n",
        "python cleanrl/dqn.py --env-id CartPole-v1 --complie\n",
        ("tests/test_docs.py::test_shown_command_works",),
        keyword="dqn.md and CartPole-v1 and (compile or complie)",
        why="the command is parsed by dqn.py's own Args; the test id holds the command, hence -k"),
    Mutation(
        "ppo_eval_samples", "greedy-eval", "cleanrl/ppo.py",
        "        return self.actor(x).argmax(dim=-1)\n",
        "        return Categorical(logits=self.actor(x)).sample()\n",
        ("tests/test_ppo.py::test_the_evaluation_acts_greedily_and_draws_no_random_number",
         "tests/test_lifecycle.py::test_eval_only_on_a_run_directory_and_on_its_model_file[ppo.py]",
         PPO_RUN),
        why="the evaluation samples from torch's seeded generator, so it is still repeatable; the greedy-policy "
            "test checks the policy evaluate() hands over (argmax, no draw)"),
    Mutation(
        "value_loss_key_renamed", "logged-keys", "cleanrl/ppo.py",
        '            "losses/value_loss": v_loss.item(),\n',
        '            "losses/v_loss": v_loss.item(),\n',
        (PPO_RUN, "tests/test_docs.py::test_every_logged_key_is_documented[ppo.py]"),
        why="the row's losses (tests/scripts.py) and the docs' key tables name losses/value_loss"),
    Mutation(
        "no_progress_lines_in_a_log_file", "progress", "cleanrl/run_log.py",
        "if not self.enabled or too_soon or last and not self.terminal:",
        "if not self.enabled or too_soon or not self.terminal:",
        ("tests/test_runtime.py::test_progress_plain_lines_at_the_interval", PPO_RUN),
        why="off a terminal nothing is printed; the run's log has no `progress:` line"),
    Mutation(
        "range_error_is_a_traceback", "one-line-errors", "cleanrl/flags.py",
        "                fail(f\"{flag} must be {'at least' if interval[0] == '[' else 'above'} {low:g}, "
        "got {value}\")\n",
        "                raise ValueError(f\"{flag} must be {'at least' if interval[0] == '[' else 'above'} {low:g}, "
        "got {value}\")\n",
        ("tests/test_bad_input.py::test_bad_input_fails_in_one_line_before_any_run_directory[ppo --learning-rate -1]",),
        why="the last stderr line is `ValueError: ...`, not `error: ...`"),
    Mutation(
        "script_without_a_row", "registry", "cleanrl/double_dqn.py", None, "",
        ("tests/test_registry.py::test_every_script_of_cleanrl_has_one_row_in_the_table_of_scripts",),
        copy_of="cleanrl/dqn.py",
        why="a new script copied from dqn.py with no row in tests/scripts.py"),
    Mutation(
        "compiled_random_ops_differ", "compile-parity", "cleanrl/speed.py",
        "            torch._inductor.config.fallback_random = True\n",
        "            torch._inductor.config.fallback_random = False\n",
        ("tests/test_compile.py::test_compile_logs_the_same_losses_as_the_plain_path[td3_continuous_action.py]",),
        run="heavy",
        why="on the CPU the compiled randn_like (TD3's exploration and smoothing noise) draws from inductor's own "
            "generator: other actions, other losses. ppo.py's compiled multinomial is an eager fallback either way, "
            "so the default run's one --compile test (a ppo.py resume) cannot see it"),
    Mutation(
        "recorder_replays_stale_inputs", "gpu-path", "cleanrl/speed.py",
        "                torch._foreach_copy_([s for s, _ in pairs], [a for _, a in pairs])\n",
        "                pass\n",
        ("tests/test_standin.py::test_the_recorder_calls_its_function_on_the_same_tensors_from_the_first_call_on",),
        why="--cudagraphs replays on the inputs of its recording call: the same policy step and update again"),
    Mutation(
        "replay_samples_unwritten_slots", "replay-sampling", "cleanrl/replay_memory.py",
        "        idx = self.rng.integers(0, len(self), size=batch_size)\n",
        "        idx = self.rng.integers(0, self.buffer_size, size=batch_size)\n",
        ("tests/test_replay_buffer.py::test_before_wrapping_only_written_slots_are_sampled",),
        why="before the ring is full, zeros from unwritten slots are sampled"),
    Mutation(
        "c51_mass_lost_on_an_atom", "c51-projection", "cleanrl/c51.py",
        "    m_lower = (upper - b + (lower == upper).float()) * next_pmfs\n",
        "    m_lower = (upper - b) * next_pmfs\n",
        ("tests/test_c51.py::test_projection_by_hand_between_and_outside_the_support",
         "tests/test_c51.py::test_projection_keeps_mass_and_matches_a_loop_over_atoms"),
        why="where b_j lands exactly on an atom (l = u) its mass p_j is dropped"),
    Mutation(
        "run_lock_shared", "run-lock", "cleanrl/checkpoints.py",
        "        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n",
        "        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)\n",
        ("tests/test_integrity.py::test_two_processes_resuming_one_run_one_gets_the_lock_the_other_an_error",),
        why="a second resume of the same run gets the lock too"),
    Mutation(
        "td_target_bootstraps_past_termination", "td-target", "cleanrl/dqn.py",
        "    return rewards + gamma * next_q_target.max(dim=1).values * (1.0 - terminations)\n",
        "    return rewards + gamma * next_q_target.max(dim=1).values\n",
        ("tests/test_dqn.py::test_td_target_bootstraps_unless_terminated",),
        why="a terminal transition's target adds gamma * max Q(s')"),
    Mutation(
        "torch_seed_per_process", "determinism", "cleanrl/runtime.py",
        "    torch.manual_seed(seed)\n",
        "    torch.manual_seed(seed + os.getpid())\n",
        ("tests/test_lifecycle.py::test_killed_and_resumed_equals_an_uninterrupted_run[sac_continuous_action.py]",),
        why="the networks start from other weights in each process: the uninterrupted run and the killed one differ "
            "(the same-seed test in the heavy run leaves out the rows whose resume shows this)"),
    Mutation(
        "dqn_reads_its_loss_at_every_update", "host-syncs", "cleanrl/dqn.py",
        "                updates += 1\n",
        "                updates += 1 if loss.item() == loss.item() else 1\n",
        ("tests/test_host_syncs.py::test_a_training_step_synchronises_only_to_copy_its_actions[dqn.py]",),
        run="heavy",
        why="the census finds a read of the loss on every gradient step, more occasions than the run's logging "
            "points"),
]


@dataclass
class Args:
    only: tuple[str, ...] = ()
    """run only these mutations (by name)"""
    list: bool = False
    """list the mutations and their tests, and run nothing"""
    check_unmutated: bool = False
    """run each mutation's tests on an unmutated copy instead: every one must pass"""
    dry_run: bool = False
    """only copy the repository and apply each mutation (its text must occur exactly once); run no test"""
    timeout: float = 3600.0
    """seconds one pytest run may take before it counts as an ERROR"""
    logs: Optional[str] = None
    """a directory to write each pytest run's output to (<name>.log, or <name>.unmutated.log)"""
    keep: bool = False
    """keep the temporary copies (their paths are printed)"""


@dataclass
class Outcome:
    verdict: str  # CAUGHT, MISSED, ERROR (mutated); PASS, FAIL, ERROR (unmutated)
    seconds: float
    detail: str = ""
    failed: list = field(default_factory=list)


def fail(message: str):
    raise SystemExit(f"error: {message}")


def repository_files() -> list[str]:
    """The tracked files that exist in the working tree and the untracked ones git does not ignore."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                         capture_output=True, check=True).stdout
    return sorted({name for name in out.decode().split("\0") if name and os.path.lexists(ROOT / name)})


def copy_repository(files: list[str]) -> Path:
    copy = Path(tempfile.mkdtemp(prefix="cleanrl-mutation-"))
    for name in files:
        target = copy / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, target, follow_symlinks=False)
    return copy


def apply(mutation: Mutation, copy: Path) -> None:
    path = copy / mutation.file
    if mutation.old is None:
        if path.exists():
            fail(f"{mutation.name}: {mutation.file} exists already; the mutation adds it")
        path.write_text((copy / mutation.copy_of).read_text() if mutation.copy_of else mutation.new)
        return
    if not path.is_file():
        fail(f"{mutation.name}: {mutation.file} does not exist")
    text = path.read_text()
    count = text.count(mutation.old)
    if count != 1:
        fail(f"{mutation.name}: the text to replace occurs {count} times in {mutation.file}, not once: "
             f"{mutation.old!r}")
    path.write_text(text.replace(mutation.old, mutation.new))


SUMMARY_COUNT = re.compile(r"(\d+) (failed|passed|skipped|deselected|errors?|xfailed|xpassed)\b")


def run_tests(mutation: Mutation, copy: Path, timeout: float) -> tuple[int, dict, list, str, float]:
    """(exit status, counts by outcome, failed node ids, output, seconds) of pytest on the mutation's tests."""
    command = [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
               f"--basetemp={copy.parent / (copy.name + '-basetemp')}"]
    if mutation.run == "heavy":
        command += ["-m", "heavy"]
    if mutation.keyword:
        command += ["-k", mutation.keyword]
    command += list(mutation.tests)
    start = time.monotonic()
    # a session of its own: whatever the tests start and leave running (a test that fails while a second run
    # is still going) is ended with it, by its process group
    proc = subprocess.Popen(command, cwd=copy, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return -1, {}, [], output + f"\n(timed out after {timeout:g} s)", time.monotonic() - start
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    seconds = time.monotonic() - start
    lines = output.strip().splitlines()
    counts = {}
    for line in reversed(lines):  # the last line with counts is pytest's summary
        found = SUMMARY_COUNT.findall(line)
        if found and (" in " in line or line.startswith("=")):
            counts = {kind.rstrip("s") if kind.startswith("error") else kind: int(n) for n, kind in found}
            break
    failed = [line[len("FAILED "):].split(" - ")[0] for line in lines if line.startswith("FAILED ")]
    return proc.returncode, counts, failed, output, seconds


def judge(mutation: Mutation, rc: int, counts: dict, unmutated: bool) -> tuple[str, str]:
    """(verdict, detail) of one pytest run."""
    described = ", ".join(f"{n} {k}" for k, n in counts.items()) or "no summary"
    if rc == -1:
        return "ERROR", "timed out"
    if counts.get("deselected") and not mutation.keyword:
        return "ERROR", f"{described}: a named test is not in the {mutation.run} run"
    if rc not in (0, 1):
        reason = {2: "interrupted (a collection error?)", 3: "internal error", 4: "usage error (a test not found?)",
                  5: "no tests ran"}.get(rc, f"exit {rc}")
        return "ERROR", f"{reason}; {described}"
    if counts.get("error"):
        return "ERROR", f"errors in set-up or tear-down; {described}"
    if unmutated:
        if rc == 0 and not counts.get("skipped"):
            return "PASS", described
        return "FAIL", described
    if rc == 1 and counts.get("failed"):
        return "CAUGHT", described
    if rc == 0:
        return "MISSED", described
    return "ERROR", described


def check(mutation: Mutation, files: list[str], args: Args, copy: Optional[Path] = None) -> Outcome:
    """Apply the mutation to a fresh copy (or, unmutated, use `copy`) and run its tests there."""
    unmutated = copy is not None
    own = copy is None
    copy = copy or copy_repository(files)
    try:
        if not unmutated:
            apply(mutation, copy)
        if args.dry_run:
            return Outcome("APPLIES", 0.0)
        rc, counts, failed, output, seconds = run_tests(mutation, copy, args.timeout)
        if args.logs:
            Path(args.logs).mkdir(parents=True, exist_ok=True)
            suffix = ".unmutated.log" if unmutated else ".log"
            (Path(args.logs) / f"{mutation.name}{suffix}").write_text(output)
        verdict, detail = judge(mutation, rc, counts, unmutated)
        if verdict in ("ERROR", "FAIL"):
            detail += "\n    " + "\n    ".join(output.strip().splitlines()[-15:])
        return Outcome(verdict, seconds, detail, failed)
    finally:
        if own and args.keep:
            print(f"  (copy kept at {copy})")
        elif own:
            shutil.rmtree(copy, ignore_errors=True)
            shutil.rmtree(copy.parent / (copy.name + "-basetemp"), ignore_errors=True)


def main(args: Args) -> int:
    names = {m.name for m in MUTATIONS}
    assert len(names) == len(MUTATIONS), "two mutations share a name"
    assert all(m.kind in KINDS and m.run in ("default", "heavy") for m in MUTATIONS)
    unknown = sorted(set(args.only) - names)
    if unknown:
        fail(f"no mutation named {', '.join(unknown)}; --list shows them")
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    if args.list:
        for m in chosen:
            where = f" -k {m.keyword!r}" if m.keyword else ""
            print(f"{m.name}  [{m.kind}, {m.run} run]  {m.file}\n    " + "\n    ".join(m.tests) + where)
        return 0
    files = repository_files()
    shared = copy_repository(files) if args.check_unmutated else None
    counts: dict[str, int] = {}
    try:
        for m in chosen:
            outcome = check(m, files, args, shared)
            counts[outcome.verdict] = counts.get(outcome.verdict, 0) + 1
            caught_by = f"  by {', '.join(outcome.failed)}" if outcome.verdict == "CAUGHT" else ""
            timing = "" if args.dry_run else f" {outcome.seconds:.0f} s: {outcome.detail}{caught_by}"
            print(f"{outcome.verdict:7} {m.name} [{m.kind}, {m.run} run]{timing}", flush=True)
    finally:
        if shared is not None and args.keep:
            print(f"(unmutated copy kept at {shared})")
        elif shared is not None:
            shutil.rmtree(shared, ignore_errors=True)
            shutil.rmtree(shared.parent / (shared.name + "-basetemp"), ignore_errors=True)
    if args.dry_run:
        print(f"{counts.get('APPLIES', 0)} of {len(chosen)} mutations apply")
        return 0
    if args.check_unmutated:
        print(f"{counts.get('PASS', 0)} pass, {counts.get('FAIL', 0)} fail"
              + (f", {counts['ERROR']} errors" if counts.get("ERROR") else ""))
        return 0 if counts.get("PASS", 0) == len(chosen) else 1
    print(f"{counts.get('CAUGHT', 0)} caught, {counts.get('MISSED', 0)} missed"
          + (f", {counts['ERROR']} errors" if counts.get("ERROR") else ""))
    return 0 if counts.get("CAUGHT", 0) == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main(tyro.cli(Args)))
