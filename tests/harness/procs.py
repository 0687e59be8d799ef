# SPDX-License-Identifier: Apache-2.0
"""Child process bookkeeping shared by every server the harness starts.

Every long-running child (postgres, the Kafka JVM, the relay) is started
through spawn() so that it is:
  - in its own session, so a terminal's Ctrl-C reaches only the Python
    process, which then stops the children in a known order;
  - registered here, so atexit, SIGTERM and SIGHUP stop it even when a test or
    a script fails half way;
  - sent SIGKILL by the kernel if the Python process itself dies without
    running any handler (prctl PR_SET_PDEATHSIG), so even `kill -9` of pytest
    leaves no orphaned java or postgres behind.

PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so start
servers from the main thread (pytest fixtures and scripts do).

This module knows nothing about PostgreSQL or Kafka.
"""

import atexit
import ctypes
import ctypes.util
import os
import random
import signal
import socket
import subprocess
import threading
import time

_PR_SET_PDEATHSIG = 1

try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    _prctl = _libc.prctl
except (OSError, AttributeError):  # not Linux: rely on atexit and signals only
    _prctl = None

_lock = threading.RLock()
_owners = []            # objects with an _emergency_stop() method, in start order
_handlers_installed = False
_ports_given = set()


def _child_setup():
    """Runs in the forked child after any uid/gid change, just before exec."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def spawn(argv, *, log_path, cwd=None, env=None, user=None):
    """Start argv with stdout and stderr appended to log_path; returns a Popen.

    user: run as this user name (used to run PostgreSQL as 'postgres' when the
    harness runs as root; initdb and postgres refuse to run as root).
    """
    log = open(log_path, "ab", buffering=0)
    try:
        kwargs = {}
        if user is not None:
            kwargs.update(user=user, group=user, extra_groups=[])
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                start_new_session=True, preexec_fn=_child_setup,
                                **kwargs)
    finally:
        log.close()


def run(argv, *, user=None, timeout=120, check=True, env=None, input=None):
    """Run a short command to completion; returns CompletedProcess (text mode).

    Raises RuntimeError with the command's output when check is true and it
    fails, so the reason shows up in the test report.
    """
    kwargs = {}
    if user is not None:
        kwargs.update(user=user, group=user, extra_groups=[])
    cp = subprocess.run(argv, stdin=None if input is not None else subprocess.DEVNULL,
                        input=input, capture_output=True, text=True, timeout=timeout,
                        env=env, preexec_fn=_child_setup, **kwargs)
    if check and cp.returncode != 0:
        raise RuntimeError("command failed (exit %d): %s\n--- stdout\n%s\n--- stderr\n%s"
                           % (cp.returncode, " ".join(map(str, argv)), cp.stdout, cp.stderr))
    return cp


def register(owner):
    """Remember owner so that stop_all() (atexit, SIGTERM, SIGHUP) stops it."""
    with _lock:
        _install_handlers()
        if owner not in _owners:
            _owners.append(owner)


def unregister(owner):
    with _lock:
        if owner in _owners:
            _owners.remove(owner)


def stop_all():
    """Stop every registered owner, newest first (relay before Kafka before PostgreSQL)."""
    with _lock:
        owners = list(reversed(_owners))
    for owner in owners:
        try:
            owner._emergency_stop()
        except Exception:  # keep going: the next owner must still be stopped
            pass
        unregister(owner)


def _on_signal(signum, frame):
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_handlers():
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(stop_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        # leave a handler someone else installed alone
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, _on_signal)


def terminate(proc, sig, timeout):
    """Send sig to proc and wait up to timeout seconds; SIGKILL after that.

    Returns (returncode, True if it exited within the timeout).
    """
    if proc.poll() is not None:
        return proc.returncode, True
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
    try:
        return proc.wait(timeout=timeout), True
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=30), False


def _ephemeral_low():
    """The lowest port the kernel hands to outgoing connections (32768 if unknown)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _port_range():
    """[low, high) of the ports free_port() may hand out: 12,000 ports below
    the ephemeral range, or, in a worker of a parallel pytest run (pytest-xdist
    sets PYTEST_XDIST_WORKER=gwN and PYTEST_XDIST_WORKER_COUNT), that worker's
    own slice of them, so two workers never hand out the same port (a port
    given out and not yet bound, or freed by a server a test will restart on
    it, looks free to every other process)."""
    high = _ephemeral_low()
    low = max(1024, high - 12000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
        index = int(worker[2:]) if worker.startswith("gw") else -1
    except ValueError:
        count, index = 0, -1
    if count > 1 and 0 <= index < count:
        size = (high - low) // count
        low, high = low + index * size, low + (index + 1) * size
    return low, high


def free_port():
    """A loopback TCP port that nothing listens on now and this process has not
    handed out. Chosen below the kernel's ephemeral range: a server the tests
    stop and start again on its port (a broker kill, a PostgreSQL restart)
    must find it free, and an outgoing connection of any process may take an
    ephemeral port meanwhile (seen: a restarted broker's "Address already in
    use" on a busy machine)."""
    low, high = _port_range()
    for _ in range(200):
        port = random.randrange(low, high)
        with _lock:
            if port in _ports_given:
                continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        with _lock:
            if port not in _ports_given:
                _ports_given.add(port)
                return port
    raise RuntimeError("no free loopback port found in [%d, %d)" % (low, high))


def port_open(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def children_of(pid):
    """PIDs whose parent is pid (from /proc; empty when /proc is missing)."""
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        # field 4 (ppid) follows the ')' that closes the command name
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(name))
    return out


def read_vmhwm_kb(pid):
    """Peak resident set (VmHWM) of pid in KiB, or None when it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            stat = f.read().decode("ascii", "replace")
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] != "Z"


class WaitTimeout(AssertionError):
    """A bounded wait ran out: what was waited for did not happen in time.

    An AssertionError, because in a test that is a failure of the behaviour
    under test, not of the harness; the message names what was waited for."""


def wait_until(cond, timeout, interval=0.05, what="condition", tick=None):
    """Poll cond() until it returns a true value, at most timeout seconds.

    The bounded poll every wait of the harness, the tests and the benchmark
    goes through. Returns cond()'s value. When time runs out raises
    WaitTimeout "timed out after N s waiting for <what>"; what is text, or a
    function returning text, called then, that can describe the state at the
    timeout. tick(), when given, runs between tries instead of the
    interval's sleep, and is the pause (e.g. a Kafka consumer's poll).
    An exception from cond() or tick() ends the wait and propagates.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise WaitTimeout("timed out after %.1f s waiting for %s"
                              % (timeout, what() if callable(what) else what))
        if tick is not None:
            tick()
        else:
            time.sleep(interval)  # poll interval


def tail(path, max_bytes=8000):
    """Last max_bytes of a log file as text ('' if it does not exist)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def cpu_seconds(pid):
    """CPU time (user + system) pid has used so far, in seconds (from /proc)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
