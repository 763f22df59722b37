"""The tuner (benchmark/tuner.py, docs/tuning.md): trials are real runs of a script, read back from their event files;
a pruned run is stopped by SIGTERM and ends cleanly; stores are SQLite and a real PostgreSQL server with several
worker processes; a killed worker's trial is retried; a study continues; bad input stops before any trial; the study
opens in optuna-dashboard in a real headless Chromium."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

optuna = pytest.importorskip("optuna", reason="optional dependency: optuna (pip install -e '.[tune]')")

from benchmark import tuner as tuning  # noqa: E402
from tests import prestart  # noqa: E402
from tests.helpers import script_env  # noqa: E402
from tests.test_docs_layout import browser, needs_browser  # noqa: E402, F401  (the fixture: Debian's Chromium)

ROOT = Path(__file__).resolve().parent.parent
PPO = str(ROOT / "cleanrl" / "ppo.py")
# a constant learning rate, logged as charts/learning_rate every iteration of 512 steps: a metric every trial reaches
# at the same steps with the value the trial chose, so which trials the median pruner stops is known in advance
LR_RUN = ("--total-timesteps", "8192", "--no-anneal-lr")


def forked(cmd, cwd, env, stdout, stderr):
    """The tuner's runs forked from a prestarted interpreter (tests/prestart.py): the same process, a faster start."""
    return prestart.popen(cmd, cwd, dict(env, **script_env()), stdout=stdout, stderr=stderr)


def lr_tuner(out: Path, **kwargs) -> tuning.Tuner:
    settings = dict(script=PPO, env_ids=["CartPole-v1"], metric="charts/learning_rate", flags=LR_RUN,
                    params_fn=lambda t: {"learning-rate": t.suggest_float("learning-rate", 1e-6, 1e-2, log=True)},
                    pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0),
                    metric_last_n_average_window=4, report_interval=0.1, reports_per_run=8, out=str(out),
                    popen=forked, quiet=True)
    return tuning.Tuner(**{**settings, **kwargs})


def trials_of(tuner: tuning.Tuner) -> list:
    return optuna.load_study(study_name=tuner.study_name, storage=tuner.storage).trials


def test_a_pruned_trial_ends_by_sigterm_and_the_study_continues(tmp_path):
    """Six trials, the script's default first; the median pruner stops the two with the lowest learning rates
    (below the median of the earlier trials at their first report): their run gets SIGTERM, exits 143 cleanly, and
    the trial is recorded as pruned. The same command again continues the study with one more trial."""
    tuner = lr_tuner(tmp_path)
    study = tuner.open_study(tuner.check())
    for lr in (1e-3, 1e-2, 1e-5, 3e-3, 1e-6):  # after trial 0, the script's default 2.5e-4
        study.enqueue_trial({"learning-rate": lr})
    best = tuner.tune(6)
    trials = trials_of(tuner)
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE", "COMPLETE", "PRUNED", "COMPLETE", "PRUNED"]
    assert trials[0].user_attrs["defaults"] and trials[0].params == {"learning-rate": 2.5e-4}
    assert best.number == 2 and best.value == pytest.approx(1e-2)
    for trial in trials:
        run = trial.user_attrs["runs"][0]
        log = (Path(run["workdir"]) / "log.txt").read_text()
        if trial.state.name == "PRUNED":
            assert run["exit_code"] == 143 and run["pruned"], (run, log)
            assert "SIGTERM: stopped after global step" in log, log
            assert run["last_step"] < 8192 and trial.user_attrs["pruned_by"] == "SIGTERM"
            assert len(trial.intermediate_values) < 8
        else:  # reported at the same 8 steps of the run, whenever the tuner read the events
            assert run["exit_code"] == 0 and "done: 8192 steps" in log, log
            assert sorted(trial.intermediate_values) == [1024 * k for k in range(1, 9)]
            assert trial.value == pytest.approx(trial.params["learning-rate"])
    # the kept file of every run, as benchmark/report.py reads it
    kept = json.loads((tmp_path / "ppo" / "kept" / "trial2" / "CartPole-v1" / "seed1.json").read_text())
    assert kept["command"][1:] == ["cleanrl/ppo.py", *LR_RUN, "--learning-rate", "0.01", "--env-id", "CartPole-v1",
                                   "--seed", "1"]
    # resumed: the same command asks for 7 finished trials and runs exactly one more
    again = lr_tuner(tmp_path)
    again.tune(7)
    assert [t.number for t in trials_of(again)] == list(range(7))
    assert trials_of(again)[6].state.name in ("COMPLETE", "PRUNED")


def test_bad_input_stops_before_any_trial(tmp_path):
    """A flag the script does not have, a range outside the flag's own, a store that cannot be reached, a study of
    the other direction: one `error:` line each, and no trial started."""
    cases = {
        "--learning-rat is not a flag of": dict(
            params_fn=lambda t: {"learning-rat": t.suggest_float("learning-rat", 1e-4, 1e-3)}),
        "--gamma is tuned over 0.9..1.5, outside the flag's range [0, 1]": dict(
            params_fn=lambda t: {"gamma": t.suggest_float("gamma", 0.9, 1.5)}),
        "--num-steps takes an integer": dict(params_fn=lambda t: {"num-steps": t.suggest_float("num-steps", 64, 256)}),
        "cannot open the store postgresql://tuner:***@127.0.0.1:1/study": dict(
            storage="postgresql://tuner:secret@127.0.0.1:1/study"),
        "is one to maximize, not to minimize": dict(direction="minimize"),
        "give target scores for Pendulum-v1": dict(env_ids=["CartPole-v1", "Pendulum-v1"]),
    }
    (tmp_path / "ppo").mkdir()
    optuna.create_study(study_name="ppo", storage=f"sqlite:///{tmp_path / 'ppo' / 'study.db'}", direction="maximize")
    for message, change in cases.items():
        with pytest.raises(SystemExit) as stop:
            lr_tuner(tmp_path, **change).tune(3)
        text = str(stop.value.code)
        assert text.startswith("error: ") and message in text and "\n" not in text, (message, text)
    assert not list(tmp_path.rglob("trial*")), "a trial started"
    assert optuna.load_study(study_name="ppo", storage=f"sqlite:///{tmp_path / 'ppo' / 'study.db'}").trials == []
    # on the command line: the one line on stderr, exit 1
    proc = subprocess.run([sys.executable, str(ROOT / "benchmark" / "tuner.py"), "tune", "--script", PPO,
                           "--params", "gamma=float:0.5:2", "--out", str(tmp_path / "cli")],
                          capture_output=True, text=True, timeout=120, env=script_env())
    assert proc.returncode == 1 and proc.stderr.strip().splitlines() == [
        "error: --gamma is tuned over 0.5..2.0, outside the flag's range [0, 1]"], proc.stderr
    assert not (tmp_path / "cli" / "ppo").exists() or not list((tmp_path / "cli").rglob("trial*"))


# ---------------------------------------------------------------------------------------------------------------
# Many workers on a real PostgreSQL server (Debian's package: apt-get install postgresql), started and stopped here
def postgres_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return found[-1].parent if found else (Path(shutil.which("pg_ctl")).parent if shutil.which("pg_ctl") else None)


needs_postgres = pytest.mark.skipif(postgres_bin() is None,
                                    reason="optional dependency: PostgreSQL (apt-get install postgresql)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL server on a loopback port; its URL. PostgreSQL refuses to run as root, so as root the
    server runs as the `postgres` user Debian's package creates, in a folder of its own directly in the temporary
    directory (pytest's folders are root's alone)."""
    pytest.importorskip("psycopg", reason="optional dependency: psycopg (pip install -e '.[tune]')")
    folder = Path(tempfile.mkdtemp(prefix="tuner-postgres-"))
    as_user = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    data, port, bin_dir = folder / "data", free_port(), postgres_bin()
    subprocess.run([*as_user, bin_dir / "initdb", "-D", data, "-A", "trust", "-U", "tuner", "--no-sync"], check=True,
                   capture_output=True)
    subprocess.run([*as_user, bin_dir / "pg_ctl", "-D", data, "-l", folder / "log", "-w", "start", "-o",
                    f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"],
                   check=True, capture_output=True)
    yield f"postgresql://tuner@127.0.0.1:{port}/postgres"
    subprocess.run([*as_user, bin_dir / "pg_ctl", "-D", data, "-m", "immediate", "-w", "stop"], capture_output=True)
    shutil.rmtree(folder, ignore_errors=True)


def tuner_command(out: Path, storage: str, *extra: str) -> list[str]:
    return [sys.executable, str(ROOT / "benchmark" / "tuner.py"), "tune", "--script", PPO, "--storage", storage,
            "--out", str(out), "--params", "learning-rate=log:1e-4:1e-2", "--flags=--total-timesteps 2048",
            "--report-interval", "0.5", *extra]


@pytest.fixture(scope="module")
def worked_study(postgres, tmp_path_factory):
    """Three tuner processes on one study in PostgreSQL, 6 trials between them."""
    out = tmp_path_factory.mktemp("workers")
    workers = [subprocess.Popen(tuner_command(out / f"w{i}", postgres, "--trials", "6", "--study-name", "three"),
                                env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in range(3)]
    outputs = [w.communicate(timeout=600) for w in workers]
    for w, (stdout, stderr) in zip(workers, outputs):
        assert w.returncode == 0, stdout + stderr
    return postgres, out, outputs


@pytest.mark.heavy
@needs_postgres
def test_three_workers_run_one_study_in_postgresql(worked_study):
    storage, out, outputs = worked_study
    trials = optuna.load_study(study_name="three", storage=storage).trials
    done = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(done) >= 6 and not [t for t in trials if t.state.name in ("FAIL", "RUNNING", "WAITING")]
    assert len({t.user_attrs["worker"] for t in done}) == 3, "the three workers did not share the trials"
    assert len({t.number for t in trials}) == len(trials)
    for stdout, stderr in outputs:  # every worker ends with the study's best, as a command line
        assert "python cleanrl/ppo.py --total-timesteps 2048 --learning-rate" in stdout, stdout + stderr
    # `best` reads the same study from the store
    best = subprocess.run([sys.executable, str(ROOT / "benchmark" / "tuner.py"), "best", "--study-name", "three",
                           "--storage", storage], capture_output=True, text=True, timeout=120)
    assert best.returncode == 0 and best.stdout.splitlines()[1].startswith("python cleanrl/ppo.py"), best.stderr


@pytest.mark.heavy
@needs_postgres
def test_a_killed_workers_trial_is_failed_and_retried(postgres, tmp_path):
    """kill -9 of a worker in the middle of a trial: its run ends with it (SIGTERM from the kernel), the trial's
    heartbeat stops, and the next worker marks the trial failed and runs its flags again as a retry."""
    study_name = "killed"
    first = subprocess.Popen(tuner_command(tmp_path / "a", postgres, "--trials", "1", "--study-name", study_name,
                                           "--heartbeat-interval", "1", "--grace-period", "2"),
                             env=script_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "a" / study_name / "trial0" / "CartPole-v1" / "seed1" / "log.txt"
    deadline = time.time() + 120
    while not (log.exists() and "$ cd" in log.read_text()):
        assert first.poll() is None and time.time() < deadline, first.stderr.read()
        time.sleep(0.05)
    first.kill()
    first.wait()
    time.sleep(3)  # past the grace period: the trial's heartbeat is stale
    second = subprocess.run(tuner_command(tmp_path / "b", postgres, "--trials", "1", "--study-name", study_name,
                                          "--heartbeat-interval", "1", "--grace-period", "2"),
                            env=script_env(), capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stdout + second.stderr
    trials = optuna.load_study(study_name=study_name, storage=postgres).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].params == trials[0].params and trials[1].user_attrs["retry_of"] == 0
    assert optuna.storages.RetryHeartbeatStaleTrialCallback.retried_trial_number(trials[1]) == 0
    # the killed worker's run did not go on as an orphan
    assert "done:" not in log.read_text()


@pytest.mark.heavy
@needs_postgres
@needs_browser
def test_the_study_opens_in_optuna_dashboard(postgres, browser, tmp_path):
    """optuna-dashboard serves a small study of the tuner from PostgreSQL; Chromium loads it, shows the study and its
    trials, and the screenshot is saved."""
    pytest.importorskip("optuna_dashboard", reason="optional dependency: optuna-dashboard (pip install -e '.[tune]')")
    storage = postgres
    # a study of its own: the module's server also holds the workers' study "three", whose command differs
    lr_tuner(tmp_path, storage=storage, study_name="lr-study").tune(3)
    port = free_port()
    dashboard = subprocess.Popen([str(Path(sys.executable).parent / "optuna-dashboard"), storage, "--host",
                                  "127.0.0.1", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
    try:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        deadline = time.time() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert dashboard.poll() is None and time.time() < deadline, dashboard.stdout.read()
                time.sleep(0.2)
        browser.get(f"http://127.0.0.1:{port}/dashboard")
        WebDriverWait(browser, 60).until(lambda b: "lr-study" in b.find_element(By.TAG_NAME, "body").text)
        study_id = optuna.load_study(study_name="lr-study", storage=storage)._study_id
        browser.get(f"http://127.0.0.1:{port}/dashboard/studies/{study_id}")
        WebDriverWait(browser, 60).until(lambda b: "learning-rate" in b.find_element(By.TAG_NAME, "body").text)
        shot = tmp_path / "dashboard.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        dashboard.send_signal(signal.SIGTERM)
        dashboard.wait(timeout=30)


@pytest.mark.heavy
def test_a_stopped_tuner_continues_its_trial_from_the_checkpoint(tmp_path):
    """SIGTERM to the tuner in the middle of a run that checkpoints: the run saves and exits 143, the trial is marked
    failed and its flags queued; the same command again repeats the trial, whose run continues from its checkpoint
    instead of starting over."""
    command = [sys.executable, str(ROOT / "benchmark" / "tuner.py"), "tune", "--script", PPO, "--out", str(tmp_path),
               "--params", "learning-rate=log:1e-4:1e-2", "--flags=--total-timesteps 10240 --eval-episodes 1",
               "--checkpoint-frequency", "2", "--trials", "1", "--report-interval", "0.5"]
    tuner = subprocess.Popen(command, env=script_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    workdir = tmp_path / "ppo" / "trial0" / "CartPole-v1" / "seed1"
    deadline = time.time() + 120
    while not list(workdir.glob("runs/*/checkpoint.pt")):
        assert tuner.poll() is None and time.time() < deadline, tuner.communicate()
        time.sleep(0.05)
    tuner.send_signal(signal.SIGTERM)
    stdout, stderr = tuner.communicate(timeout=120)
    assert tuner.returncode == 143, stdout + stderr
    assert "SIGTERM: stopped after global step" in (workdir / "log.txt").read_text()
    again = subprocess.run(command, env=script_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    storage = f"sqlite:///{tmp_path / 'ppo' / 'study.db'}"
    trials = optuna.load_study(study_name="ppo", storage=storage).trials
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].params == trials[0].params and trials[1].user_attrs["retry_of"] == 0
    assert trials[1].user_attrs["home_trial"] == 0 and trials[1].user_attrs["defaults"]
    log = (workdir / "log.txt").read_text()
    assert "; resuming CartPole-v1__ppo__1__" in log and "done: 10240 steps" in log, log
    assert trials[1].user_attrs["runs"][0]["last_step"] >= 10000


def test_the_store_url_comes_from_aws_secrets_manager(tmp_path, monkeypatch):
    """--storage-secret: the URL as the secret's text, or an RDS-managed secret's JSON; a missing secret is one error
    line. Against moto's Secrets Manager, in process."""
    moto = pytest.importorskip("moto", reason="optional dependency: moto (pip install -e '.[dev]')")
    import boto3

    for key, value in dict(AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="testing",
                           AWS_SECRET_ACCESS_KEY="testing").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        secrets = boto3.client("secretsmanager")
        url = f"sqlite:///{tmp_path / 'shared.db'}"
        secrets.create_secret(Name="tuner/url", SecretString=url)
        secrets.create_secret(Name="tuner/rds", SecretString=json.dumps(
            {"engine": "postgres", "host": "db.internal", "port": 5432, "username": "tuner", "password": "p@ss/word",
             "dbname": "tuning"}))
        args = tyro_args("tune", "--script", PPO, "--params", "learning-rate=log:1e-4:1e-2", "--out", str(tmp_path),
                         "--pruner", "none", "--no-enqueue-defaults",
                         "--storage-secret", "tuner/url")
        tuner = tuning.tuner_from(args)
        assert tuner.storage == url
        tuner.open_study({})  # the study only (its flag checks are test_bad_input_stops_before_any_trial's)
        assert optuna.load_study(study_name="ppo", storage=url).user_attrs["command"]["script"] == "cleanrl/ppo.py"
        assert tuning.storage_from_secret("tuner/rds") == "postgresql://tuner:p%40ss%2Fword@db.internal:5432/tuning"
        with pytest.raises(SystemExit) as stop:
            tuning.storage_from_secret("tuner/none")
        assert str(stop.value.code).startswith("error: cannot read the secret tuner/none from AWS Secrets Manager")


def tyro_args(*argv: str):
    import tyro

    return tyro.cli(tuning.Args, args=list(argv))


# ---------------------------------------------------------------------------------------------------------------
# AWS Batch: the workers of one study as an array job (cloud/submit.py submit-tune), against moto's Batch in process
TUNER_ARGS = ("--script cleanrl/ppo.py --params learning-rate=log:1e-4:1e-2 --trials 40 "
              "--flags='--total-timesteps 50000'")


def test_submit_tune_sends_an_array_job_of_workers_that_read_the_secret(tmp_path, monkeypatch):
    moto = pytest.importorskip("moto", reason="optional dependency: moto (pip install -e '.[dev]')")
    import boto3

    from cloud import batch_api, submit

    for key, value in dict(AWS_DEFAULT_REGION="us-east-1", AWS_ACCESS_KEY_ID="testing",
                           AWS_SECRET_ACCESS_KEY="testing").items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws(config={"batch": {"use_docker": False}}):
        iam, batch = boto3.client("iam"), boto3.client("batch")
        role = iam.create_role(RoleName="batch", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
        env = batch.create_compute_environment(computeEnvironmentName="cpu", type="UNMANAGED", state="ENABLED",
                                               serviceRole=role)["computeEnvironmentArn"]
        batch.create_job_queue(jobQueueName="cleanrl-cpu-spot", state="ENABLED", priority=1,
                               computeEnvironmentOrder=[{"order": 1, "computeEnvironment": env}])
        batch.register_job_definition(jobDefinitionName="cleanrl-single", type="container", containerProperties={
            "image": "cleanrl:test", "command": ["bash", "-c", "true"],
            "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "2048"}]})
        ids = submit.cli(["submit-tune", "--no-build", "--workers", "3", "--storage-secret", "cleanrl/tuning-db",
                          "--vcpus", "2", f"--tuner-args={TUNER_ARGS}"])
        job = batch.describe_jobs(jobs=ids)["jobs"][0]
    assert job["jobName"] == "cleanrl-tune" and job["arrayProperties"]["size"] == 3
    command = job["container"]["command"]
    assert command[:5] == ["python", "benchmark/tuner.py", "tune", "--script", "cleanrl/ppo.py"]
    assert command[-2:] == ["--storage-secret", "cleanrl/tuning-db"]
    # what each child runs parses as the tuner's own command line
    assert tyro_args(*command[2:]).storage_secret == "cleanrl/tuning-db"
    # bad input: one line, before any AWS call
    monkeypatch.setattr(batch_api, "client", lambda *a: pytest.fail(f"AWS client created for {a}"))
    for argv, message in [
        ([f"--tuner-args={TUNER_ARGS}"], "--storage-secret is needed"),
        (["--storage-secret", "s", f"--tuner-args={TUNER_ARGS} --storage sqlite:///x.db"], "must not give --storage"),
        (["--storage-secret", "s", "--tuner-args=--script cleanrl/ppo.py --parms x=int:1:2"], "not flags of"),
        (["--storage-secret", "s", "--tuner-args=--script cleanrl/nope.py --params x=int:1:2"], "is not a file"),
        (["--storage-secret", "s", "--workers", "0", f"--tuner-args={TUNER_ARGS}"], "--workers must be in 1..10000"),
    ]:
        with pytest.raises(SystemExit) as stop:
            submit.cli(["submit-tune", "--no-build", *argv])
        text = str(stop.value.code)
        assert text.startswith("error: ") and message in text and "\n" not in text, (argv, text)
