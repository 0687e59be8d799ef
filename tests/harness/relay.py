# SPDX-License-Identifier: Apache-2.0
"""Running the outbox-relay binary under test: start it with arguments, wait
until its replication slot is active, stop it with a signal and read its exit
code, log and peak memory; write its settings files and read its log lines.

The binary is $OUTBOX_RELAY_BIN, else build/src/outbox-relay at the top of the
source tree.
"""

import os
import re
import signal
import subprocess
import threading
import time

from . import procs

_TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_USAGE = 2
EXIT_ENV = 3
EXIT_UNPUBLISHABLE = 4


# The test suite's own knobs share the relay's OUTBOX_RELAY_ prefix; the relay
# would warn about them as variables that are not settings, so it does not see them.
HARNESS_VARS = ("OUTBOX_RELAY_BIN", "OUTBOX_RELAY_KEEP_TMP", "OUTBOX_RELAY_PG_BINDIR",
                "OUTBOX_RELAY_SQL_MATRIX_BIN",
                "OUTBOX_RELAY_SOAK", "OUTBOX_RELAY_FAULT_SEED")


def relay_env(env=None):
    """env (default: this process's environment) without the harness's variables."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in HARNESS_VARS}


def relay_bin():
    path = os.environ.get("OUTBOX_RELAY_BIN") or os.path.join(_TOP, "build", "src", "outbox-relay")
    if not os.access(path, os.X_OK):
        raise RuntimeError("relay binary %s not found or not executable "
                           "(build it with meson, or set OUTBOX_RELAY_BIN)" % path)
    return path


def run_relay(args, timeout=60, env=None):
    """Run the relay to completion (for usage and preflight checks).

    Returns (exit code, combined stdout+stderr text). Raises TimeoutError,
    after killing it, if it is still running after timeout seconds.
    """
    try:
        cp = subprocess.run([relay_bin()] + list(args), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            timeout=timeout, env=relay_env(env), preexec_fn=procs._child_setup)
    except subprocess.TimeoutExpired as e:
        raise TimeoutError("relay %s still running after %s s; output:\n%s"
                           % (args, timeout, (e.output or b"").decode("utf-8", "replace")))
    return cp.returncode, cp.stdout.decode("utf-8", "replace")


def relay_librdkafka():
    """The version of the librdkafka the relay under test runs with (its
    --version), as (major, minor, patch)."""
    rc, out = run_relay(["--version"], timeout=10)
    m = re.search(r"^librdkafka (\d+)\.(\d+)\.(\d+)", out, re.M)
    assert rc == 0 and m, out
    return tuple(int(g) for g in m.groups())


def sanitized(path=None):
    """True if the relay binary at path (default: the one under test) was
    built with ASan, UBSan or TSan: its memory is then the sanitizer's, and
    limits on resident memory do not apply to it."""
    with open(path or relay_bin(), "rb") as f:
        data = f.read()
    return b"__asan_init" in data or b"__ubsan_handle" in data or b"__tsan_init" in data


class RelayProcess:
    """One run of the relay. Output (stdout and stderr) goes to log_path."""

    def __init__(self, args, log_path, binary=None, env=None):
        self.args = list(args)
        self.log_path = log_path
        self.binary = binary or relay_bin()
        self.env = env
        self.proc = None
        self.started_at = None
        self._peak_kb = None
        self._sampler = None

    def start(self):
        with open(self.log_path, "ab") as f:
            f.write(("=== %s %s\n" % (self.binary, " ".join(self.args))).encode())
        procs.register(self)
        self.started_at = time.monotonic()
        self.proc = procs.spawn([self.binary] + self.args, log_path=self.log_path,
                                env=relay_env(self.env))
        self._sampler = threading.Thread(target=self._sample_rss, daemon=True)
        self._sampler.start()
        return self

    def _sample_rss(self):
        pid = self.proc.pid
        while self.proc.poll() is None:
            self._note_rss(pid)
            time.sleep(0.1)  # sampling poll interval, not a wait for a condition

    def _note_rss(self, pid):
        kb = procs.read_vmhwm_kb(pid)
        if kb is not None:
            # VmHWM only grows; the latest reading of a live process is its peak so far
            self._peak_kb = max(kb, self._peak_kb or 0)

    def peak_rss_kb(self):
        """Peak resident set size (VmHWM) in KiB: read now while the relay
        runs, else the last value sampled before it exited (None if never read)."""
        if self.proc is not None and self.proc.poll() is None:
            self._note_rss(self.proc.pid)
        return self._peak_kb

    def wait_ready(self, pg, slot, timeout=30):
        """Wait until the relay streams from its slot (not merely holds it, as
        while --create-slot creates it).
        Raises RuntimeError with the log if the relay exits first, WaitTimeout
        with the log after timeout seconds."""
        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("relay exited with %s before its slot %r became active\n%s"
                                   % (self.proc.returncode, slot, self.log))
            return pg.slot_streaming(slot)
        procs.wait_until(ready, timeout, interval=0.05,
                         what=lambda: "slot %r active; relay log:\n%s" % (slot, self.log))
        return self

    def stop(self, sig=signal.SIGTERM, timeout=30):
        """Send sig and wait up to timeout seconds; returns the exit code.

        A relay that does not exit in time is killed and RelayStopTimeout raised:
        hanging on a stop request is a bug the tests must report.
        """
        if self.proc is None:
            return None
        rc, in_time = procs.terminate(self.proc, sig, timeout)
        procs.unregister(self)
        if not in_time:
            raise RelayStopTimeout("relay did not exit within %s s of %s; killed\n%s"
                                   % (timeout, signal.Signals(sig).name, self.log))
        return rc

    def kill(self):
        """SIGKILL; returns the exit code (-9)."""
        if self.proc is None:
            return None
        rc, _ = procs.terminate(self.proc, signal.SIGKILL, 30)
        procs.unregister(self)
        return rc

    def wait(self, timeout=None):
        """Wait for the relay to exit by itself; returns the exit code.
        Raises subprocess.TimeoutExpired after timeout seconds."""
        rc = self.proc.wait(timeout=timeout)
        procs.unregister(self)
        return rc

    def _emergency_stop(self):
        if self.alive:
            procs.terminate(self.proc, signal.SIGKILL, 10)

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self):
        return None if self.proc is None else self.proc.poll()

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def log(self):
        """The whole log so far, as text."""
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, *exc):
        if self.alive:
            self.kill()


class RelayStopTimeout(Exception):
    pass


ERROR_PREFIX = "outbox-relay: error: "


def error_lines(text):
    """The relay's error lines ('outbox-relay: error: ...'), prefix removed."""
    return [line[len(ERROR_PREFIX):] for line in text.splitlines()
            if line.startswith(ERROR_PREFIX)]


def the_error(text):
    """The one error line of a run; fails the test if there is none or several."""
    lines = error_lines(text)
    assert len(lines) == 1, "expected exactly one error line, got %d:\n%s" % (len(lines), text)
    return lines[0]


def log_lines(text, needle):
    """The lines of text that contain needle."""
    return [line for line in text.splitlines() if needle in line]


def write_file(path, text, mode=0o600):
    """Write text to path with mode (settings files hold secrets); returns str(path)."""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return str(path)


def read_file(path):
    """The text of path, or "" if it does not exist (yet)."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
