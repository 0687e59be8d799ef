# SPDX-License-Identifier: Apache-2.0
"""Reading the documentation the tests check as written: the scdoc(5)
sources of the man pages in src/man/ (outbox-relay.1.scd, outbox-relay.7.scd).

section(page, title) is the source text under "# TITLE" (a top-level
section, up to the next one); unescape(text) undoes scdoc's backslash
escapes (\\*, \\_, \\\\), which the sources need for text like
outbox_relay_* and a code block's backslashes.
"""

import os
import re

MAN = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                   "src", "man")


def source(page):
    """The scdoc source of page ("outbox-relay.7")."""
    with open(os.path.join(MAN, page + ".scd"), encoding="utf-8") as f:
        return f.read()


def section(page, title):
    text = source(page)
    m = re.search(r"^# %s\n(.*?)(?=^# |\Z)" % re.escape(title), text, re.S | re.M)
    assert m, "%s.scd has no section \"# %s\"" % (page, title)
    return m.group(1)


def unescape(text):
    return re.sub(r"\\(.)", r"\1", text)
