"""Script processes forked from a prestarted interpreter: `python cleanrl/<script> args` without paying for the
interpreter's start and end (`import torch` and its teardown: about 3.2 s of a tiny DQN run's 3.9 s on 2 cores).

A test process starts a server (this file, run as a program) per environment its runs ask for. The server imports
the third-party packages the scripts import (torch and torch._dynamo, gymnasium, numpy, tyro, TensorBoard; not the
scripts' own modules, which read sys.argv when they are imported) and waits on a Unix socket. A run is a request:
the command, its working directory, its environment and its stdout and stderr (file descriptors, passed over the
socket). The server forks a waiter, which forks the run and reports its pid, then its exit status as
subprocess.Popen.returncode has it. The run is a process of its own, with its own pid (the tests signal and kill
it), its working directory, environment, argv and sys.path[0] as `python script` sets them up, stdin /dev/null. It
runs the script as `__main__` and ends as the interpreter ends (run_as_main): SystemExit's code or message, an
uncaught exception's traceback and status 1, its threads waited for, its atexit handlers run, its output flushed;
only the teardown of the modules is skipped.

`popen` forks a run on Linux where the command is `sys.executable` and a script of cleanrl/ (or a launcher of
LAUNCHERS that runs one) and no stdin is given; anything else is a subprocess.Popen. The server is chosen by the
whole environment (but PYTEST_CURRENT_TEST), as variables such as TORCH_LOGS are read when torch is imported.
tests/test_prestart.py checks that a forked run and a fresh interpreter behave alike. CLEANRL_TESTS_PRESTART=0 makes
every run a fresh interpreter: `CLEANRL_TESTS_PRESTART=0 python -m pytest` runs the scripts exactly as a user does,
only slower."""

import atexit
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLEANRL = ROOT / "cleanrl"
# what every script imports before its first line runs (a package imported here is shared by every run)
PRELOAD = ("torch", "torch.nn", "torch.optim", "torch.nn.functional", "torch.distributions", "numpy", "gymnasium",
           "gymnasium.vector", "tyro", "torch.utils.tensorboard", "torch._dynamo", "boto3")
IGNORED = {"PYTEST_CURRENT_TEST"}  # set per test, read by no script
LAUNCHERS = {ROOT / "tests" / "standin.py"}  # programs that run a script of cleanrl/ in their own process


def _send(conn: socket.socket, message: dict, fds: tuple = ()) -> None:
    data = json.dumps(message).encode()
    payload = struct.pack("!I", len(data)) + data
    if fds:
        socket.send_fds(conn, [payload], list(fds))
    else:
        conn.sendall(payload)


def _receive(conn: socket.socket, max_fds: int = 0) -> tuple[dict, list[int]]:
    data, fds = b"", []
    while len(data) < 4 or len(data) < 4 + struct.unpack("!I", data[:4])[0]:
        if max_fds and not fds:
            chunk, fds, _, _ = socket.recv_fds(conn, 1 << 20, max_fds)
        else:
            chunk = conn.recv(1 << 20)
        if not chunk:
            raise EOFError("the connection closed")
        data += chunk
    return json.loads(data[4 : 4 + struct.unpack("!I", data[:4])[0]]), fds


# ---------------------------------------------------------------------------------------------------------------
# The server side (this file as a program)
def serve(path: str) -> str:
    """Accept requests until stdin (a pipe from the test process) closes. Returns only in a forked run, set up as the
    script's process; its script's path."""
    for module in PRELOAD:
        __import__(module)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped by the kernel
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready:  # the test process ended
            os._exit(0)
        conn, _ = listener.accept()
        request, fds = _receive(conn, max_fds=2)
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() != 0:
            conn.close()
            for fd in fds:
                os.close(fd)
            continue
        # the waiter: forks the run, reports its pid and then its exit status as Popen.returncode has it
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        pid = os.fork()
        if pid == 0:
            conn.close()
            return become(request, fds)
        try:
            for fd in fds:
                os.close(fd)
            _send(conn, {"pid": pid})
            _, status = os.waitpid(pid, 0)
            _send(conn, {"returncode": os.waitstatus_to_exitcode(status)})
        finally:
            os._exit(0)


def become(request: dict, fds: list[int]) -> str:
    """Make this forked process the one `python script args` would start, in the request's directory and
    environment, writing to its stdout and stderr."""
    stdout, stderr = fds
    devnull = os.open(os.devnull, os.O_RDONLY)
    for fd, target in ((devnull, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    for fd in {devnull, stdout, stderr} - {0, 1, 2}:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    return script


# ---------------------------------------------------------------------------------------------------------------
# The test side
class Process:
    """A run forked by the server, with the part of subprocess.Popen's interface the tests use."""

    def __init__(self, args, conn: socket.socket, stdout, stderr):
        self.args, self._conn, self.stdout, self.stderr = args, conn, stdout, stderr
        self.returncode = None
        self.pid = _receive(conn)[0]["pid"]
        self._readers = None

    def _status(self, timeout) -> bool:
        if self.returncode is None and select.select([self._conn], [], [], timeout)[0]:
            self.returncode = _receive(self._conn)[0]["returncode"]
            self._conn.close()
        return self.returncode is not None

    def poll(self):
        self._status(0)
        return self.returncode

    def wait(self, timeout=None):
        if not self._status(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def communicate(self, input=None, timeout=None):
        assert input is None, "a prestarted run has no stdin"
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._readers is None:  # read both pipes to their end, as Popen.communicate does
            self._read = {}
            self._readers = [threading.Thread(target=lambda n=n, f=f: self._read.__setitem__(n, f.read()), daemon=True)
                             for n, f in (("stdout", self.stdout), ("stderr", self.stderr)) if f is not None]
            for thread in self._readers:
                thread.start()
        for thread in self._readers:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for f in (self.stdout, self.stderr):
            if f is not None:
                f.close()
        return self._read.get("stdout"), self._read.get("stderr")

    def send_signal(self, sig) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Server:
    def __init__(self, env: dict):
        self.env = dict(env)
        self.folder = tempfile.mkdtemp(prefix="cleanrl-prestart-")
        self.path = os.path.join(self.folder, "socket")
        self.proc = subprocess.Popen([sys.executable, __file__, self.path], env=self.env, stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, cwd=self.folder)
        atexit.register(self.close)

    def connect(self) -> socket.socket:
        deadline = time.monotonic() + 60
        while True:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                conn.connect(self.path)
                return conn
            except (FileNotFoundError, ConnectionRefusedError):
                conn.close()
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the prestarted interpreter did not start (exit {self.proc.poll()})")
                time.sleep(0.05)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def popen(self, cmd, cwd, env: dict, stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> Process:
        """`python cmd[1] cmd[2:]` forked from this server, in `cwd` with `env`: stdout and stderr are PIPE, DEVNULL,
        a file or a descriptor (stderr also STDOUT), as for subprocess.Popen with text=True."""
        opened: list[int] = []
        try:
            out_fd, out_read = _fd(stdout, opened)
            if stderr == subprocess.STDOUT:
                err_fd, err_read = out_fd, None
            else:
                err_fd, err_read = _fd(stderr, opened)
            conn = self.connect()
            _send(conn, {"argv": list(cmd[1:]), "cwd": str(Path(cwd).resolve()), "env": dict(env)},
                  fds=(out_fd, err_fd))
        finally:
            for fd in opened:
                os.close(fd)
        wrap = lambda fd: None if fd is None else open(fd, "r", encoding="utf-8", errors="replace")  # noqa: E731
        return Process(cmd, conn, wrap(out_read), wrap(err_read))


SERVERS: dict = {}  # one per environment the runs ask for, the most recently used last
KEEP = 3  # servers kept running (each holds an interpreter with torch: about 400 MB)


def server_for(cmd, env: dict, stdin):
    """The server that forks this run (started if needed), or None where the run must be a fresh interpreter."""
    # Linux only: on macOS a process forked from one that loaded Apple's frameworks (torch does) may crash
    if os.environ.get("CLEANRL_TESTS_PRESTART", "1") == "0" or stdin is not None or sys.platform != "linux":
        return None
    if len(cmd) < 2 or cmd[0] != sys.executable or not (Path(cmd[1]).parent == CLEANRL or Path(cmd[1]) in LAUNCHERS):
        return None
    key = tuple(sorted((k, v) for k, v in env.items() if k not in IGNORED))
    server = SERVERS.pop(key, None)
    if server is None or server.proc.poll() is not None:
        server = Server(env)
    SERVERS[key] = server
    while len(SERVERS) > KEEP:
        SERVERS.pop(next(iter(SERVERS))).close()
    return server


def _fd(target, pipes: list) -> tuple:
    """(the file descriptor the run writes to, the test side's file object or None) for PIPE, DEVNULL, a file
    object or a descriptor."""
    if target == subprocess.PIPE:
        read, write = os.pipe()
        pipes.append(write)
        return write, read
    if target is None or target == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_WRONLY)
        pipes.append(fd)
        return fd, None
    return (target if isinstance(target, int) else target.fileno()), None


def popen(cmd, cwd, env: dict, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=None, text=True):
    """subprocess.Popen(cmd, cwd=cwd, env=env, stdout=stdout, stderr=stderr, text=text), forked from a prestarted
    interpreter where that is the same run (the module's docstring says when)."""
    cmd = [str(c) for c in cmd]
    server = server_for(cmd, env, stdin) if text else None
    if server is None:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr, text=text)
    return server.popen(cmd, cwd, env, stdout, stderr)


def run(cmd, cwd, env: dict, timeout=None, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, ..., text=True) through popen; on a timeout the run is killed and TimeoutExpired raised."""
    proc = popen(cmd, cwd, env, stdout=stdout, stderr=stderr)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def run_as_main(script: str) -> int:
    """Run the script as `python script` runs it, then end as the interpreter ends: wait for the threads it left
    running, run the atexit handlers and flush stdout and stderr. The exit status: SystemExit's code (its message on
    stderr and 1), or an uncaught exception's traceback and 1. The rest of the interpreter's finalization (tearing
    down torch's modules: 0.9 s of every fresh process here) is skipped, as the process ends at once afterwards."""
    import atexit
    import runpy
    import threading

    interrupted = False
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException as e:  # noqa: BLE001 - what the interpreter does with an uncaught exception
        sys.excepthook(type(e), e, e.__traceback__)
        code, interrupted = 1, isinstance(e, KeyboardInterrupt)
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    if interrupted:  # the interpreter ends an uncaught KeyboardInterrupt by SIGINT, so that its caller sees it
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


if __name__ == "__main__":
    # serve() returns only in a forked run
    os._exit(run_as_main(serve(sys.argv[1])))
