"""A run forked from tests/prestart.py's prestarted interpreter behaves as `python script` does: the same output,
exit status, argv, working directory, environment and sys.path, signals and kill, and its end (threads waited for,
atexit handlers run, output flushed); the same toy program, run both ways, must give the same."""

import signal
import subprocess
import sys
import textwrap

import pytest

from tests import prestart
from tests.helpers import ROOT, script_env

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="runs are forked from a prestarted interpreter on "
                                                                "Linux only")

TOY = textwrap.dedent("""
    import atexit, os, sys, threading, time
    print("argv", sys.argv[1:], "cwd", os.getcwd(), "path0", sys.path[0] == os.path.dirname(os.path.abspath(__file__)))
    print("name", __name__, "var", os.environ.get("TOY_VAR"), "stdin", sys.stdin.read() == "")
    print("to stderr", file=sys.stderr)
    atexit.register(lambda: print("atexit ran"))
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished"))).start()
    mode = sys.argv[1]
    if mode == "message":
        raise SystemExit("error: a one-line message")
    if mode == "code":
        sys.exit(3)
    if mode == "exception":
        raise ValueError("a bug")
    if mode == "wait":
        print("waiting", flush=True)
        time.sleep(60)
""")


@pytest.fixture(scope="module")
def server():
    env = script_env(TOY_VAR="set")
    server = prestart.Server(env)
    yield server, env
    server.close()


def both(server, tmp_path, *args):
    """The toy run as a fresh interpreter and forked from the server: [(returncode, stdout, stderr)] * 2."""
    (tmp_path / "toy.py").write_text(TOY)
    served, env = server
    cmd = [sys.executable, str(tmp_path / "toy.py"), *args]
    fresh = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
    forked = served.popen(cmd, tmp_path, env)
    out, err = forked.communicate(timeout=60)
    return (fresh.returncode, fresh.stdout, fresh.stderr), (forked.returncode, out, err)


@pytest.mark.parametrize("mode", ["ends", "message", "code"])
def test_a_forked_run_prints_and_ends_as_a_fresh_interpreter(server, tmp_path, mode):
    fresh, forked = both(server, tmp_path, mode, "--flag")
    assert forked == fresh
    assert "atexit ran" in fresh[1] and "thread finished" in fresh[1] and "var set" in fresh[1]
    assert fresh[0] == {"ends": 0, "message": 1, "code": 3}[mode]


def test_an_uncaught_exception_is_a_traceback_and_status_1_in_both(server, tmp_path):
    fresh, forked = both(server, tmp_path, "exception")
    assert forked[:2] == fresh[:2] and fresh[0] == 1
    assert forked[2].splitlines()[-1] == fresh[2].splitlines()[-1] == "ValueError: a bug"
    assert forked[2].startswith("to stderr\nTraceback (most recent call last):")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_forked_run_is_a_process_that_signals_end(server, tmp_path, sig):
    (tmp_path / "toy.py").write_text(TOY)
    served, env = server
    proc = served.popen([sys.executable, str(tmp_path / "toy.py"), "wait"], tmp_path, env, stderr=subprocess.STDOUT)
    assert proc.stdout.readline().startswith("argv")
    while "waiting" not in proc.stdout.readline():
        pass
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.2)
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    assert proc.returncode == -sig and proc.poll() == -sig


def test_popen_forks_only_scripts_of_cleanrl_in_an_environment_of_their_own(tmp_path, monkeypatch):
    (tmp_path / "toy.py").write_text(TOY)
    env = script_env()
    assert prestart.server_for([sys.executable, str(tmp_path / "toy.py")], env, None) is None
    assert prestart.server_for(["python3", str(ROOT / "cleanrl" / "ppo.py")], env, None) is None
    assert prestart.server_for([sys.executable, str(ROOT / "cleanrl" / "ppo.py")], env, subprocess.PIPE) is None
    ppo = prestart.server_for([sys.executable, str(ROOT / "cleanrl" / "ppo.py")], env, None)
    assert ppo is not None
    assert prestart.server_for([sys.executable, str(ROOT / "cleanrl" / "dqn.py")], dict(env, PYTEST_CURRENT_TEST="x"),
                               None) is ppo
    assert prestart.server_for([sys.executable, str(ROOT / "cleanrl" / "dqn.py")], dict(env, TORCH_LOGS="dynamo"),
                               None) is not ppo
    monkeypatch.setenv("CLEANRL_TESTS_PRESTART", "0")
    assert prestart.server_for([sys.executable, str(ROOT / "cleanrl" / "ppo.py")], env, None) is None

