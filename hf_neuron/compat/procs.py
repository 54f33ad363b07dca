"""Child processes of a compatibility run, and reading why one of them died.

A :class:`Child` is one worker (``python -m hf_neuron.compat.worker``) or one torchrun job
(``hf_neuron.compat.tp_worker``), in its own session so that killing it kills its whole process
group, with stdout/stderr in a log file and JSON events read on a background thread (from a pipe for
the worker, from a file for torchrun, whose launcher does not pass file descriptors on).
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from hf_neuron.compat.frames import is_model_code, short_path

EOF = object()
TIMEOUT = object()

_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')


class Child:
    def __init__(self, cmd: list[str], env: dict, log_path: Path, *, events_file: Path | None = None,
                 stdin: bool = True):
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        self.events: queue.Queue = queue.Queue()
        pass_fds: tuple[int, ...] = ()
        read_fd = write_fd = None
        if events_file is None:
            read_fd, write_fd = os.pipe()
            cmd = [*cmd, "--events-fd", str(write_fd)]
            pass_fds = (write_fd,)
        else:
            Path(events_file).write_bytes(b"")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT, env=env, pass_fds=pass_fds, start_new_session=True,
        )
        if write_fd is not None:
            os.close(write_fd)
            source = os.fdopen(read_fd, "rb")
            follow = False
        else:
            source = open(events_file, "rb")
            follow = True
        self._reader = threading.Thread(target=self._read, args=(source, follow), daemon=True)
        self._reader.start()

    # ---- events ------------------------------------------------------------------------------
    def _read(self, source, follow: bool) -> None:
        buffer = b""
        with source:
            while True:
                chunk = source.readline()
                if chunk:
                    buffer += chunk
                    if not buffer.endswith(b"\n"):
                        continue
                    line, buffer = buffer.strip(), b""
                    if line:
                        try:
                            self.events.put(json.loads(line))
                        except ValueError:
                            pass
                    continue
                if not follow or self.proc.poll() is not None:
                    if follow:  # drain what the process wrote just before exiting
                        rest = source.read()
                        for line in (buffer + rest).splitlines():
                            try:
                                self.events.put(json.loads(line))
                            except ValueError:
                                pass
                    break
                time.sleep(0.05)
        self.events.put(EOF)

    def next_event(self, timeout: float):
        try:
            return self.events.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return TIMEOUT

    def send(self, obj: dict) -> None:
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    # ---- life ---------------------------------------------------------------------------------
    def log_size(self) -> int:
        self._log.flush()
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_since(self, offset: int, limit: int = 200_000) -> str:
        self._log.flush()
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
        except FileNotFoundError:
            return ""
        return data[-limit:].decode("utf-8", "replace")

    def _descendants(self, direct: bool = False) -> list[int]:
        """Live descendants of this child, or only its children with ``direct`` (torchrun's ranks run
        in sessions of their own, so the process group alone does not reach them)."""
        children: dict[int, list[int]] = {}
        try:
            entries = [e for e in os.listdir("/proc") if e.isdigit()]
        except OSError:
            return []
        for entry in entries:
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
        if direct:
            return list(children.get(self.proc.pid, []))
        out, todo = [], [self.proc.pid]
        while todo:
            for pid in children.get(todo.pop(), []):
                out.append(pid)
                todo.append(pid)
        return out

    def dump_stacks(self, wait: float = 5.0) -> None:
        """Ask a hung worker where it is (faulthandler on SIGUSR1) before it is killed; for a torchrun
        job, ask its ranks (the launcher itself has no handler)."""
        if self.proc.poll() is not None or not hasattr(signal, "SIGUSR1"):
            return
        # One process at a time: dumps written concurrently to the same log would interleave.
        launcher = "torch.distributed.run" in " ".join(map(str, self.proc.args))
        targets = sorted(self._descendants(direct=True)) if launcher else [self.proc.pid]
        for pid in targets or [self.proc.pid]:
            before = self.log_size()
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                continue
            # Wait until the dump has been written: the log grew and then stopped growing.
            deadline, size, stable_since = time.monotonic() + wait, before, None
            while time.monotonic() < deadline:
                time.sleep(0.1)
                now = self.log_size()
                if now != size:
                    size, stable_since = now, time.monotonic()
                elif size > before and time.monotonic() - stable_since > 0.3:
                    break

    def kill(self) -> None:
        descendants = self._descendants() if self.proc.poll() is None else []
        for pid in [self.proc.pid, *descendants]:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.wait(10)

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self, timeout: float = 10.0) -> None:
        """End a healthy worker: EOF on stdin, then kill if it lingers."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if self.wait(timeout) is None:
            self.kill()
        # Reap anything left in the session (torchrun ranks, stray helpers).
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._log.close()

    def alive(self) -> bool:
        return self.proc.poll() is None


# ---- explaining a dead or hung child ---------------------------------------------------------
def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "worker did not exit"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        if name == "SIGKILL":
            return "worker killed by SIGKILL (likely out of memory)"
        return f"worker died with {name}"
    return f"worker exited with code {returncode}"


def innermost_frame(log_text: str) -> str | None:
    """Where the main thread was, from a faulthandler dump: its most recent frame, plus the innermost
    transformers frame (the model code that called it) when that is a different one."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", log_text)
    stacks = [b for b in blocks if _FRAME.search(b)]
    if not stacks:
        return None
    main = next((b for b in reversed(stacks) if re.search(r"line \d+ in <module>", b)), stacks[-1])
    frames = [(p, ln, fn) for p, ln, fn in _FRAME.findall(main)  # most recent first
              if "threading.py" not in p and "<frozen" not in p]
    if not frames:
        return None
    path, line, func = frames[0]
    where = f"{short_path(path)}:{line} in {func}"
    model = next(((p, ln, fn) for p, ln, fn in frames if is_model_code(p)), None)
    if model is not None and model != frames[0]:
        where += f" (from {short_path(model[0])}:{model[1]} in {model[2]})"
    return where


_ERROR_LINE = re.compile(r"(Error|error|Fatal|fatal|Segmentation|Killed|Aborted|Traceback|Exception)")


def last_error_line(log_text: str) -> str | None:
    lines = [ln.strip() for ln in log_text.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("File ") and not ln.startswith("Thread 0x")
             and not ln.startswith("Current thread") and "most recent call first" not in ln]
    for ln in reversed(lines):
        if _ERROR_LINE.search(ln):
            return ln
    return lines[-1] if lines else None
