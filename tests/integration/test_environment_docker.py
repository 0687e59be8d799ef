# SPDX-License-Identifier: Apache-2.0
"""docker/ as far as it can be checked without a Docker engine: the image's
build stage installs the -dev package of every dependency meson.build asks
for, and its runtime stage the package of every shared library the built
relay links. Both are asked of this Debian machine (dpkg -S on the
pkg-config files and on ldd's libraries), so a dependency added to
meson.build without the Dockerfile fails here, not at `docker build`.
"""

import os
import re
import subprocess

import harness
from harness import docs

DOCKERFILE = os.path.join(harness.TOP, "docker", "Dockerfile")
MESON_BUILD = os.path.join(harness.TOP, "meson.build")


def stages(path):
    """{stage index: set of apt packages installed in that stage}."""
    text = open(path).read().replace("\\\n", " ")
    result, stage = {}, -1
    for line in text.splitlines():
        if re.match(r"^\s*FROM\s", line, re.I):
            stage += 1
            result[stage] = set()
        m = re.search(r"apt-get install ([^&;]*)", line)
        if m and stage >= 0:
            result[stage] |= {w for w in m.group(1).split() if not w.startswith("-")}
    return result


def package_of(path):
    """The Debian package owning path, trying it as given, resolved, and in
    /lib and /usr/lib (merged /usr: dpkg knows one of them)."""
    tries = [path, os.path.realpath(path)]
    for p in list(tries):
        if p.startswith("/usr/lib/"):
            tries.append(p[len("/usr"):])
        elif p.startswith("/lib/"):
            tries.append("/usr" + p)
    for p in tries:
        out = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if out.returncode == 0:
            return out.stdout.split(":", 1)[0].strip()
    raise AssertionError("no package owns %s" % path)


def pkgconfig_file(name):
    out = subprocess.run(["pkg-config", "--variable=pcfiledir", name], capture_output=True,
                         text=True)
    assert out.returncode == 0, "pkg-config does not know %s" % name
    return os.path.join(out.stdout.strip(), name + ".pc")


# meson's own dependencies: they come with the compiler and the C library, not a package
MESON_BUILTIN_DEPS = {"threads"}


def test_build_stage_installs_every_meson_dependency():
    deps = re.findall(r"dependency\('([^']+)'", open(MESON_BUILD).read())
    assert deps, "no dependency() in meson.build"
    deps = [d for d in deps if d not in MESON_BUILTIN_DEPS]
    build = stages(DOCKERFILE)[0]
    missing = {}
    for d in deps:
        pkg = package_of(os.path.realpath(pkgconfig_file(d)))
        if pkg not in build:
            missing[d] = pkg
    assert not missing, "docker/Dockerfile's build stage lacks %s (meson.build needs them)" % missing


def test_runtime_stage_installs_every_linked_library():
    out = subprocess.run(["ldd", harness.relay_bin()], capture_output=True, text=True, check=True)
    runtime = stages(DOCKERFILE)[max(stages(DOCKERFILE))]
    froms = re.findall(r"(?im)^\s*FROM\s+(\S+)", open(DOCKERFILE).read())
    # The packages are named on this machine (Debian 12). Debian 13, the image's,
    # renamed the library packages of the 64-bit time_t transition with a "t64"
    # suffix (libmicrohttpd12 is libmicrohttpd12t64 there), same soname.
    t64 = froms[-1].startswith("debian:13")
    assert "libpq.so" in out.stdout, out.stdout
    missing = {}
    for line in out.stdout.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        # only the libraries the relay links itself; theirs come with them
        if not m or not m.group(1).startswith(("libpq.", "librdkafka.", "libcjson.",
                                               "libmicrohttpd.", "libinih.", "libsystemd.")):
            continue
        pkg = package_of(m.group(2))
        if pkg not in runtime and not (t64 and pkg + "t64" in runtime):
            missing[m.group(1)] = pkg
    assert not missing, "docker/Dockerfile's runtime stage lacks %s" % missing


def test_postgres_image_runs_the_server_kit_first():
    """The compose PostgreSQL prepares itself with sql/server.sql before the
    outbox table (test_sql_kit runs that file on both sides of
    output_plugin_libraries)."""
    text = open(os.path.join(harness.TOP, "docker", "postgres.Dockerfile")).read()
    copies = re.findall(r"COPY sql/(\S+) /docker-entrypoint-initdb.d/(\S+)", text)
    assert ("server.sql", "00-server.sql") in copies, copies
    assert sorted(copies, key=lambda c: c[1])[0][0] == "server.sql", copies
    assert "output_plugin_libraries" not in re.sub(r"(?m)^#.*$", "", text), \
        "the image must not set output_plugin_libraries itself: 15.18 refuses to start with it"


def readme_no_restart_statuses():
    """The exit statuses outbox-relay(1)'s EXIT STATUS table (its scdoc
    source) says a supervisor must not restart on, and those it restarts on:
    each row is "|  N", then its meaning, then what a supervisor should do."""
    table = docs.section("outbox-relay.1", "EXIT STATUS")
    rows = re.findall(r"^\|  (\d)\n:  .*\n:  (.*)$", table, re.M)
    codes = {int(n) for n, should in rows if should.startswith("not restart")}
    restart = {int(n) for n, should in rows if should.startswith("restart")}
    assert len(rows) == 5 and codes and restart, table
    return codes, restart


def test_compose_does_not_restart_on_statuses_readme_forbids():
    """Docker's restart policies cannot tell exit 1 from 2, 3 and 4: on-failure
    (and always, unless-stopped) restart on all of them, against the exit table."""
    text = open(os.path.join(harness.TOP, "docker", "compose.yaml")).read()
    relay = text[text.index("\n  relay:"):]
    policies = re.findall(r"^\s+restart:\s*(\S+)", relay, re.M)
    assert policies == ['"no"'], "docker/compose.yaml's relay restarts (%s); outbox-relay(1)'s exit table " \
        "forbids restarting on %s" % (policies, sorted(readme_no_restart_statuses()[0]))


def test_systemd_unit_follows_the_exit_table(tmp_path):
    no, yes = readme_no_restart_statuses()
    path = os.path.join(harness.TOP, "docker", "outbox-relay.service")
    text = open(path).read()
    settings = dict(m.groups() for m in re.finditer(r"^(\w+)=(.*)$", text, re.M))
    assert settings["Restart"] == "on-failure", settings
    prevented = {int(c) for c in settings["RestartPreventExitStatus"].split()}
    assert prevented == no, "RestartPreventExitStatus=%s, outbox-relay(1): not restart on %s" % (
        sorted(prevented), sorted(no))
    assert not prevented & yes
    # systemd itself reads it (with ExecStart pointing at the built binary)
    unit = tmp_path / "outbox-relay.service"
    unit.write_text(text.replace("/usr/local/bin/outbox-relay", harness.relay_bin()))
    # (the man pages of Documentation= are checked where they are installed: test_environment_install)
    cp = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True,
                        text=True)
    assert cp.returncode == 0 and not cp.stderr.strip() and not cp.stdout.strip(), \
        cp.stdout + cp.stderr
