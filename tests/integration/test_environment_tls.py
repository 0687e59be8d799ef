# SPDX-License-Identifier: Apache-2.0
"""Encrypted and authenticated end to end (README, "Security"): PostgreSQL
over TLS with sslmode=verify-full, SCRAM passwords and client
certificates; Kafka over SASL_SSL with SCRAM-SHA-512 and over SSL with a
client certificate; every failure of either a clear error with the fix;
no password in anything the relay writes or shows; the least privileges
README lists, and no more, carrying --exactly-once.

The servers are this module's own, one of each for all its tests, made
with throwaway certificates (harness.tls, openssl and keytool, in the
module's temp dir; nothing is committed):

- TlsPostgresServer: ssl=on, only hostssl lines for TCP (scram-sha-256,
  and `cert` for the user CERT_USER), the harness itself as superuser
  over the Unix socket.
- TlsKafkaBroker (Kafka 3.9, harness.SCRAM_KAFKA_VERSION: the newest that
  Debian 12's librdkafka can log in to with SCRAM): a SASL_SSL listener
  with the SCRAM-SHA-512 users of USERS, an SSL listener that wants a
  client certificate (principal User:CN), StandardAuthorizer, no topic
  auto-creation. The harness reads and creates topics as ADMIN.

The PostgreSQL tests publish to the suite's plain broker, so they do not
wait for the TLS broker to start (a separate group under xdist).
"""

import os
import re
import shutil
import signal
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import Case
from harness import (EXIT_ENV, EXIT_OK, EXIT_RUNTIME, CertificateAuthority, TlsKafkaBroker,
                     TlsPostgresServer, TopicReader, by_id, has_ids, insert_rows, make_tempdir,
                     parse_lsn, procs, run_relay, simple_rows, wait_confirmed, write_file)
from harness import TOP
from harness.http import http_get
from check_helpers import run_check

# Unique strings, so that finding one anywhere is a leak and not a coincidence.
USERS = {"admin": "Adm1n-scram-7d1c", "relay": "Rel4y-scram-93fe", "relay-eos": "E0s-scram-51b7"}
KAFKA_TLS_USER = "relay-tls"      # the SSL listener's principal: CN of the client certificate
CERT_USER = "relay_cert"          # PostgreSQL user that logs in with a client certificate
CHECKPOINTS = "outbox-relay.checkpoints"
ROLE_SQL = os.path.join(TOP, "sql", "role.sql")
KIND = "order_received"


def keep_tmp():
    return bool(os.environ.get("OUTBOX_RELAY_KEEP_TMP"))


@pytest.fixture(scope="module")
def certs():
    """A CA and what it issued, and a second CA the servers do not trust."""
    base = make_tempdir(prefix="outbox-relay-tls-")
    ca = CertificateAuthority(os.path.join(base, "ca"))
    other = CertificateAuthority(os.path.join(base, "other-ca"), name="another CA")
    c = type("Certs", (), {})()
    c.base, c.ca, c.other_ca = base, ca, other
    c.server = ca.issue("server", hosts=["localhost", "127.0.0.1"])
    c.pg_client = ca.issue("pg-client", cn=CERT_USER)
    c.kafka_client = ca.issue("kafka-client", cn=KAFKA_TLS_USER)
    c.stranger = other.issue("stranger", cn=CERT_USER)
    yield c
    if not keep_tmp():
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def tls_pg(certs):
    s = TlsPostgresServer(certs.base, certs.server, cert_users=[CERT_USER])
    s.start()
    s.query('CREATE ROLE "%s" LOGIN REPLICATION' % CERT_USER)
    yield s
    s.stop("immediate")


@pytest.fixture(scope="module")
def tls_kafka(certs):
    b = TlsKafkaBroker(certs.base, USERS, certs.ca, certs.server, heap="256m", quick_start=True,
                       client_certs={KAFKA_TLS_USER: certs.kafka_client})
    try:
        b.start(timeout=240)
        # the relay's checkpoint topic, made by an operator: the relay may not create topics here
        b.create_topic(CHECKPOINTS, partitions=1, config={"cleanup.policy": "compact"})
        for principal in ("relay", KAFKA_TLS_USER):
            b.grant(principal, [CHECKPOINTS], ("READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"))
        yield b
    finally:
        b.stop()


class TlsCase(Case):
    """A Case on the TLS PostgreSQL server, whose relays connect over TLS."""

    def passfile(self, role, password, name="pgpass"):
        """A password file (mode 0600) with role's password for this database."""
        return write_file(os.path.join(self.env.base_dir, "%s-%s" % (self.name, name)),
                          "localhost:%d:%s:%s:%s\n" % (self.pg.port, self.dbname, role, password))

    def run(self, args, env=None, name=None):
        """A relay with args (nothing added) and env added to this process's environment."""
        full = dict(os.environ, **(env or {}))
        r = self.env.relay(args, env=full,
                           name="%s-%s" % (self.name, name or "relay-%d" % (len(self.relays) + 1)))
        self.relays.append(r)
        return r


@pytest.fixture
def tcase(request, env, tls_pg, kafka):
    c = TlsCase(env, tls_pg, kafka, request.node.name)
    c.setup_db()
    yield c
    c.teardown()


def relay_role(case, password):
    """The login of sql/role.sql (REPLICATION, SELECT on the outbox, nothing
    else) for this test, with a SCRAM password; returns its name."""
    role = "relay_" + case.name
    case.pg.psql(file=ROLE_SQL, dbname=case.dbname, variables={"relay_role": role})
    case.pg.query("ALTER ROLE \"%s\" PASSWORD '%s'" % (role, password))
    return role


def relay_args(case, dsn, *extra, brokers=None, kafka_opts=(), create_slot=True):
    args = ["-d", dsn, "-S", case.slot, "-b", brokers or case.kafka.bootstrap,
            "--topic", case.prefix + ".${kind}", "-s", "1"] + list(kafka_opts)
    if create_slot:
        args.append("--create-slot")
    return args + list(extra)


def run_status(dsn, slot):
    return run_relay(["slot", "status", "-d", dsn, "-S", slot], timeout=60)


def ssl_connections(pg, user):
    """(backend_type, ssl, client_dn) of user's connections, from pg_stat_ssl."""
    return pg.query("SELECT a.backend_type, s.ssl, s.client_dn FROM pg_stat_activity a "
                    "JOIN pg_stat_ssl s USING (pid) WHERE a.usename = %s", (user,))


def assert_both_connections_tls(case, relay, user, client_dn=None):
    """While relay streams, its walsender and its side connection are both
    encrypted, as the server sees them (pg_stat_ssl), with client_dn when given."""
    kinds = {"walsender", "client backend"}

    def both():
        assert relay.alive, relay.log
        return kinds <= {r[0] for r in ssl_connections(case.pg, user)}
    procs.wait_until(both, 30, what=lambda: "a walsender and a client backend of %s: %s"
                     % (user, ssl_connections(case.pg, user)))
    rows = ssl_connections(case.pg, user)
    assert all(r[1] for r in rows), "a connection without TLS: %s" % rows
    if client_dn:
        assert all(r[2] == client_dn for r in rows), rows


def publish_one(case, relay, reader, prefix):
    """Insert a row, read it back, wait for its confirm; returns its record."""
    conn = case.connect(autocommit=False)
    try:
        commit = insert_rows(conn, simple_rows(prefix, 1, kind=KIND))
    finally:
        conn.close()
    assert reader.read_until(has_ids(commit.work_ids), 60), case.logs()
    got = by_id(reader.records)[commit.work_ids[0]]
    wait_confirmed(case, parse_lsn(got[0].header("ce_pglsn")))
    assert relay.alive, relay.log
    return got[0]


# --- PostgreSQL over TLS ---------------------------------------------------


def test_pg_verify_full_with_scram(tcase, certs):
    """The role of sql/role.sql, its SCRAM password in a password file,
    sslmode=verify-full: `check` passes the connections, `slot create`
    makes the slot, the relay streams and publishes, `slot status` reads
    it; the walsender and the side connection are encrypted."""
    case = tcase
    role = relay_role(case, "pg-role-secret-1")
    dsn = case.pg.tls_conninfo(case.dbname, role, passfile=case.passfile(role, "pg-role-secret-1"))
    rc, out, items = run_check(relay_args(case, dsn, create_slot=False))
    assert rc == EXIT_OK, out
    assert items["connection"][0] == "PASS" and '"%s"' % role in items["connection"][1], out
    assert items["replication connection"][0] == "PASS", out
    rc, out = run_relay(["slot", "create", "-d", dsn, "-S", case.slot, "-b", case.kafka.bootstrap],
                        timeout=60)
    assert rc == EXIT_OK, out
    assert case.slot_info() is not None, out
    relay = case.run(relay_args(case, dsn, create_slot=False))
    relay.wait_ready(case.pg, case.slot)
    assert_both_connections_tls(case, relay, role)
    reader = case.reader()
    publish_one(case, relay, reader, "scram")
    rc, out = run_status(dsn, case.slot)
    assert rc == EXIT_OK and "confirmed_flush_lsn" in out, out
    assert relay.stop() == EXIT_OK, relay.log


def test_pg_client_certificate(tcase, certs):
    """`cert` authentication: the relay logs in with sslcert and sslkey, no
    password; both connections carry the certificate (client_dn)."""
    case = tcase
    case.query('GRANT SELECT ON public.outbox TO "%s"' % CERT_USER)
    dsn = case.pg.tls_conninfo(case.dbname, CERT_USER, sslcert=certs.pg_client.cert,
                               sslkey=certs.pg_client.key)
    rc, out, items = run_check(relay_args(case, dsn, create_slot=False))
    assert rc == EXIT_OK, out
    relay = case.run(relay_args(case, dsn))
    relay.wait_ready(case.pg, case.slot)
    assert_both_connections_tls(case, relay, CERT_USER, client_dn="/CN=%s" % CERT_USER)
    publish_one(case, relay, case.reader(), "cert")
    rc, out = run_status(dsn, case.slot)
    assert rc == EXIT_OK, out
    assert relay.stop() == EXIT_OK, relay.log
    case.query('REVOKE SELECT ON public.outbox FROM "%s"' % CERT_USER)


# What the user gives, and what libpq says and the fix, per failure.
PG_FAILURES = {
    "wrong_ca": (dict(sslrootcert="OTHER_CA"), "certificate verify failed",
                 "fix: sslrootcert must name the certificate of the CA"),
    "wrong_host": (dict(host="db.invalid"), 'does not match host name "db.invalid"',
                   "fix: give host= a name the server's certificate lists"),
    "no_tls": (dict(sslmode="disable", sslrootcert=None), "no encryption",
               "fix: the server accepts only encrypted connections here"),
    "no_client_cert": (dict(user=CERT_USER), "connection requires a valid client certificate",
                       "fix: this pg_hba.conf line wants a client certificate"),
    "untrusted_client_cert": (dict(user=CERT_USER, sslcert="STRANGER", sslkey="STRANGER_KEY"),
                              "alert unknown ca", "fix: the server does not trust the client"),
    "wrong_password": (dict(password_file="wrong"), "password authentication failed",
                       "fix: put the user's password in the password file"),
    "no_password": (dict(), "no password supplied", "fix: the server wants a password"),
}


@pytest.mark.parametrize("failure", sorted(PG_FAILURES))
def test_pg_tls_failure(tcase, certs, failure):
    """Each way a TLS or password login fails: the relay exits 1, `slot
    status` exits 1 and `check` fails its connection item (exit 3), each
    with libpq's message and the fix; never a connection without TLS."""
    case = tcase
    given, said, fix = PG_FAILURES[failure]
    role = relay_role(case, "pg-role-secret-2")
    kw = dict(given)
    user = kw.pop("user", role)
    pw = kw.pop("password_file", "pg-role-secret-2" if failure != "no_password" else None)
    files = {"OTHER_CA": certs.other_ca.cert, "STRANGER": certs.stranger.cert,
             "STRANGER_KEY": certs.stranger.key}
    kw = {k: files.get(v, v) for k, v in kw.items()}
    if pw:
        kw["passfile"] = case.passfile(role, pw)
    dsn = case.pg.tls_conninfo(case.dbname, user, **kw)
    before = case.pg.scalar("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (user,))

    rc, out = run_status(dsn, case.slot)
    assert rc == EXIT_RUNTIME, out
    assert said in out and fix in out, out
    relay = case.run(relay_args(case, dsn))
    assert relay.wait(timeout=60) == EXIT_RUNTIME, relay.log
    line = [ln for ln in relay.log.splitlines() if ln.startswith("outbox-relay: error: ")]
    assert len(line) == 1 and said in line[0] and fix in line[0], relay.log
    assert "cannot connect to the database" in line[0], line
    rc, out, items = run_check(relay_args(case, dsn, create_slot=False))
    assert rc == EXIT_ENV and items["connection"][0] == "FAIL", out
    assert said in items["connection"][1] and fix in items["connection"][1], out
    # nothing got in, encrypted or not
    assert case.pg.scalar("SELECT count(*) FROM pg_stat_activity WHERE usename = %s",
                          (user,)) == before
    assert case.slot_info() is None


# --- Kafka over TLS ----------------------------------------------------------


@pytest.fixture
def kcase(request, env, tls_pg, tls_kafka):
    c = TlsCase(env, tls_pg, tls_kafka, request.node.name)
    c.setup_db()
    yield c
    c.teardown()


def admin_reader(case, broker, topics, **config):
    cfg = broker.client_config()
    rd = TopicReader(cfg.pop("bootstrap.servers"), list(topics), **dict(cfg, **config))
    case.readers.append(rd)
    return rd


def scram_opts(broker, user, ca=None):
    return ["-X", "security.protocol=SASL_SSL", "-X", "sasl.mechanism=SCRAM-SHA-512",
            "-X", "sasl.username=" + user, "-X", "ssl.ca.location=" + (ca or broker.ca.cert)]


def secret_file(case, name, text):
    return write_file(os.path.join(case.env.base_dir, "%s-%s" % (case.name, name)), text + "\n")


def test_kafka_sasl_ssl_scram_and_mutual_tls(kcase, certs, tls_kafka):
    """The relay publishes over SASL_SSL, logged in with SCRAM-SHA-512 and its
    password from OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE; then, the same slot,
    over SSL with a client certificate; PostgreSQL over TLS throughout."""
    case = kcase
    topic = case.topic(KIND)
    tls_kafka.create_topic(topic, partitions=1)
    tls_kafka.grant("relay", [topic], ("WRITE", "DESCRIBE"))
    tls_kafka.grant(KAFKA_TLS_USER, [topic], ("WRITE", "DESCRIBE"))
    role = relay_role(case, "pg-role-secret-3")
    dsn = case.pg.tls_conninfo(case.dbname, role, passfile=case.passfile(role, "pg-role-secret-3"))
    reader = admin_reader(case, tls_kafka, [topic])
    secret = {"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE":
              secret_file(case, "kafka-pw", USERS["relay"])}

    relay = case.run(relay_args(case, dsn, brokers=tls_kafka.bootstrap,
                                kafka_opts=scram_opts(tls_kafka, "relay")), env=secret)
    relay.wait_ready(case.pg, case.slot)
    first = publish_one(case, relay, reader, "sasl-ssl")
    assert relay.stop() == EXIT_OK, relay.log

    mtls = ["-X", "security.protocol=SSL", "-X", "ssl.ca.location=" + certs.ca.cert,
            "-X", "ssl.certificate.location=" + certs.kafka_client.cert,
            "-X", "ssl.key.location=" + certs.kafka_client.key]
    rc, out, items = run_check(relay_args(case, dsn, brokers=tls_kafka.ssl_bootstrap,
                                          kafka_opts=mtls, create_slot=False))
    assert rc == EXIT_OK, out
    assert items["kafka brokers"][0] == "PASS", out
    relay = case.run(relay_args(case, dsn, brokers=tls_kafka.ssl_bootstrap, kafka_opts=mtls,
                                create_slot=False))
    relay.wait_ready(case.pg, case.slot)
    second = publish_one(case, relay, reader, "mutual-tls")
    assert relay.stop() == EXIT_OK, relay.log
    assert first.topic == second.topic == topic
    assert len(by_id(reader.records)) == 2, by_id(reader.records)


# What the user gives, what librdkafka says and the fix, per Kafka failure of `check`.
KAFKA_FAILURES = {
    "wrong_ca": ("SASL_SSL", "certificate verify failed", "fix: Check -X ssl.ca.location"),
    "wrong_password": ("SASL_SSL", "invalid credentials", "fix: Check -X sasl.mechanism"),
    "no_client_cert": ("SSL", "bad certificate", "give -X ssl.certificate.location and ssl.key"),
}


def test_kafka_tls_failures(kcase, certs, tls_kafka):
    """`check` with a CA that did not sign the brokers' certificates, a wrong
    SCRAM password, and no client certificate on the listener that wants
    one: the kafka brokers item fails with librdkafka's reason, the broker
    connection's error and the fix (exit 3). The relay says the same at
    start (exit 1)."""
    case = kcase
    role = relay_role(case, "pg-role-secret-4")
    dsn = case.pg.tls_conninfo(case.dbname, role, passfile=case.passfile(role, "pg-role-secret-4"))
    good = {"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE": secret_file(case, "good", USERS["relay"])}
    bad = {"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE": secret_file(case, "bad", "not-the-password")}
    runs = {
        "wrong_ca": (tls_kafka.bootstrap, scram_opts(tls_kafka, "relay", certs.other_ca.cert),
                     good),
        "wrong_password": (tls_kafka.bootstrap, scram_opts(tls_kafka, "relay"), bad),
        "no_client_cert": (tls_kafka.ssl_bootstrap,
                           ["-X", "security.protocol=SSL",
                            "-X", "ssl.ca.location=" + certs.ca.cert],
                           {}),
    }
    problems = []
    # each waits 10 s for a broker: side by side
    relay = case.run(relay_args(case, dsn, brokers=tls_kafka.bootstrap,
                                kafka_opts=scram_opts(tls_kafka, "relay")), env=bad)
    with ThreadPoolExecutor(len(runs)) as pool:
        checks = {name: pool.submit(run_check, relay_args(case, dsn, brokers=brokers,
                                                          kafka_opts=opts, create_slot=False),
                                    env=dict(os.environ, **env))
                  for name, (brokers, opts, env) in runs.items()}
    for name, fut in sorted(checks.items()):
        _, said, fix = KAFKA_FAILURES[name]
        rc, out, items = fut.result()
        status, text = items.get("kafka brokers", ("missing", ""))
        if rc != EXIT_ENV or status != "FAIL" or said not in text or fix not in text:
            problems.append("%s: exit %s, %s: %s" % (name, rc, status, text))
    assert relay.wait(timeout=60) == EXIT_RUNTIME, relay.log
    err = [ln for ln in relay.log.splitlines() if ln.startswith("outbox-relay: error: ")]
    if len(err) != 1 or "invalid credentials" not in err[0] or \
            "fix: Check -X sasl.mechanism" not in err[0]:
        problems.append("relay: %s" % relay.log)
    assert not problems, "\n".join(problems)


# --- Secrets ---------------------------------------------------------------


def test_secrets_never_leak(kcase, tls_kafka):
    """Passwords for both sides through the documented secret paths (libpq's
    password file, OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE): none of them, nor
    the wrong ones of failed logins, appears in the relay's log at debug
    level (text with librdkafka's conf and security debug, and JSON), in
    /metrics, in `check` output, in the errors of failed connections, or in
    /proc/<pid>/cmdline and environ."""
    case = kcase
    topic = case.topic(KIND)
    tls_kafka.create_topic(topic, partitions=1)
    tls_kafka.grant("relay", [topic], ("WRITE", "DESCRIBE"))
    pg_pw, pg_wrong = "Pg-s3cret-role-0a9e", "Pg-wr0ng-role-77c2"
    kafka_wrong = "Kf-wr0ng-scram-3b5d"
    secrets = [pg_pw, pg_wrong, USERS["relay"], kafka_wrong]
    role = relay_role(case, pg_pw)
    dsn = case.pg.tls_conninfo(case.dbname, role, passfile=case.passfile(role, pg_pw))
    wrong_dsn = case.pg.tls_conninfo(case.dbname, role,
                                     passfile=case.passfile(role, pg_wrong, name="pgpass-wrong"))
    good = {"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE": secret_file(case, "kpw", USERS["relay"])}
    bad = {"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE": secret_file(case, "kpw-wrong", kafka_wrong)}
    opts = scram_opts(tls_kafka, "relay")
    reader = admin_reader(case, tls_kafka, [topic])
    seen = {}

    for n, fmt in enumerate(("text", "json")):
        port = procs.free_port()
        log_file = os.path.join(case.env.base_dir, "%s-%s.log" % (case.name, fmt))
        extra = ["--log-level=debug", "--log-format=" + fmt, "--http=127.0.0.1:%d" % port,
                 "--stats-interval=1"]
        if fmt == "text":
            extra += ["-X", "debug=conf,security,broker"]
        else:
            extra += ["--log-file=" + log_file]
        relay = case.run(relay_args(case, dsn, *extra, brokers=tls_kafka.bootstrap,
                                    kafka_opts=opts, create_slot=n == 0), env=good)
        relay.wait_ready(case.pg, case.slot)
        publish_one(case, relay, reader, "leak-%s" % fmt)
        seen["%s /metrics" % fmt] = http_get(port, "/metrics")[1]
        seen["%s /readyz" % fmt] = http_get(port, "/readyz")[1]
        for f in ("cmdline", "environ"):
            with open("/proc/%d/%s" % (relay.pid, f), "rb") as fh:
                seen["%s /proc/pid/%s" % (fmt, f)] = fh.read().decode("utf-8", "replace")
        relay.proc.send_signal(signal.SIGHUP)    # a reload logs what changed, never a value
        assert relay.stop() == EXIT_OK, relay.log
        seen["%s log" % fmt] = relay.log + (open(log_file).read() if fmt == "json" else "")
    assert '"level":"debug"' in seen["json log"], seen["json log"][-2000:]
    assert "sasl.password = [redacted]" in seen["text log"], "librdkafka's conf debug missing"

    rc, out, _ = run_check(relay_args(case, dsn, brokers=tls_kafka.bootstrap, kafka_opts=opts,
                                      create_slot=False), env=dict(os.environ, **good))
    assert rc == EXIT_OK, out
    seen["check"] = out
    # the failed logins side by side: the Kafka ones wait 10 s for a broker
    failing = [case.run(relay_args(case, dsn_, "--log-level=debug", brokers=tls_kafka.bootstrap,
                                   kafka_opts=opts, create_slot=False), env=env, name=name)
               for name, dsn_, env in (("pg-login-failing", wrong_dsn, good),
                                       ("kafka-login-failing", dsn, bad))]
    rc, out, _ = run_check(relay_args(case, wrong_dsn, brokers=tls_kafka.bootstrap, kafka_opts=opts,
                                      create_slot=False), env=dict(os.environ, **bad))
    assert rc == EXIT_ENV and "password authentication failed" in out and \
        "invalid credentials" in out, out
    seen["check, both logins failing"] = out
    for relay in failing:
        assert relay.wait(timeout=60) == EXIT_RUNTIME, relay.log
        seen[relay.log_path] = relay.log
    leaks = ["%r in %s" % (s, where) for where, text in seen.items() for s in secrets if s in text]
    assert not leaks, "\n".join(leaks)


# --- Least privilege -------------------------------------------------------


@pytest.mark.exactly_once
def test_least_privilege_exactly_once(kcase, tls_kafka):
    """README's grants and no more carry --exactly-once with a dead-letter
    topic: PostgreSQL's role of sql/role.sql over TLS with SCRAM; Kafka's
    principal relay-eos over SASL_SSL with WRITE, DESCRIBE and DESCRIBE_CONFIGS
    on its topic and the dead-letter topic (the relay reads their
    max.message.bytes), READ, WRITE, DESCRIBE and DESCRIBE_CONFIGS on the
    checkpoint topic (the relay verifies its cleanup.policy and
    min.insync.replicas), WRITE and DESCRIBE on transactional ids with the default prefix
    "outbox-relay/" (a PREFIXED ACL). `check` is safe to start (its probe id
    is under the prefix too); a read_committed reader sees each row once and
    the unpublishable row (a kind that is no topic name) in the dead-letter
    topic."""
    case = kcase
    user = "relay-eos"
    topic, dlq, checkpoints = case.topic(KIND), case.prefix + ".dead-letter", case.prefix + ".ckpt"
    for t in (topic, dlq):
        tls_kafka.create_topic(t, partitions=1)
    tls_kafka.create_topic(checkpoints, partitions=1, config={"cleanup.policy": "compact"})
    tls_kafka.grant(user, [topic, dlq], ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"))
    tls_kafka.grant(user, [checkpoints], ("READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"))
    tls_kafka.grant(user, ["transactional-id-prefix:outbox-relay/"], ("WRITE", "DESCRIBE"))
    role = relay_role(case, "pg-role-secret-5")
    dsn = case.pg.tls_conninfo(case.dbname, role, passfile=case.passfile(role, "pg-role-secret-5"))
    env = {"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE": secret_file(case, "kpw", USERS[user])}
    args = relay_args(case, dsn, "--exactly-once", "--on-error=dead-letter",
                      "--dead-letter-topic=" + dlq, "--checkpoint-topic=" + checkpoints,
                      brokers=tls_kafka.bootstrap, kafka_opts=scram_opts(tls_kafka, user),
                      create_slot=False)

    rc, out, items = run_check(args, env=dict(os.environ, **env))
    assert rc == EXIT_OK, out
    assert items["kafka transactions"][0] == "PASS", out
    relay = case.run(args + ["--create-slot"], env=env)
    relay.wait_ready(case.pg, case.slot)
    reader = admin_reader(case, tls_kafka, [topic, dlq], **{"isolation.level": "read_committed"})
    conn = case.connect(autocommit=False)
    good = insert_rows(conn, simple_rows("eos", 3, kind=KIND))
    # a kind that gives no valid topic name: a row for the dead-letter topic
    bad = insert_rows(conn, [{"work_id": "eos-bad", "kind": "no spaces", "payload": {"n": 0}}]
                      + simple_rows("eos-after", 1, kind=KIND))
    conn.close()
    ids = good.work_ids + bad.work_ids
    assert reader.read_until(has_ids(ids), 90), case.logs()
    wait_confirmed(case, bad.lsn_before)
    got = by_id(reader.records)
    assert all(len(v) == 1 for v in got.values()), got
    assert got["eos-bad"][0].topic == dlq, got["eos-bad"]
    assert got["eos-bad"][0].header("outbox_relay_error_code") == "INVALID_TOPIC", got["eos-bad"]
    assert {got[i][0].topic for i in good.work_ids + ["eos-after-0"]} == {topic}
    assert relay.alive, relay.log
    assert relay.stop() == EXIT_OK, relay.log
    assert not re.search(r"(?i)authoriz", relay.log), relay.log
