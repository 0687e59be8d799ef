# SPDX-License-Identifier: Apache-2.0
"""A throwaway PostgreSQL server for tests: initdb into a temp dir, run the
postmaster on a free loopback port with logical decoding and wal2json enabled,
stop or crash it on demand.

The postmaster is started directly (not through pg_ctl) so the harness owns its
PID and can crash it. When the harness runs as root, initdb and postgres run as
the 'postgres' user, since both refuse to run as root.

This module knows nothing about Kafka or the relay.
"""

import os
import pwd
import shutil
import signal
import time

import psycopg2
import psycopg2.extensions

from . import procs

PG_BINDIR = os.environ.get("OUTBOX_RELAY_PG_BINDIR", "/usr/lib/postgresql/15/bin")
# Client programs (psql) for a bindir that has none, as the server bundles
# of other majors (pgmajor.py): the installed psql 15 talks to 14 to 18.
CLIENT_BINDIR = "/usr/lib/postgresql/15/bin"

# Added to output_plugin_libraries where the server has that setting (see
# plugin_settings()).
OUTPUT_PLUGINS = "'pgoutput, test_decoding, wal2json'"

# Settings every test server gets, besides plugin_settings().
BASE_SETTINGS = {
    "wal_level": "logical",
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    "listen_addresses": "'127.0.0.1'",
    "track_commit_timestamp": "on",     # tests compare ce_time with the real commit time
    "timezone": "'UTC'",
    "fsync": "off",                     # throwaway data; a killed postmaster still loses nothing
    "autovacuum": "off",                # no stray WAL while tests compare LSNs
    "max_connections": "50",
    "log_min_messages": "warning",
    "log_connections": "off",
    "log_line_prefix": "'%m [%p] %q%a '",
}


_known_settings = {}


def known_settings(bindir=None):
    """The names of the settings the postgres binary of bindir knows, from
    `postgres --describe-config` (tab-separated, name first; allowed as root).
    Cached per bindir."""
    bindir = bindir or PG_BINDIR
    if bindir not in _known_settings:
        out = procs.run([os.path.join(bindir, "postgres"), "--describe-config"], timeout=60).stdout
        _known_settings[bindir] = {line.split("\t", 1)[0] for line in out.splitlines() if line}
    return _known_settings[bindir]


def restricts_output_plugins(bindir=None):
    """True for a server that refuses output plugins not listed in
    output_plugin_libraries: PostgreSQL 14.24, 15.19, 16.15, 17.11, 18.6 and
    later minors (2026-08-13). Older minors do not know the setting and
    refuse to start with it in their configuration."""
    return "output_plugin_libraries" in known_settings(bindir)


def plugin_settings(bindir=None):
    """What a test server needs so that wal2json may be used: on a server
    with output_plugin_libraries, the list with wal2json added to its
    default; on an older one, nothing."""
    return {"output_plugin_libraries": OUTPUT_PLUGINS} if restricts_output_plugins(bindir) else {}


def server_version(bindir=None):
    """`postgres -V` of bindir, e.g. 'postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)'."""
    return procs.run([os.path.join(bindir or PG_BINDIR, "postgres"), "-V"], timeout=60).stdout.strip()


def parse_lsn(text):
    """pg_lsn text ('16/B374D848') -> int; None stays None."""
    if text is None:
        return None
    hi, lo = str(text).split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def format_lsn(value):
    """int -> pg_lsn text, the way PostgreSQL prints it (%X/%X)."""
    return "%X/%X" % (value >> 32, value & 0xFFFFFFFF)


class PostgresServer:
    """One PostgreSQL cluster in base_dir/pgdata.

    start() runs initdb on first use; stop(), restart() and kill() keep the
    data directory and the port, so a restarted server is the same cluster.
    bindir: the server's binaries (default PG_BINDIR, the installed 15 or
    what OUTBOX_RELAY_PG_BINDIR names).
    """

    def __init__(self, base_dir, port=None, settings=None, name="pg", bindir=None):
        self.bindir = bindir or PG_BINDIR
        self.base_dir = base_dir
        self.dir = os.path.join(base_dir, name)
        self.datadir = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "postgres.log")
        self.port = port or procs.free_port()
        self.host = "127.0.0.1"
        self.user = "postgres"
        self.settings = dict(BASE_SETTINGS)
        self.settings.update(plugin_settings(self.bindir))
        self.settings.update(settings or {})
        # a value of None leaves a setting out
        self.settings = {k: v for k, v in self.settings.items() if v is not None}
        self.proc = None
        self._run_as = "postgres" if os.geteuid() == 0 else None

    # --- lifecycle -----------------------------------------------------

    def _bin(self, name):
        """name from the server's bindir, or the installed client's when the bindir lacks it."""
        path = os.path.join(self.bindir, name)
        if not os.path.exists(path) and os.path.exists(os.path.join(CLIENT_BINDIR, name)):
            return os.path.join(CLIENT_BINDIR, name)
        return path

    def _initdb(self):
        os.makedirs(self.dir, exist_ok=True)
        if self._run_as:
            pw = pwd.getpwnam(self._run_as)
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
        os.chmod(self.dir, 0o700)
        procs.run([self._bin("initdb"), "-D", self.datadir, "-A", "trust", "-E", "UTF8",
                   "--no-locale", "-U", self.user, "--no-sync"],
                  user=self._run_as, timeout=180)
        lines = ["# written by tests/harness/pg.py"]
        settings = dict(self.settings)
        settings["port"] = str(self.port)
        settings["unix_socket_directories"] = "'%s'" % self.dir
        for key, value in settings.items():
            lines.append("%s = %s" % (key, value))
        with open(os.path.join(self.datadir, "postgresql.auto.conf"), "a") as f:
            f.write("\n".join(lines) + "\n")
        with open(os.path.join(self.datadir, "pg_hba.conf"), "w") as f:
            f.write(self._hba())
        if self._run_as:
            pw = pwd.getpwnam(self._run_as)
            for p in (os.path.join(self.datadir, "postgresql.auto.conf"),
                      os.path.join(self.datadir, "pg_hba.conf")):
                os.chown(p, pw.pw_uid, pw.pw_gid)

    def _hba(self):
        """pg_hba.conf: everyone trusted, over the socket and over TCP (the
        relay connects with replication=database over TCP)."""
        return ("local all all trust\n"
                "host all all 127.0.0.1/32 trust\n"
                "host replication all 127.0.0.1/32 trust\n")

    def start(self, timeout=60):
        """Start the postmaster (initdb first if needed); returns once it accepts queries."""
        if self.running:
            return self
        if not os.path.exists(os.path.join(self.datadir, "PG_VERSION")):
            self._initdb()
        procs.register(self)
        self.proc = procs.spawn([self._bin("postgres"), "-D", self.datadir],
                                log_path=self.logfile, user=self._run_as)
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("postgres exited with %s during start\n%s"
                                   % (self.proc.returncode, procs.tail(self.logfile)))
            try:
                conn = psycopg2.connect(self.dsn, connect_timeout=2)
                conn.close()
                return self
            except psycopg2.OperationalError as e:
                last_error = e
            time.sleep(0.05)  # retry interval of the bounded poll above
        self.kill()
        raise RuntimeError("postgres did not accept connections within %s s: %s\n%s"
                           % (timeout, last_error, procs.tail(self.logfile)))

    def stop(self, mode="fast", timeout=60):
        """Stop the postmaster: mode 'smart', 'fast' (default) or 'immediate'.

        Returns the postmaster's exit code. Falls back to kill() past timeout.
        """
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT,
               "immediate": signal.SIGQUIT}[mode]
        if self.proc is None:
            return None
        kids = procs.children_of(self.proc.pid)
        rc, ok = procs.terminate(self.proc, sig, timeout)
        if not ok:
            # the postmaster was killed: its backends would keep the old
            # shared memory and block the next start
            for pid in kids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self._reap_backends(kids)
        procs.unregister(self)
        return rc

    def kill(self):
        """Crash the server: SIGKILL the postmaster and every backend at once.

        Afterwards the cluster needs crash recovery on the next start(), like
        after a power cut (minus the lost page cache).
        """
        if self.proc is None:
            return None
        kids = procs.children_of(self.proc.pid)
        try:
            os.kill(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        rc = self.proc.wait(timeout=30)
        self._reap_backends(kids)
        procs.unregister(self)
        return rc

    def _reap_backends(self, kids=None):
        # backends outlive a killed postmaster briefly; a new postmaster refuses
        # to start while they still hold the old shared memory segment
        for pid in kids or []:
            try:
                procs.wait_until(lambda: not procs.pid_alive(pid), 30, what="backend %d exit" % pid)
            except procs.WaitTimeout:
                pass

    def restart(self, mode="fast"):
        self.stop(mode)
        return self.start()

    def _emergency_stop(self):
        if self.running:
            self.stop("immediate", timeout=10)

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        """PID of the postmaster (None when never started)."""
        return self.proc.pid if self.proc else None

    def remove(self):
        """Delete the data directory (server must be stopped)."""
        shutil.rmtree(self.dir, ignore_errors=True)

    def make_standby(self, name, settings=None):
        """A hot standby of this server, streaming from it: a copy of the
        data directory taken while this server is cleanly stopped (a valid
        base backup without pg_basebackup, which the Maven bundles lack),
        with standby.signal, primary_conninfo (with a dbname, as slot
        synchronization needs), hot_standby_feedback and the given settings
        (a value of None leaves one out) appended to postgresql.auto.conf.
        Restarts this server and starts the standby; returns it."""
        self.stop()
        sb = PostgresServer(self.base_dir, name=name, bindir=self.bindir)
        os.makedirs(sb.dir, exist_ok=True)
        procs.run(["cp", "-a", self.datadir, sb.datadir], timeout=120)
        extra = {"port": str(sb.port), "unix_socket_directories": "'%s'" % sb.dir,
                 "primary_conninfo": "'host=%s port=%d user=%s dbname=postgres'"
                                     % (self.host, self.port, self.user),
                 "hot_standby": "on", "hot_standby_feedback": "on"}
        extra.update(settings or {})
        with open(os.path.join(sb.datadir, "postgresql.auto.conf"), "a") as f:
            f.write("".join("%s = %s\n" % kv for kv in extra.items() if kv[1] is not None))
        open(os.path.join(sb.datadir, "standby.signal"), "w").close()
        if self._run_as:
            pw = pwd.getpwnam(self._run_as)
            for p in (sb.dir, os.path.join(sb.datadir, "standby.signal")):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        os.chmod(sb.dir, 0o700)
        self.start()
        return sb.start()

    # --- connecting ----------------------------------------------------

    def conninfo(self, dbname="postgres", **extra):
        """libpq key=value conninfo for dbname over TCP loopback."""
        parts = {"host": self.host, "port": self.port, "user": self.user, "dbname": dbname}
        parts.update(extra)
        return " ".join("%s=%s" % (k, v) for k, v in parts.items())

    @property
    def dsn(self):
        return self.conninfo()

    def url(self, dbname="postgres"):
        return "postgresql://%s@%s:%d/%s" % (self.user, self.host, self.port, dbname)

    def connect(self, dbname="postgres", autocommit=True):
        """A new psycopg2 connection (autocommit by default); caller closes it."""
        conn = psycopg2.connect(self.conninfo(dbname), connect_timeout=10)
        conn.autocommit = autocommit
        return conn

    def query(self, sql, params=None, dbname="postgres"):
        """Run one statement in its own autocommit connection; returns all rows
        (or [] for statements without a result)."""
        conn = self.connect(dbname)
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def scalar(self, sql, params=None, dbname="postgres"):
        rows = self.query(sql, params, dbname)
        return rows[0][0] if rows else None

    def wait_clock(self, seconds, tick=None):
        """Wait until the server's clock has moved seconds past where it is
        now: what was committed before the call is then that old by the
        clock that stamps commits and XLogData."""
        start = self.scalar("SELECT clock_timestamp()")
        procs.wait_until(lambda: self.scalar("SELECT clock_timestamp() - %s > make_interval(secs => %s)",
                                             (start, seconds)),
                         seconds + 30, what="the server's clock to move %g s" % seconds, tick=tick)

    def psql(self, sql=None, dbname="postgres", file=None, variables=None):
        """Run the psql binary (-X, ON_ERROR_STOP) with sql or a file, and psql
        variables ({name: value}, -v name=value); returns stdout."""
        argv = [self._bin("psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                "-d", self.conninfo(dbname)]
        for name, value in (variables or {}).items():
            argv += ["-v", "%s=%s" % (name, value)]
        if file is not None:
            argv += ["-f", file]
        if sql is not None:
            argv += ["-c", sql]
        return procs.run(argv, timeout=120).stdout

    def create_database(self, name):
        self.query('CREATE DATABASE "%s"' % name)

    def drop_database(self, name):
        self.query('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name)

    # --- replication slot helpers --------------------------------------

    def slot(self, slot_name):
        """The slot's row as a dict (LSNs as ints), or None when it does not exist."""
        rows = self.query(
            "SELECT slot_name, plugin, slot_type, database, active, active_pid, "
            "restart_lsn::text, confirmed_flush_lsn::text "
            "FROM pg_replication_slots WHERE slot_name = %s", (slot_name,))
        if not rows:
            return None
        r = rows[0]
        return {"slot_name": r[0], "plugin": r[1], "slot_type": r[2], "database": r[3],
                "active": r[4], "active_pid": r[5], "restart_lsn": parse_lsn(r[6]),
                "confirmed_flush_lsn": parse_lsn(r[7])}

    def confirmed_flush_lsn(self, slot_name):
        s = self.slot(slot_name)
        return s["confirmed_flush_lsn"] if s else None

    def restart_lsn(self, slot_name):
        s = self.slot(slot_name)
        return s["restart_lsn"] if s else None

    def slot_active(self, slot_name):
        s = self.slot(slot_name)
        return bool(s and s["active"])

    def slot_streaming(self, slot_name):
        """The slot is held by a walsender that has started streaming from it
        (pg_stat_replication.state catchup or streaming). A slot being created
        is active too, held by its creator in state startup, before the relay
        has set up the rest of its start."""
        return bool(self.scalar(
            "SELECT count(*) FROM pg_replication_slots s JOIN pg_stat_replication r "
            "ON r.pid = s.active_pid WHERE s.slot_name = %s AND r.state IN ('catchup', 'streaming')",
            (slot_name,)))

    def current_wal_lsn(self):
        return parse_lsn(self.scalar("SELECT pg_current_wal_lsn()::text"))

    def drop_slot(self, slot_name):
        """Drop the slot if it exists and nobody uses it; returns True if dropped."""
        rows = self.query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                          "WHERE slot_name = %s AND NOT active", (slot_name,))
        return bool(rows)

    def system_identifier(self):
        return str(self.scalar("SELECT system_identifier FROM pg_control_system()"))


class TlsPostgresServer(PostgresServer):
    """A PostgreSQL server that takes TCP connections over TLS only, as
    managed and hardened servers do: ssl=on with server_cert (a
    tls.Certificate for the names clients connect to) and its CA as
    ssl_ca_file (for client certificates), scram-sha-256 passwords, and only
    hostssl lines for TCP in pg_hba.conf: `cert` authentication for the
    users in cert_users (the certificate's CN is the user name), scram-sha-256
    for everyone else. The harness itself (create databases, read slots)
    connects as the superuser over the Unix socket, trusted, so conninfo()
    names the socket; tls_conninfo() is what a client over TCP uses.
    """

    def __init__(self, base_dir, server_cert, cert_users=(), name="pg-tls", **kw):
        settings = dict(kw.pop("settings", None) or {})
        settings.update({"ssl": "on", "ssl_cert_file": "'server.crt'",
                         "ssl_key_file": "'server.key'", "ssl_ca_file": "'ca.crt'",
                         "password_encryption": "'scram-sha-256'"})
        super().__init__(base_dir, settings=settings, name=name, **kw)
        self.server_cert = server_cert
        self.cert_users = list(cert_users)

    def _initdb(self):
        super()._initdb()
        pw = pwd.getpwnam(self._run_as) if self._run_as else None
        for src, dst in ((self.server_cert.cert, "server.crt"),
                         (self.server_cert.key, "server.key"), (self.server_cert.ca.cert, "ca.crt")):
            path = os.path.join(self.datadir, dst)
            shutil.copyfile(src, path)
            # the server refuses a key others may read, or one it does not own
            os.chmod(path, 0o600)
            if pw:
                os.chown(path, pw.pw_uid, pw.pw_gid)

    def _hba(self):
        lines = ["local all all trust"]
        lines += ["hostssl all %s 127.0.0.1/32 cert" % u for u in self.cert_users]
        lines += ["hostssl all all 127.0.0.1/32 scram-sha-256"]
        return "\n".join(lines) + "\n"

    def conninfo(self, dbname="postgres", **extra):
        """The harness's own connection: the superuser over the Unix socket."""
        parts = {"host": self.dir, "port": self.port, "user": self.user, "dbname": dbname}
        parts.update(extra)
        return " ".join("%s=%s" % (k, v) for k, v in parts.items())

    def tls_conninfo(self, dbname, user, host="localhost", sslmode="verify-full", **extra):
        """A client's conninfo over TCP with TLS: host (a name in the server's
        certificate, reached at 127.0.0.1 through hostaddr), sslmode, the CA
        as sslrootcert, and extra keywords (sslcert, sslkey, passfile, ...)."""
        parts = {"host": host, "hostaddr": "127.0.0.1", "port": self.port, "user": user,
                 "dbname": dbname, "sslmode": sslmode, "sslrootcert": self.server_cert.ca.cert}
        parts.update(extra)
        return " ".join("%s=%s" % (k, v) for k, v in parts.items() if v is not None)
