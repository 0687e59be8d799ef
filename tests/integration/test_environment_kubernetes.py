# SPDX-License-Identifier: Apache-2.0
"""docker/kubernetes/outbox-relay.yaml as far as it can be checked without a
cluster: parsed with PyYAML, its probes checked against the relay's options
(the port the image's entrypoint and the container's arguments give --http;
a startup window longer than --slot-create-timeout), its *_FILE variables
against the Secret volume mounted for them, and then a relay run with the
container's arguments and its secrets read from files as the pod reads
them: the probes' paths answer 200, and its peak memory fits the requests.
"""

import json
import os
import re

import harness
import yaml
from harness.http import http_get, wait_http
from harness.outbox import insert_rows, simple_rows
from harness.relay import RelayProcess, sanitized

MANIFEST = os.path.join(harness.TOP, "docker", "kubernetes", "outbox-relay.yaml")
DOCKERFILE = os.path.join(harness.TOP, "docker", "Dockerfile")


def manifest():
    docs = [d for d in yaml.safe_load_all(open(MANIFEST)) if d]
    kinds = {d["kind"]: d for d in docs}
    assert set(kinds) == {"ConfigMap", "Deployment"}, sorted(kinds)
    return kinds["ConfigMap"], kinds["Deployment"]


def container(deployment):
    (c,) = deployment["spec"]["template"]["spec"]["containers"]
    return c


def entrypoint():
    m = re.search(r"^ENTRYPOINT (\[.*\])$", open(DOCKERFILE).read(), re.M)
    return json.loads(m.group(1))


def relay_argv(c):
    """The relay's command line in the pod: the image's entrypoint (unless the
    container's command replaces it) and the container's arguments."""
    return (c.get("command") or entrypoint()) + c.get("args", [])


def http_port(argv, env):
    """The port --http (or --metrics-address, or OUTBOX_RELAY_HTTP) listens on."""
    value = env.get("OUTBOX_RELAY_HTTP")
    for i, a in enumerate(argv):
        if a in ("--http", "--metrics-address"):
            value = argv[i + 1]
        elif a.startswith(("--http=", "--metrics-address=")):
            value = a.split("=", 1)[1]
    assert value, "the relay in the pod serves no HTTP: %s" % argv
    return int(value.rsplit(":", 1)[1])


def help_default(option):
    rc, out = harness.run_relay(["--help"], timeout=10)
    m = re.search(r"--%s=\S+ .*\(default: ([^)]*)\)" % re.escape(option), out)
    return float(m.group(1))


def mebibytes(q):
    m = re.fullmatch(r"(\d+)(Mi|Gi)", q)
    assert m, "memory quantity %r: write it in Mi or Gi" % q
    return int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)


def test_probes_match_the_relays_options():
    config, deployment = manifest()
    c = container(deployment)
    env = dict(config["data"], **{e["name"]: e.get("value") for e in c.get("env", [])})
    port = http_port(relay_argv(c), env)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert port in ports.values(), "the relay listens on %d, the container declares %s" % (
        port, ports)

    def probe(kind, path):
        p = c[kind]["httpGet"]
        assert p["path"] == path, (kind, p)
        assert ports.get(p["port"], p["port"]) == port, (kind, p, ports)
        return c[kind]

    probe("livenessProbe", "/healthz")
    probe("readinessProbe", "/readyz")
    startup = probe("startupProbe", "/healthz")
    # No endpoint answers while --create-slot waits for the server's transactions.
    window = startup["periodSeconds"] * startup["failureThreshold"]
    assert window > help_default("slot-create-timeout") + 10, window

    spec = deployment["spec"]
    assert spec["replicas"] in (1, 2), "one relay, and at most one warm standby"
    assert spec["strategy"]["type"] == "Recreate", "a rolling update's new pod stays a standby"


def test_secrets_are_files_of_the_mounted_secret():
    _, deployment = manifest()
    pod = deployment["spec"]["template"]["spec"]
    c = container(deployment)
    secret_volumes = {v["name"] for v in pod["volumes"] if "secret" in v}
    mounts = [m for m in c["volumeMounts"] if m["name"] in secret_volumes]
    assert mounts and all(m.get("readOnly") for m in mounts), c["volumeMounts"]
    files = {e["name"]: e["value"] for e in c["env"] if e["name"].endswith("_FILE")}
    assert "OUTBOX_RELAY_DBNAME_FILE" in files, files
    for name, path in files.items():
        assert name.startswith("OUTBOX_RELAY_"), name
        assert any(path.startswith(m["mountPath"] + "/") for m in mounts), (name, path, mounts)
    plain = {e["name"] for e in c["env"] if "value" in e} | set(manifest()[0]["data"])
    assert not {n for n in plain if re.search(r"PASSWORD|SECRET", n) and not n.endswith("_FILE")}, \
        "a secret as a plain variable: %s" % sorted(plain)


def test_the_pods_relay_answers_its_probes_within_its_memory(case, tmp_path):
    """The container's arguments, the dbname from a file as the Secret gives
    it; the test's database, broker and a free port stand in for the pod's."""
    _, deployment = manifest()
    c = container(deployment)
    argv = relay_argv(c)[1:]
    port = harness.free_port()
    for i, a in enumerate(argv):
        if a == "--http":
            argv[i + 1] = "127.0.0.1:%d" % port
    secret = tmp_path / "dbname"
    secret.write_text(case.dsn + "\n")
    secret.chmod(0o440)
    args = case.relay_args(*argv)
    del args[args.index("-d"):args.index("-d") + 2]
    env = dict(os.environ, OUTBOX_RELAY_DBNAME_FILE=str(secret))
    relay = RelayProcess(args, str(tmp_path / "relay.log"), env=env)
    case.relays.append(relay)
    relay.start()
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        wait_http(port, c[kind]["httpGet"]["path"], 200, 30)

    with case.connect(autocommit=False) as conn:
        for batch in range(10):
            insert_rows(conn, simple_rows("k8s-%d" % batch, 500))
    reader = case.reader()
    assert reader.read_until(lambda recs: len(recs) >= 5000, 60), case.logs()
    assert http_get(port, "/readyz")[0] == 200
    peak_mib = relay.peak_rss_kb() / 1024.0
    resources = c["resources"]
    request, limit = (mebibytes(resources[k]["memory"]) for k in ("requests", "limits"))
    case.metric("k8s_relay_peak_rss", "%.1f" % peak_mib, "MiB")
    if sanitized(relay.binary):
        # ASan's shadow memory and quarantine are not the relay's: the
        # manifest's figures are for the release build
        return
    assert request >= peak_mib and limit >= 2 * peak_mib, (
        "peak %.1f MiB resident against requests %d Mi, limits %d Mi" % (peak_mib, request, limit))
