# SPDX-License-Identifier: Apache-2.0
"""A throwaway single-node Apache Kafka broker (KRaft mode) for tests.

Debian packages no Kafka, so the broker's jars come from Maven Central through
tests/kafka/pom.xml and are cached in ${XDG_CACHE_HOME:-~/.cache}/outbox-relay/
so that later runs start offline. The broker is one JVM that is both controller
and broker, on two free loopback ports, with its log dir in the temp dir.

stop(), kill(), freeze()/thaw() and restart() simulate broker outages; a
restarted broker keeps its ports and data, so records written before are still
there.

SaslKafkaBroker is a second kind, for tests of authorization: SASL/PLAIN on
the client listener, KRaft's StandardAuthorizer denying what no ACL allows,
and helpers to create topics and grant ACLs as its super user.
TlsKafkaBroker, a third, is reached over TLS only: a SASL_SSL listener with
SCRAM-SHA-512 users and an SSL listener that wants a client certificate.

This module knows nothing about PostgreSQL or the relay.
"""

import base64
import os
import shutil
import signal
import subprocess
import time

from . import procs

KAFKA_VERSION = "4.1.1"     # keep in step with tests/kafka/pom.xml
# The newest Kafka that Debian 12's librdkafka (2.0.2) can log in to with
# SCRAM: librdkafka before 2.6.1 repeats the client nonce in its
# client-final-message, which Kafka 4.0 and later refuse as "invalid
# credentials" (librdkafka issue 4895). TlsKafkaBroker runs it by default.
SCRAM_KAFKA_VERSION = "3.9.1"
_HERE = os.path.dirname(os.path.abspath(__file__))
POM = os.path.join(os.path.dirname(_HERE), "kafka", "pom.xml")


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "outbox-relay")


def jars_dir(version=KAFKA_VERSION):
    return os.path.join(cache_dir(), "kafka-%s" % version, "libs")


def ensure_jars(version=KAFKA_VERSION, quiet=True):
    """Return the directory holding the broker's jars, downloading them with mvn
    on first use. A marker file is written only after a complete download, so
    an interrupted fetch is retried instead of leaving a broken classpath."""
    libs = jars_dir(version)
    marker = os.path.join(os.path.dirname(libs), ".complete")
    if os.path.exists(marker):
        return libs
    if shutil.which("mvn") is None:
        raise RuntimeError("mvn not found: it is needed once to fetch the Kafka %s jars into %s"
                           % (version, libs))
    tmp = libs + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    argv = ["mvn", "-B", "-f", POM, "dependency:copy-dependencies",
            "-Dkafka.version=%s" % version, "-DoutputDirectory=%s" % tmp,
            "-DincludeScope=runtime"]
    if quiet:
        argv.insert(1, "-q")
    procs.run(argv, timeout=900)
    if not any(n.startswith("kafka_2.13-") for n in os.listdir(tmp)):
        raise RuntimeError("mvn finished but no kafka_2.13 jar in %s" % tmp)
    shutil.rmtree(libs, ignore_errors=True)
    os.rename(tmp, libs)
    with open(marker, "w") as f:
        f.write(version + "\n")
    return libs


LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.kafka.name = kafka.server.KafkaServer
logger.kafka.level = INFO
"""



def random_cluster_id():
    """Kafka's Uuid text: 16 random bytes, URL-safe base64 without padding,
    never starting with "-" (Uuid.randomUuid() draws again too): kafka-storage
    format -t took such an id for an option and failed, one format in 64."""
    while True:
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id

class KafkaBroker:
    """One KRaft broker+controller in base_dir/<name>."""

    # JVM flags for a broker that lives for one test (quick_start=True): C1
    # alone and the serial collector start the JVM on about 40 % less CPU
    # (measured on the 2-core CI machine: 3.3 s of CPU against 5.3 s), which
    # matters when parallel workers start brokers at once; such a broker
    # carries a test's few rows, not a benchmark's load.
    QUICK_START_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")

    def __init__(self, base_dir, port=None, controller_port=None, name="kafka",
                 version=KAFKA_VERSION, extra_properties=None, heap="512m", quick_start=False):
        self.base_dir = base_dir
        self.dir = os.path.join(base_dir, name)
        self.datadir = os.path.join(self.dir, "data")
        self.logfile = os.path.join(self.dir, "kafka.log")
        self.port = port or procs.free_port()
        self.controller_port = controller_port or procs.free_port()
        self.version = version
        self.extra_properties = dict(extra_properties or {})
        self.heap = heap
        self.quick_start = quick_start
        self.proc = None
        self._frozen = False
        self._libs = None

    @property
    def bootstrap(self):
        """bootstrap.servers value for clients (the relay's -b)."""
        return "127.0.0.1:%d" % self.port

    def _java(self, main, *args, heap=None):
        argv = ["java"]
        if heap:
            argv.append("-Xmx%s" % heap)
        if self.quick_start:
            argv += list(self.QUICK_START_FLAGS)
        argv += ["-XX:-UsePerfData", "-Djava.awt.headless=true",
                 "-Dlog4j2.configurationFile=%s" % os.path.join(self.dir, "log4j2.properties"),
                 "-cp", os.path.join(self._libs, "*"), main]
        return argv + list(args)

    def client_config(self):
        """Settings a client needs to reach this broker (bootstrap.servers, and
        for a broker with authentication its security settings)."""
        return {"bootstrap.servers": self.bootstrap}

    def _properties(self):
        """server.properties before extra_properties are applied."""
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": "1@127.0.0.1:%d" % self.controller_port,
            "listeners": "PLAINTEXT://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d"
                         % (self.port, self.controller_port),
            "advertised.listeners": "PLAINTEXT://127.0.0.1:%d" % self.port,
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": self.datadir,
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "num.partitions": "3",
            "auto.create.topics.enable": "true",
            "group.initial.rebalance.delay.ms": "0",
            "log.flush.interval.messages": "9223372036854775807",
        }

    def _configure(self):
        os.makedirs(self.dir, exist_ok=True)
        props = self._properties()
        props.update(self.extra_properties)
        with open(os.path.join(self.dir, "server.properties"), "w") as f:
            for k, v in props.items():
                f.write("%s=%s\n" % (k, v))
        with open(os.path.join(self.dir, "log4j2.properties"), "w") as f:
            f.write(LOG4J2)

    def _format_args(self):
        """Extra arguments of `kafka-storage format` for this broker (none;
        a subclass that needs records in the bootstrap checkpoint, such as
        SCRAM users, returns them and is formatted on its own)."""
        return []

    def _format(self):
        """Format the log dir for KRaft. What `kafka-storage format` writes
        (meta.properties with node id 1, a directory id and a cluster id, and
        bootstrap.checkpoint) depends only on the Kafka version and
        _format_args(), not on ports or listeners, so it is done once into the
        cache and copied: two JVM starts (about 4 s of CPU) less per broker.
        Every broker here is a cluster of its own, so sharing those ids is
        harmless."""
        if self._format_args():
            self._format_into(self.datadir, os.path.join(self.dir, "server.properties"))
            return
        template = os.path.join(os.path.dirname(self._libs), "formatted-storage")
        if not os.path.exists(os.path.join(template, "meta.properties")):
            tmp = "%s.%d.partial" % (template, os.getpid())
            shutil.rmtree(tmp, ignore_errors=True)
            props = os.path.join(self.dir, "format.properties")
            with open(os.path.join(self.dir, "server.properties")) as src, open(props, "w") as f:
                for line in src:
                    f.write("log.dirs=%s\n" % tmp if line.startswith("log.dirs=") else line)
            self._format_into(tmp, props)
            try:
                os.rename(tmp, template)     # the first worker to finish wins
            except OSError:
                shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(template, self.datadir)

    def _format_into(self, datadir, properties):
        cluster_id = random_cluster_id()
        procs.run(self._java("kafka.tools.StorageTool", "format", "-t", cluster_id,
                             "-c", properties, *self._format_args(), heap="128m"),
                  timeout=120)

    def start(self, timeout=90):
        """Start the broker (format its storage on first start); returns when it
        answers metadata requests."""
        if self.running:
            return self
        if self._libs is None:
            self._libs = ensure_jars(self.version)
        if not os.path.exists(os.path.join(self.dir, "server.properties")):
            self._configure()
            self._format()
        procs.register(self)
        self.proc = procs.spawn(self._java("kafka.Kafka",
                                           os.path.join(self.dir, "server.properties"),
                                           heap=self.heap),
                                log_path=self.logfile, cwd=self.dir)
        self._frozen = False
        try:
            procs.wait_until(self._answers_metadata, timeout, interval=0.2,
                             what="Kafka broker on %s to answer metadata" % self.bootstrap)
        except procs.WaitTimeout as e:
            self.kill()
            raise RuntimeError("%s\n%s" % (e, procs.tail(self.logfile)))
        return self

    def _answers_metadata(self):
        if self.proc.poll() is not None:
            raise RuntimeError("Kafka exited with %s during start\n%s"
                               % (self.proc.returncode, procs.tail(self.logfile)))
        if not procs.port_open(self.port):
            return False
        from confluent_kafka.admin import AdminClient
        from confluent_kafka import KafkaException
        admin = AdminClient(dict(self.client_config(), **{"socket.timeout.ms": 2000}))
        try:
            md = admin.list_topics(timeout=2)
            return len(md.brokers) > 0
        except KafkaException:
            return False

    def stop(self, timeout=60):
        """Controlled shutdown (SIGTERM); SIGKILL past timeout. Returns the exit code."""
        if self.proc is None:
            return None
        if self._frozen:
            self.thaw()
        rc, ok = procs.terminate(self.proc, signal.SIGTERM, timeout)
        procs.unregister(self)
        return rc

    def kill(self):
        """Crash the broker (SIGKILL). Returns the exit code."""
        if self.proc is None:
            return None
        rc, ok = procs.terminate(self.proc, signal.SIGKILL, 30)
        self._frozen = False
        procs.unregister(self)
        return rc

    def freeze(self):
        """SIGSTOP the JVM: connections stay open, nothing answers."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        self._frozen = True

    def thaw(self):
        os.kill(self.proc.pid, signal.SIGCONT)
        self._frozen = False

    def restart(self, timeout=90):
        """Stop, then start again on the same ports with the same data."""
        self.stop()
        return self.start(timeout=timeout)

    def _emergency_stop(self):
        if self.running:
            if self._frozen:
                self.thaw()
            procs.terminate(self.proc, signal.SIGKILL, 10)

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def create_topic(self, name, partitions=3, config=None, timeout=30):
        """Create topic name (config: topic-level settings such as max.message.bytes)
        and wait until the broker lists it, so that a client's first metadata
        request sees it."""
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient(self.client_config())
        fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=dict(config or {}))])[name]
        fut.result(timeout=timeout)
        procs.wait_until(lambda: name in self.topics(), timeout, interval=0.2,
                         what="topic %s in metadata" % name)

    def create_topics(self, names, partitions=1, timeout=60):
        """Create every topic of names in one CreateTopics request and wait
        until the broker lists them all (many topics at once: a test that
        needs them to exist, not to be created on first use)."""
        from confluent_kafka.admin import AdminClient, NewTopic
        admin = AdminClient(self.client_config())
        futs = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1)
                                    for n in names])
        for fut in futs.values():
            fut.result(timeout=timeout)
        procs.wait_until(lambda: set(names) <= set(self.topics()), timeout, interval=0.2,
                         what="%d topics in metadata" % len(names))

    def delete_topic(self, name, timeout=30):
        """Delete topic name and wait until the broker no longer lists it."""
        from confluent_kafka.admin import AdminClient
        admin = AdminClient(self.client_config())
        admin.delete_topics([name])[name].result(timeout=timeout)
        procs.wait_until(lambda: name not in self.topics(), timeout, interval=0.2,
                         what="topic %s gone from metadata" % name)

    def topics(self, timeout=10):
        from confluent_kafka.admin import AdminClient
        admin = AdminClient(self.client_config())
        return {name: len(t.partitions) for name, t in admin.list_topics(timeout=timeout).topics.items()}

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


# Kafka's SASL/PLAIN login module; the broker reads its users from user_<name> options.
_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
ACL_TOOL = os.path.join(_HERE, "KafkaAcls.java")


def _jaas_quote(text):
    if '"' in text or "\\" in text:
        raise ValueError("SASL user names and passwords here must not hold quotes or backslashes")
    return '"%s"' % text


class SaslKafkaBroker(KafkaBroker):
    """A KRaft broker+controller whose client listener wants SASL/PLAIN and
    whose authorizer (KRaft's StandardAuthorizer) denies what no ACL allows.

    users: {name: password}; must hold ADMIN, the super user that the harness
    and the broker itself (inter-broker listener) log in as. The controller
    listener stays PLAINTEXT on loopback, so its principal User:ANONYMOUS is
    a super user too (the broker registers with the controller through it).
    Topics are not created automatically: create_topic() as admin, then
    grant() another user what it may do. The default broker of the suite is a
    plain KafkaBroker; this one runs beside it, in its own dir and ports.
    """

    ADMIN = "admin"
    LISTENER = "SASL_PLAINTEXT"

    def __init__(self, base_dir, users, name="kafka-sasl", **kw):
        super().__init__(base_dir, name=name, **kw)
        if self.ADMIN not in users:
            raise ValueError("users must include %r" % self.ADMIN)
        self.users = dict(users)

    def client_config(self, user=None):
        """Client settings to log in as user (default: the super user)."""
        user = user or self.ADMIN
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "PLAIN", "sasl.username": user,
                "sasl.password": self.users[user]}

    def relay_options(self, user):
        """The relay's -X options to log in as user."""
        out = []
        for k, v in self.client_config(user).items():
            if k != "bootstrap.servers":
                out += ["-X", "%s=%s" % (k, v)]
        return out

    def _properties(self):
        props = super()._properties()
        jaas = "%s required username=%s password=%s %s;" % (
            _PLAIN_MODULE, _jaas_quote(self.ADMIN), _jaas_quote(self.users[self.ADMIN]),
            " ".join("user_%s=%s" % (u, _jaas_quote(p)) for u, p in sorted(self.users.items())))
        props.update({
            "listeners": "%s://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d"
                         % (self.LISTENER, self.port, self.controller_port),
            "advertised.listeners": "%s://127.0.0.1:%d" % (self.LISTENER, self.port),
            "listener.security.protocol.map": "%s:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
                                              % self.LISTENER,
            "inter.broker.listener.name": self.LISTENER,
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.%s.plain.sasl.jaas.config" % self.LISTENER.lower(): jaas,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "allow.everyone.if.no.acl.found": "false",
            "super.users": "User:%s;User:ANONYMOUS" % self.ADMIN,
            "auto.create.topics.enable": "false",
        })
        return props

    def admin_java_properties(self):
        """The Java client's settings to log in as the super user (KafkaAcls.java)."""
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "%s required username=%s password=%s;" % (
                    _PLAIN_MODULE, _jaas_quote(self.ADMIN), _jaas_quote(self.users[self.ADMIN]))}

    def grant(self, user, resources, operations=("WRITE", "DESCRIBE"), timeout=60):
        """Allow User:user the operations (Kafka AclOperation names) on each of
        resources (literal topic names; "transactional-id:NAME",
        "transactional-id-prefix:PREFIX", "group:NAME", "cluster"), as the
        super user. Returns once user sees
        the topics in metadata (when DESCRIBE is among the operations).

        confluent-kafka-python 1.7 (Debian 12) has no create_acls and the
        broker's jars hold no kafka-acls tool, so KafkaAcls.java does it with
        the Java Admin client of those jars (java's source-file mode)."""
        self._acls([], user, resources, operations, timeout)
        topics = [t for t in resources if ":" not in t and t != "cluster"]
        if "DESCRIBE" in operations and topics:
            procs.wait_until(lambda: self._sees(user, topics), timeout, interval=0.2,
                             what="user %s to see topics %s" % (user, list(topics)))

    def deny(self, user, resources, operations, timeout=60):
        """Deny User:user the operations on each of resources (as in grant()):
        a DENY binding overrides every ALLOW, so this takes back what grant()
        gave, e.g. WRITE on a topic while a relay runs. Returns once the
        controller accepted it; a caller that needs the brokers to enforce it
        checks that itself."""
        self._acls(["--deny"], user, resources, operations, timeout)

    def _acls(self, flags, user, resources, operations, timeout):
        if self._libs is None:
            self._libs = ensure_jars(self.version)
        props = os.path.join(self.dir, "admin-client.properties")
        with open(props, "w") as f:
            f.write("".join("%s=%s\n" % kv for kv in self.admin_java_properties().items()))
        os.chmod(props, 0o600)
        procs.run(self._java(ACL_TOOL, *flags, props, "User:" + user, ",".join(operations), *resources,
                             heap="256m"),
                  timeout=timeout + 60)

    def _sees(self, user, topics):
        """True if user's metadata request lists every topic without an error."""
        from confluent_kafka.admin import AdminClient
        from confluent_kafka import KafkaException
        admin = AdminClient(self.client_config(user))
        try:
            md = admin.list_topics(timeout=5).topics
        except KafkaException:
            return False
        return all(t in md and md[t].error is None for t in topics)


_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


class TlsKafkaBroker(SaslKafkaBroker):
    """A KRaft broker+controller reached over TLS only, as managed clusters
    are (MSK, Confluent Cloud, Aiven), with KRaft's StandardAuthorizer as in
    SaslKafkaBroker:

    - a SASL_SSL listener (port, the bootstrap) with SCRAM-SHA-512 users,
      created from users ({name: password}, ADMIN among them) by the broker's
      own `kafka-storage format --add-scram` before its first start;
    - an SSL listener (ssl_port, ssl_bootstrap) that requires a client
      certificate signed by ca: mutual TLS, the principal User:CN of the
      certificate (ssl.principal.mapping.rules);
    - server_cert (a tls.Certificate for 127.0.0.1) in a PKCS#12 keystore,
      ca's certificate in a PKCS#12 truststore made with keytool, both made
      at configure time from the files tls.py wrote.

    Brokers talk to each other as ADMIN over SASL_SSL; the controller
    listener stays PLAINTEXT on loopback (User:ANONYMOUS, a super user, as in
    SaslKafkaBroker), which an SSL client with a certificate never is.
    """

    LISTENER = "SASL_SSL"
    MECHANISM = "SCRAM-SHA-512"
    STORE_PASSWORD = "harness-store"

    def __init__(self, base_dir, users, ca, server_cert, name="kafka-tls", ssl_port=None,
                 version=SCRAM_KAFKA_VERSION, client_certs=None, **kw):
        super().__init__(base_dir, users, name=name, version=version, **kw)
        # {principal name: tls.Certificate} of the SSL listener's clients
        self.client_certs = dict(client_certs or {})
        for u, pw in self.users.items():
            if any(c in u + pw for c in ",[]=\"\\ "):
                raise ValueError("SCRAM user names and passwords here hold no , [ ] = quote "
                                 "backslash or blank")
        self.ca = ca
        self.server_cert = server_cert
        self.ssl_port = ssl_port or procs.free_port()
        self._stores = None

    @property
    def ssl_bootstrap(self):
        """bootstrap.servers of the SSL (mutual TLS) listener."""
        return "127.0.0.1:%d" % self.ssl_port

    def client_config(self, user=None):
        """librdkafka settings to log in as user (default: the super user): on
        SASL_SSL, or on SSL for a principal of client_certs."""
        user = user or self.ADMIN
        if user in self.client_certs:
            return self.ssl_client_config(self.client_certs[user])
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanisms": self.MECHANISM, "sasl.username": user,
                "sasl.password": self.users[user], "ssl.ca.location": self.ca.cert}

    def ssl_client_config(self, client_cert):
        """librdkafka settings for the SSL listener with client_cert (a tls.Certificate)."""
        return {"bootstrap.servers": self.ssl_bootstrap, "security.protocol": "SSL",
                "ssl.ca.location": self.ca.cert, "ssl.certificate.location": client_cert.cert,
                "ssl.key.location": client_cert.key}

    def admin_java_properties(self):
        keystore, truststore = self._keystores()
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_SSL",
                "sasl.mechanism": self.MECHANISM,
                "sasl.jaas.config": "%s required username=%s password=%s;" % (
                    _SCRAM_MODULE, _jaas_quote(self.ADMIN), _jaas_quote(self.users[self.ADMIN])),
                "ssl.truststore.type": "PKCS12", "ssl.truststore.location": truststore,
                "ssl.truststore.password": self.STORE_PASSWORD}

    def _keystores(self):
        if self._stores is None:
            self._stores = (self.server_cert.pkcs12(self.STORE_PASSWORD),
                            self.ca.truststore(self.STORE_PASSWORD))
        return self._stores

    def _format_args(self):
        out = []
        for u, pw in sorted(self.users.items()):
            out += ["--add-scram", "%s=[name=%s,password=%s]" % (self.MECHANISM, u, pw)]
        return out

    def _properties(self):
        props = super()._properties()
        keystore, truststore = self._keystores()
        jaas = "%s required username=%s password=%s;" % (
            _SCRAM_MODULE, _jaas_quote(self.ADMIN), _jaas_quote(self.users[self.ADMIN]))
        for k in [k for k in props if k.endswith(".plain.sasl.jaas.config")]:
            del props[k]
        props.update({
            "listeners": "SASL_SSL://127.0.0.1:%d,SSL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d"
                         % (self.port, self.ssl_port, self.controller_port),
            "advertised.listeners": "SASL_SSL://127.0.0.1:%d,SSL://127.0.0.1:%d"
                                    % (self.port, self.ssl_port),
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "SASL_SSL",
            "sasl.enabled.mechanisms": self.MECHANISM,
            "sasl.mechanism.inter.broker.protocol": self.MECHANISM,
            "listener.name.sasl_ssl.%s.sasl.jaas.config" % self.MECHANISM.lower(): jaas,
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": keystore,
            "ssl.keystore.password": self.STORE_PASSWORD,
            "ssl.key.password": self.STORE_PASSWORD,
            "ssl.truststore.type": "PKCS12",
            "ssl.truststore.location": truststore,
            "ssl.truststore.password": self.STORE_PASSWORD,
            "listener.name.ssl.ssl.client.auth": "required",
            # User:CN of the client certificate, not its whole distinguished name
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+)$/$1/,DEFAULT",
        })
        return props
