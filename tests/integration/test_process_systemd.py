# SPDX-License-Identifier: Apache-2.0
"""The relay under systemd's Type=notify, as docker/outbox-relay.service runs
it: the test plays the service manager, with $NOTIFY_SOCKET naming a datagram
socket it reads and $WATCHDOG_USEC asking for pings (sd_notify(3)).

- READY=1 once the relay streams, with STATUS=streaming; WATCHDOG=1 every
  half of $WATCHDOG_USEC while the loop turns;
- a relay stuck in a blocking call (its reconnect's connection attempt, to a
  server whose address takes the connection and never answers) sends no
  WATCHDOG=1 for as long as it is stuck, and pings again once the call
  returns: systemd's WatchdogSec= restarts a relay that stays stuck;
- SIGHUP is RELOADING=1 then READY=1; SIGTERM is STOPPING=1 and STATUS=stopping;
- a warm standby is READY=1 with STATUS=standby: ... (a unit whose slot
  another relay holds has started, not failed).

The relay must be built with libsystemd (tests/install-deps.sh installs
libsystemd-dev); otherwise it notifies nothing and these tests fail.
"""

import os
import signal
import socket
import threading
import time

import harness
from harness.faults import observe
from harness.netdelay import DelayProxy
from harness.relay import RelayProcess

WATCHDOG_USEC = 1000000    # systemd would say WatchdogSec=1: a ping every 0.5 s


class NotifySocket:
    """The service manager's end: a datagram socket, every message kept with
    its arrival time (monotonic) as (time, {key: value})."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.messages = []
        self._lock = threading.Lock()
        self._open = True
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while self._open:
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:
                return
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            with self._lock:
                self.messages.append((time.monotonic(), fields))

    def seen(self, key, value=None, since=0.0):
        """Arrival times of messages carrying key (=value, if given) after since."""
        with self._lock:
            return [t for t, m in self.messages
                    if t >= since and key in m and (value is None or m[key] == value)]

    def statuses(self, since=0.0):
        with self._lock:
            return [m["STATUS"] for t, m in self.messages if t >= since and "STATUS" in m]

    def close(self):
        self._open = False
        self.sock.close()


def notify_relay(case, tmp_path, args, name, watchdog=True):
    notify = NotifySocket(str(tmp_path / ("%s.sock" % name)))
    env = dict(os.environ, NOTIFY_SOCKET=notify.path)
    if watchdog:
        env["WATCHDOG_USEC"] = str(WATCHDOG_USEC)
    r = RelayProcess(args, str(tmp_path / ("%s.log" % name)), env=env)
    case.relays.append(r)
    r.start()
    return r, notify


def test_ready_status_and_watchdog_stop_while_stuck(case, tmp_path):
    proxy = DelayProxy(case.pg.host, case.pg.port)
    notify = None
    try:
        dsn = case.pg.conninfo(case.dbname, port=proxy.port, sslmode="disable",
                               gssencmode="disable")
        args = case.relay_args()
        args[args.index(case.dsn)] = dsn
        relay, notify = notify_relay(case, tmp_path, args, "relay")
        relay.wait_ready(case.pg, case.slot)

        harness.wait_until(lambda: notify.seen("READY", "1"), 10, what="READY=1")
        ready = notify.seen("READY", "1")[0]
        assert "streaming" in notify.statuses(), notify.messages
        assert not notify.seen("READY", "1", since=ready + 0.001), "READY=1 sent twice"
        # pings every half of WATCHDOG_USEC while the loop turns
        t0 = time.monotonic()
        harness.wait_until(lambda: len(notify.seen("WATCHDOG", "1", since=t0)) >= 4, 5,
                           what="4 pings in 2 s")
        pings = notify.seen("WATCHDOG", "1", since=t0)
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        assert max(gaps) < 0.9, gaps

        # The reconnect's connection attempt is taken and never answered: the
        # relay blocks in libpq (connect_timeout 30 s) and its loop stops.
        proxy.stall_all = True
        cut = time.monotonic()
        proxy.cut()
        harness.wait_until(lambda: "connecting" in notify.statuses(since=cut), 10,
                           what="STATUS=connecting after the cut")
        stuck = notify.seen("STATUS", "connecting", since=cut)[0]
        harness.wait_until(lambda: proxy.stalled >= 1, 5, what="the attempt held by the proxy")
        assert "reconnecting" in notify.statuses(since=cut), notify.statuses(since=cut)
        # Six ping intervals with no ping while it is stuck.
        def silent():
            late = notify.seen("WATCHDOG", "1", since=stuck + 0.6)
            assert not late, "WATCHDOG=1 from a relay stuck in its connection attempt: %s" % [
                round(t - stuck, 2) for t in late]
            assert relay.alive, relay.log
        observe(3.0, silent)

        # The call returns (the held connection is cut): the loop turns and pings again.
        proxy.stall_all = False
        freed = time.monotonic()
        proxy.cut()
        harness.wait_until(lambda: notify.seen("WATCHDOG", "1", since=freed), 10,
                           what="pings again once the attempt failed")
        harness.wait_until(lambda: "streaming" in notify.statuses(since=freed), 30,
                           what="STATUS=streaming again")
        relay.wait_ready(case.pg, case.slot)

        # SIGHUP: RELOADING=1, then READY=1 again
        hup = time.monotonic()
        os.kill(relay.pid, signal.SIGHUP)
        harness.wait_until(lambda: notify.seen("READY", "1", since=hup), 10,
                           what="READY=1 after the reload")
        assert notify.seen("RELOADING", "1", since=hup), notify.messages[-5:]
        assert notify.seen("RELOADING", "1", since=hup)[0] <= notify.seen("READY", "1", since=hup)[0]

        # SIGTERM: STOPPING=1 and STATUS=stopping, then exit 0
        term = time.monotonic()
        assert relay.stop() == harness.EXIT_OK, relay.log
        # Sent before the exit, but read by the socket's thread: it may come after stop() returns.
        harness.wait_until(lambda: notify.seen("STOPPING", "1", since=term) and
                           "stopping" in notify.statuses(since=term), 5,
                           what=lambda: "STOPPING=1 and STATUS=stopping: %s" % notify.messages[-5:])
    finally:
        if notify:
            notify.close()
        proxy.close()


def test_warm_standby_is_ready_with_its_status(case, tmp_path):
    active = case.relay()
    standby, notify = notify_relay(case, tmp_path, case.relay_args(create_slot=False), "standby",
                                   watchdog=False)
    try:
        harness.wait_until(lambda: notify.seen("READY", "1"), 20, what="the standby's READY=1")
        assert any(s.startswith("standby") for s in notify.statuses()), notify.statuses()
        assert "streaming" not in notify.statuses()
        assert not notify.seen("WATCHDOG"), "pings without $WATCHDOG_USEC"
        assert active.alive and standby.alive
    finally:
        notify.close()
