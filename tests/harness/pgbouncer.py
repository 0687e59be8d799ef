# SPDX-License-Identifier: Apache-2.0
"""A throwaway PgBouncer (Debian's pgbouncer package) in front of a harness
PostgreSQL, on a free loopback port: what users put in -d by mistake. Runs
as the 'postgres' user when the harness runs as root (PgBouncer refuses
root). This module knows nothing about Kafka or the relay."""

import os
import pwd
import shutil

from . import procs

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


class PgBouncer:
    """PgBouncer in session mode forwarding every database to pg.

    ignore: startup parameters it drops instead of refusing (its
    ignore_startup_parameters), e.g. ["replication", "options"].
    """

    def __init__(self, base_dir, pg, ignore=(), name="pgbouncer"):
        self.dir = os.path.join(base_dir, name)
        self.pg = pg
        self.ignore = list(ignore)
        self.port = procs.free_port()
        self.proc = None
        self._run_as = "postgres" if os.geteuid() == 0 else None

    def start(self, timeout=30):
        os.makedirs(self.dir, exist_ok=True)
        ini = os.path.join(self.dir, "pgbouncer.ini")
        users = os.path.join(self.dir, "userlist.txt")
        with open(users, "w") as f:
            f.write('"%s" ""\n' % self.pg.user)
        with open(ini, "w") as f:
            f.write("[databases]\n* = host=%s port=%d\n\n[pgbouncer]\n"
                    "listen_addr = 127.0.0.1\nlisten_port = %d\nunix_socket_dir =\n"
                    "auth_type = trust\nauth_file = %s\npool_mode = session\n"
                    "logfile = %s\npidfile = %s\n%s"
                    % (self.pg.host, self.pg.port, self.port, users,
                       os.path.join(self.dir, "pgbouncer.log"), os.path.join(self.dir, "pgbouncer.pid"),
                       "ignore_startup_parameters = %s\n" % ",".join(self.ignore) if self.ignore else ""))
        if self._run_as:
            pw = pwd.getpwnam(self._run_as)
            for p in (self.dir, ini, users):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        procs.register(self)
        self.proc = procs.spawn([PGBOUNCER, ini], log_path=os.path.join(self.dir, "stdout.log"),
                                user=self._run_as)
        procs.wait_until(lambda: procs.port_open(self.port) or self.proc.poll() is not None,
                         timeout, what="pgbouncer to listen")
        if self.proc.poll() is not None:
            raise RuntimeError("pgbouncer exited with %s\n%s" % (
                self.proc.returncode, procs.tail(os.path.join(self.dir, "stdout.log"))))
        return self

    def conninfo(self, dbname="postgres"):
        return "host=127.0.0.1 port=%d user=%s dbname=%s" % (self.port, self.pg.user, dbname)

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            procs.terminate(self.proc, 15, 10)
        procs.unregister(self)

    def _emergency_stop(self):
        self.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
