# docs: docs/contributing.md (the layout of cleanrl/)
"""What a run logs: the TensorBoard writer (a failed write ends the run in one line), the episodes' returns, SPS, and
the progress line. `RunLog` is the logging half of runtime.Run, the handle a training loop talks to; runtime.py holds
the other half, the run's lifecycle (restore, checkpoints, signals, finish)."""

import contextlib
import sys
import threading
import time
from collections import deque
from typing import Optional

import numpy as np
from torch.utils.tensorboard import SummaryWriter

from messages import describe_os_error, fail
from speed import ThreadGuard


class LogWriter(SummaryWriter):
    """TensorBoard's SummaryWriter, but a failed write (a full disk, a directory that went away) ends the run in one
    `error:` line that says why, instead of a traceback from its writer thread and then from the training loop. The
    events already written stay; the last checkpoint is kept, so the run can be resumed once there is room."""

    def __init__(self, log_dir: str, **kwargs):
        self.where = log_dir
        with self.failing():
            super().__init__(log_dir, **kwargs)

    @contextlib.contextmanager
    def failing(self):
        try:
            yield
        except OSError as e:
            fail(f"cannot write the TensorBoard log in {self.where}: {describe_os_error(e)}")

    def add_scalar(self, *args, **kwargs):
        with self.failing():
            super().add_scalar(*args, **kwargs)

    def add_text(self, *args, **kwargs):
        with self.failing():
            super().add_text(*args, **kwargs)

    def flush(self):
        with self.failing():
            super().flush()

    def close(self):
        with self.failing():
            super().close()


def quiet_log_threads(hook_args) -> None:
    """threading.excepthook: a TensorBoard writer thread's OSError is reported by LogWriter, in one line."""
    if not (type(hook_args.thread).__name__ == "_AsyncWriterThread" and isinstance(hook_args.exc_value, OSError)):
        threading.__excepthook__(hook_args)


class Progress:
    """Steps, SPS and the mean of the last 20 returns on stderr: on a terminal one self-rewriting line (at most 4
    draws a second, so it can be called every step), elsewhere (a log file) a plain line every `interval` s."""

    def __init__(self, total_steps: int, enabled: bool, interval: float):
        self.total_steps, self.enabled, self.interval = total_steps, enabled, interval
        self.terminal, self.returns = sys.stderr.isatty(), deque(maxlen=20)
        self.last_draw, self.drawn = time.monotonic(), False

    def episode(self, episodic_return: float) -> None:
        self.returns.append(float(episodic_return))

    def recent_return(self) -> str:
        return f"{np.mean(self.returns):.1f}" if self.returns else "-"

    def returns_said(self, run_over: bool = False) -> str:
        """The episodes' returns in words: 'mean return of the last 3 episodes 21.7', or that none has ended."""
        n = len(self.returns)
        if n == 0:
            return "no episode finished" if run_over else "no episode finished yet"
        return f"mean return of the last {n} episode{'s' if n > 1 else ''} {self.recent_return()}"

    def update(self, global_step: int, sps: int, during: str = "") -> None:
        """`during`: a long part of an iteration under way (PPG's auxiliary phase), shown in place of the speed."""
        now, last = time.monotonic(), global_step >= self.total_steps and not during
        too_soon = not last and now - self.last_draw < (0.25 if self.terminal else self.interval)
        if not self.enabled or too_soon or last and not self.terminal:  # off a terminal the summary line says the rest
            return
        self.last_draw, self.drawn = now, True
        percent, speed = 100 * global_step // self.total_steps, during or f"{sps} SPS"
        if self.terminal:  # (\x1b[K clears what a longer line left to the right)
            sys.stderr.write(f"\r{global_step}/{self.total_steps} steps ({percent}%) | {speed} | "
                             f"return {self.recent_return()}  \x1b[K")
        else:
            sys.stderr.write(f"progress: step {global_step}/{self.total_steps} ({percent}%), {speed}, "
                             f"{self.returns_said()}\n")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled and self.terminal and self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.drawn = False


class RunLog:
    """The logging half of a run: `writer` (a LogWriter on rank 0, None elsewhere), `progress` (the progress line),
    the SPS clock, and `threads` (a ThreadGuard where --torch-threads 0 chose the threads from the free cores: SPS
    logging checks that they are still free)."""

    def __init__(self, writer: Optional[LogWriter], progress: Progress, threads: Optional[ThreadGuard]):
        self.writer, self.progress, self.threads = writer, progress, threads
        self.clock: Optional[tuple[float, int]] = None  # (time, global step) the SPS clock started at

    def log_episode(self, episodic_return: float, episodic_length: int, global_step: int) -> None:
        self.writer.add_scalar("charts/episodic_return", episodic_return, global_step)
        self.writer.add_scalar("charts/episodic_length", episodic_length, global_step)
        self.progress.episode(episodic_return)

    def log_episodes(self, infos: dict, global_step: int) -> np.ndarray:
        """Log the episodes that ended this step (RecordEpisodeStatistics' info["episode"]); returns their envs."""
        ended = np.flatnonzero(infos["_episode"]) if "episode" in infos else np.empty(0, dtype=np.int64)
        for i in ended:
            self.log_episode(infos["episode"]["r"][i], infos["episode"]["l"][i], global_step)
        return ended

    def start_clock(self, global_step: int, restart: bool = False) -> None:
        """SPS counts from the first call (`restart`: from this one): after the warm-up (compilation, CUDA graph
        recording, steps before learning); the first iteration or update logs no SPS."""
        if self.clock is None or restart:
            self.clock = (time.time(), global_step)

    def sps(self, global_step: int) -> Optional[int]:
        if self.clock is not None and global_step > self.clock[1]:
            return int((global_step - self.clock[1]) / max(time.time() - self.clock[0], 1e-9))

    def log_sps(self, global_step: int) -> None:
        if self.threads is not None:
            self.threads.check()
        sps = self.sps(global_step)
        if sps is not None and self.writer is not None:
            self.writer.add_scalar("charts/SPS", sps, global_step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
