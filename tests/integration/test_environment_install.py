# SPDX-License-Identifier: Apache-2.0
"""`meson install` into a DESTDIR, from the build the tests run: it installs
the binary, the systemd unit where systemd looks under the prefix, and the
man pages; `man -l` renders each page without a warning; systemd reads the
installed unit (systemd-analyze verify, which also opens the man pages its
Documentation= names); and the unit's Type= matches what the binary can do:
Type=notify with a watchdog only when it links libsystemd. README's systemd
setup writes the files the unit reads.
"""

import os
import re
import subprocess

import harness

PREFIX = "/usr/local"     # meson's default, as README's commands install
PAGES = ["man1/outbox-relay.1", "man7/outbox-relay.7"]


def unit_settings(text):
    return dict(m.groups() for m in re.finditer(r"^(\w+)=(.*)$", text, re.M))


def install(destdir):
    build = os.path.dirname(os.path.dirname(harness.relay_bin()))
    cp = subprocess.run(["meson", "install", "-C", build, "--destdir", str(destdir), "--no-rebuild"],
                        capture_output=True, text=True)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    cp = subprocess.run(["meson", "introspect", "--buildoptions", build], capture_output=True,
                        text=True, check=True)
    prefix = re.search(r'"name": "prefix", "value": "([^"]*)"', cp.stdout).group(1)
    assert prefix == PREFIX, "the build under test was set up with --prefix=%s" % prefix
    return str(destdir) + PREFIX


def test_meson_install_puts_binary_unit_and_man_pages_in_place(tmp_path):
    root = install(tmp_path / "dest")
    binary = os.path.join(root, "bin", "outbox-relay")
    unit = os.path.join(root, "lib", "systemd", "system", "outbox-relay.service")
    man = os.path.join(root, "share", "man")
    assert os.access(binary, os.X_OK), binary
    assert open(binary, "rb").read() == open(harness.relay_bin(), "rb").read()

    for page in PAGES:
        path = os.path.join(man, page)
        assert os.path.exists(path), "meson install did not install %s" % page
        cp = subprocess.run(["man", "--warnings", "-l", path], capture_output=True, text=True,
                            env=dict(os.environ, MANWIDTH="80", MAN_DISABLE_SECCOMP="1"))
        assert cp.returncode == 0 and not cp.stderr.strip(), "man -l %s:\n%s" % (page, cp.stderr)
        # No line ends in a word broken by hyphenation or after a hyphen: a name or an
        # option copied from the page ("de-" "bezium", "--exactly-" "once") would be wrong.
        broken = [line for line in cp.stdout.splitlines() if re.search(r"[A-Za-z][-\u2010]$", line)]
        assert not broken, "man -l %s breaks words at line ends:\n%s" % (page, "\n".join(broken[:10]))
        name = re.sub(r"\.(\d)$", r"(\1)", os.path.basename(page))
        assert cp.stdout.lstrip().startswith(name), cp.stdout[:200]
        assert len(cp.stdout.splitlines()) > 100, cp.stdout

    text = open(unit).read()
    settings = unit_settings(text)
    assert settings["ExecStart"] == PREFIX + "/bin/outbox-relay", settings["ExecStart"]
    links = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    if "libsystemd.so" in links:
        assert settings["Type"] == "notify" and "WatchdogSec" in settings, settings
    else:
        assert settings["Type"] == "exec" and "WatchdogSec" not in settings, settings

    # systemd reads it as installed: ExecStart= must exist, Documentation= must open
    check = tmp_path / "outbox-relay.service"
    check.write_text(text.replace("ExecStart=" + PREFIX, "ExecStart=" + root))
    cp = subprocess.run(["systemd-analyze", "verify", str(check)], capture_output=True, text=True,
                        env=dict(os.environ, MANPATH=man))
    assert cp.returncode == 0 and not (cp.stdout + cp.stderr).strip(), cp.stdout + cp.stderr


def test_readme_systemd_setup_matches_the_unit(tmp_path):
    """README's "Under systemd" commands, run as written into a scratch root
    (all but systemctl): they write the settings file and the password file
    the unit names, and the relay reads that settings file."""
    text = open(os.path.join(harness.TOP, "README.md")).read()
    section = text[text.index("### Under systemd"):]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    root = str(tmp_path)
    for line in block.splitlines():
        if line.startswith("systemctl "):
            continue
        line = line.replace("/etc/outbox-relay", root + "/etc/outbox-relay")
        cp = subprocess.run(["sh", "-ec", line], capture_output=True, text=True)
        assert cp.returncode == 0, (line, cp.stderr)
    units = open(os.path.join(harness.TOP, "docker", "outbox-relay.service")).read()
    conf = re.search(r"^Environment=OUTBOX_RELAY_CONFIG=(\S+)$", units, re.M).group(1)
    cred = re.search(r"^LoadCredential=pgpass:(\S+)$", units, re.M).group(1)
    assert os.path.exists(root + conf), "README does not write %s" % conf
    assert os.path.exists(root + cred), "README does not write %s" % cred
    assert os.stat(root + cred).st_mode & 0o077 == 0, "libpq refuses a password file others may read"
    rc, out = harness.run_relay(["-c", root + conf, "--version"], timeout=10)
    assert rc == harness.EXIT_OK, out
