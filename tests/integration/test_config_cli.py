# SPDX-License-Identifier: Apache-2.0
"""The command line: --help exits 0 and lists the options outbox-relay(1)
lists (its OPTIONS are made from the same table); a usage error (an unknown option, a bad value, a -X property
the relay or librdkafka refuses) ends the relay by itself with exit 2 and
exactly one error line that names what is wrong, before it connects
anywhere.
"""

import os
import re
import subprocess
import time

import harness
import pytest
from harness import EXIT_OK, EXIT_USAGE, run_relay, the_error

NOWHERE = ["-d", "host=127.0.0.1 port=1 connect_timeout=2"]


USAGE_CASES = [
    (["-X", "linger.ms"], ['"linger.ms"', "NAME=VALUE"]),
    (["-X", "=5"], ['"=5"', "NAME=VALUE"]),
    (["-X", "enable.idempotence=false"], ["enable.idempotence=false", "refused"]),
    (["-X", "enable.idempotence=0"], ["enable.idempotence=0", "refused"]),
    (["-X", "acks=1"], ["acks=1", "refused", "acks=all"]),
    (["-X", "acks=0"], ["acks=0", "refused"]),
    (["-X", "request.required.acks=1"], ["request.required.acks=1", "refused"]),
    (["-X", "delivery.report.only.error=true"], ["delivery.report.only.error", "refused"]),
    # a Java producer's setting: every produce would fail with "Erroneous state" and the
    # relay would reconnect forever
    (["-X", "transactional.id=orders-tx"], ["transactional.id=orders-tx refused", "remove it"]),
    (["-S", "Outbox"], ['"Outbox"', "slot"]),
    (["-S", "out-box"], ['"out-box"', "slot"]),
    (["-S", "s" * 64], ["s" * 64, "slot", "63"]),
    (["--on-error=ignore"], ["--on-error", '"ignore"', "stop", "dead-letter"]),
    (["--null-payload=drop"], ["--null-payload", '"drop"', "tombstone"]),
    (["--skip-transaction=last"], ["--skip-transaction", '"last"', "LSN"]),
    (["--dead-letter-transaction=1/2/3"], ["--dead-letter-transaction", "LSN"]),
    (["--skip-transaction=0/1A", "--dead-letter-transaction=0/1A"], ["choose one remedy"]),
    (["--message-prefix=outbox", "--ignore-message-prefix=outbox"],
     ["--message-prefix and --ignore-message-prefix", '"outbox"', "choose one"]),
    (["--ignore-message-prefix=a,b"], ["--ignore-message-prefix", '"a,b"']),
    (["--dead-letter-topic=dead letters"], ["--dead-letter-topic", '"dead letters"']),
    (["--topic", "outbox.${kind"], ["--topic", "outbox.${kind"]),
    (["-t", "public.a.b"], ['"public.a.b"', "table"]),
    (["--max-inflight-messages=0"], ["--max-inflight-messages", '"0"']),
    (["--create-slot=yes"], ["--create-slot"]),
]


@pytest.mark.parametrize("argv,words", USAGE_CASES,
                         ids=[" ".join(a)[:40] for a, _ in USAGE_CASES])
def test_usage_error_is_one_line_and_exit_2(argv, words):
    """Refused before connecting anywhere (the database here does not exist)."""
    started = time.monotonic()
    rc, out = run_relay(NOWHERE + argv, timeout=15)
    assert rc == EXIT_USAGE, "argv %r: exit %s\n%s" % (argv, rc, out)
    line = the_error(out)
    assert out.strip().count("\n") == 0, "more than one line of output:\n" + out
    for w in words:
        assert w in line, "%r not in: %s" % (w, line)
    assert time.monotonic() - started < 5, "a usage error should not wait for anything"


@pytest.mark.parametrize("prop,words", [
    ("no.such.property=1", ["no.such.property"]),
    ("max.in.flight.requests.per.connection=10", ["max.in.flight"]),
    ("compression.codec=zip", ["compression.codec", "zip"]),
], ids=["unknown-property", "idempotence-conflict", "bad-value"])
def test_kafka_property_librdkafka_refuses_exit_2(case, prop, words):
    """librdkafka itself refuses the -X (unknown name, bad value, or a
    setting the idempotent producer cannot have): a usage error, not a
    failure worth retrying."""
    rc, out = run_relay(case.relay_args("-X", prop), timeout=30)
    assert rc == EXIT_USAGE, "exit %s\n%s" % (rc, out)
    line = the_error(out)
    for w in words:
        assert w in line, "%r not in: %s" % (w, line)


def test_metrics_address_malformed_exit_2(case):
    rc, out = run_relay(case.relay_args("--metrics-address", "localhost-9187"), timeout=30)
    assert rc == EXIT_USAGE, "exit %s\n%s" % (rc, out)
    assert "localhost-9187" in the_error(out), out


@pytest.mark.smoke
def test_help_exits_0():
    rc, out = run_relay(["--help"], timeout=10)
    assert rc == EXIT_OK, out
    assert "--create-slot" in out, "help does not list --create-slot:\n" + out


@pytest.mark.parametrize("argv", [
    ["--no-such-option"],
    ["-d", "host=127.0.0.1", "--no-such-option"],
    ["-d", "host=127.0.0.1", "-s", "not-a-number"],
    ["-d", "host=127.0.0.1", "extra-positional-argument"],
], ids=["unknown-option", "unknown-option-after-d", "bad-status-interval", "positional"])
def test_usage_errors_exit_2(argv):
    rc, out = run_relay(argv, timeout=10)
    assert rc == EXIT_USAGE, "argv %r: exit %s\n%s" % (argv, rc, out)


# An option line of --help: "  -c, --config=FILE    text", "      --create-slot    text";
# a long argument runs into the text with one space.
HELP_OPTION = re.compile(r"^  (?:(-\S), |    )(--[a-z][a-z0-9-]*)(?:=(\S+))?(?: +(.*))?$")


def help_options():
    """{long option: (short option, argument, default)} of --help's Options
    section; None where there is none. The default is the last "(default: X)"
    of the option's text."""
    rc, out = run_relay(["--help"], timeout=10)
    assert rc == EXIT_OK, out
    assert "\nOptions:\n" in out, "no Options section in --help:\n" + out
    opts = {}
    for line in out.split("\nOptions:\n", 1)[1].split("\n\n", 1)[0].splitlines():
        m = HELP_OPTION.match(line)
        assert m, "not an option line of --help: %r" % line
        short, name, arg, text = m.groups()
        defaults = re.findall(r"\(default: ([^)]*)\)", text or "")
        assert name not in opts, "--help lists %s twice" % name
        opts[name] = (short, arg, defaults[-1] if defaults else None)
    return opts


def man_page(name):
    """The page meson built from src/man/ (beside the binary under test), as
    groff renders it for a terminal: plain text, wide lines, no hyphenation."""
    path = os.path.join(os.path.dirname(harness.relay_bin()), "man", name)
    assert os.path.exists(path), "%s was not built: meson builds the man pages with scdoc " \
        "(tests/install-deps.sh installs it)" % path
    cp = subprocess.run(["groff", "-t", "-man", "-Tutf8", "-rHY=0", "-rLL=250n", "-P-cbou", path],
                        capture_output=True, text=True)
    assert cp.returncode == 0 and not cp.stderr.strip(), cp.stderr
    return cp.stdout


# An option heading of outbox-relay(1)'s OPTIONS: "-c, --config=FILE", "--create-slot".
MAN_OPTION = re.compile(r"^ {7}(?:(-\S), )?(--[a-z][a-z0-9-]*)(?:=(\S+))?$")


def man_options():
    """{long option: (short option, argument, default, description)} of
    outbox-relay(1)'s OPTIONS section."""
    text = man_page("outbox-relay.1")
    m = re.search(r"^OPTIONS\n(.*?)^PRESETS\n", text, re.S | re.M)
    assert m, "outbox-relay(1) has no OPTIONS section followed by PRESETS"
    opts, current = {}, None
    for line in m.group(1).splitlines():
        o = MAN_OPTION.match(line)
        if o:
            short, name, arg = o.groups()
            assert name not in opts, "outbox-relay(1) lists %s twice" % name
            current = opts[name] = [short, arg, None, ""]
        elif current and line.startswith(" " * 11):
            current[3] += " " + line.strip()
    for v in opts.values():
        v[3] = v[3].strip()
        d = re.search(r"Default: (\S+)\.(?=\s|$)", v[3])
        inline = re.findall(r"\(default: ([^)]*)\)", v[3])  # a default the help text names
        v[2] = d.group(1) if d else inline[-1] if inline else None
    return {k: tuple(v) for k, v in opts.items()}


def test_man_page_options_match_help():
    """outbox-relay(1)'s OPTIONS are made from the option table --help prints:
    the same options, short options, arguments and defaults, each with its
    --help text, and its environment variable unless it is command line only."""
    helped = help_options()
    documented = man_options()
    rc, out = run_relay(["--help"], timeout=10)
    texts = {}
    for line in out.split("\nOptions:\n", 1)[1].split("\n\n", 1)[0].splitlines():
        _, name, _, text = HELP_OPTION.match(line).groups()
        text = re.sub(r"; reloaded on SIGHUP$", "", text or "")
        # the default --help appends is the man page's "Default: X."
        mdef = documented.get(name, (None,) * 4)[2]
        texts[name] = text[:-len(" (default: %s)" % mdef)] \
            if mdef and text.endswith(" (default: %s)" % mdef) and \
            "Default: %s." % mdef in documented[name][3] else text
    problems = []
    assert len(helped) >= 40, sorted(helped)
    for name in sorted(set(helped) ^ set(documented)):
        problems.append("%s is in %s only" % (name, "--help" if name in helped else "the man page"))
    for name in sorted(set(helped) & set(documented)):
        (hshort, harg, hdef), (mshort, marg, mdef, desc) = helped[name], documented[name]
        if (hshort, harg, hdef) != (mshort, marg, mdef):
            problems.append("%s: --help says %s, the man page %s" % (
                name, (hshort, harg, hdef), (mshort, marg, mdef)))
        if texts[name] not in desc:
            problems.append("%s: --help's text %r is not in the man page's %r" % (
                name, texts[name], desc))
        env = "OUTBOX_RELAY_" + name[2:].upper().replace("-", "_")
        if "Command line only." not in desc and name != "--kafka-property" and env not in desc:
            problems.append("%s: the man page does not name %s" % (name, env))
    assert not problems, "outbox-relay(1) and --help disagree:\n  " + "\n  ".join(problems)
