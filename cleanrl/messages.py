# docs: docs/contributing.md (the layout of cleanrl/)
"""How the run machinery speaks: one `error:` line and a non-zero exit (fail), one `warning:` line (warn), a line on
stdout (say), OS errors in words, and stdout and stderr that survive their reader going away (protect_output)."""

import errno
import os
import sys
from typing import NoReturn


def fail(message: str) -> NoReturn:
    raise SystemExit(f"error: {message}")


def warn(message: str) -> None:
    """One line for what is legal but unusual and runs anyway (say what will happen); of torchrun's ranks, rank 0's."""
    if os.environ.get("RANK", "0") == "0":
        sys.stderr.write(f"warning: {message}\n")
        sys.stderr.flush()


def say(message: str) -> None:
    """Print one line in one write, flushed, so the lines of torchrun ranks sharing a log never interleave."""
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


class PipeSafe:
    """stdout or stderr, made safe to write after its reader went away (`... | head`, a closed log pipe): the first
    BrokenPipeError points the file descriptor at /dev/null, so the run goes on (and a SIGTERM still checkpoints)
    instead of ending in a traceback, and Python's flush at exit finds nothing to complain about."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self.silence()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self.silence()

    def silence(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())
        os.close(devnull)

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def protect_output() -> None:
    """sys.stdout and sys.stderr as PipeSafe streams (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, PipeSafe):
            setattr(sys, name, PipeSafe(stream))


def first_line(e: BaseException) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def describe_os_error(e: OSError) -> str:
    """An OSError in words a user acts on: a full disk, a quota or a file-size limit says so."""
    words = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
             errno.EFBIG: "the file-size limit (ulimit -f) is reached", errno.EROFS: "the file system is read-only"}
    reason = e.strerror or first_line(e)
    return f"{words[e.errno]} ({reason})" if e.errno in words else reason
