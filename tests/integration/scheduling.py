# SPDX-License-Identifier: Apache-2.0
"""How the integration suite's tests are handed to parallel workers
(pytest-xdist), longest first.

Most of the suite's time is waiting (brokers starting and stopping, timeouts,
polls), so several workers overlap well on two cores; what decides the wall
time is then the tail: a 90 s test handed out last keeps one worker busy
after the others are done. xdist's own `load` scheduling hands tests out in
collection order in chunks. This scheduler instead:

- orders the tests by their duration in a recent run (durations.json, from
  `python3 -m harness durations JUNIT.xml`), longest first; a test that is
  not listed (a new one) counts as UNKNOWN_S seconds;
- keeps a group together: tests marked `pytest.mark.xdist_group(NAME)` (their
  node ids end in `@NAME` under `--dist loadgroup`) go to one worker one after
  the other, so a module-scoped server they share starts once;
- gives each worker one group at a time, the next one as soon as it has
  fewer than two tests waiting (a worker runs a test only once it knows the
  next one, or knows there is none).

The order changes only how long the suite takes, never what it tests: every
test still runs once, with the same fixtures. durations.json may go stale;
refresh it after adding slow tests.
"""

import json
import os

from xdist.scheduler import LoadScheduling

DURATIONS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")
UNKNOWN_S = 8.0


def load_durations(path=DURATIONS):
    """{test name: seconds} from path; {} when it is missing or unreadable.
    Names are node ids relative to tests/integration (`file.py::test[param]`)."""
    try:
        with open(path) as f:
            data = json.load(f)
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, AttributeError):
        return {}


def short_name(nodeid):
    """A node id without its directory and without the `@group` suffix."""
    nodeid = nodeid.split("@", 1)[0]
    path, sep, rest = nodeid.partition("::")
    return os.path.basename(path) + sep + rest


def group_of(nodeid):
    return "@" + nodeid.split("@", 1)[1] if "@" in nodeid else nodeid


class LongestFirstScheduling(LoadScheduling):
    """LoadScheduling whose pending list is ordered by expected duration and
    handed out a group at a time (see the module's comment)."""

    def __init__(self, config, log=None):
        super().__init__(config, log)
        self.durations = load_durations()

    def _expected(self, index):
        return self.durations.get(short_name(self.collection[index]), UNKNOWN_S)

    def schedule(self):
        assert self.collection_is_completed
        if self.collection is not None:
            for node in self.nodes:
                self.check_schedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        self.collection = list(self.node2collection.values())[0]
        groups = {}
        for i, nodeid in enumerate(self.collection):
            groups.setdefault(group_of(nodeid), []).append(i)
        ordered = sorted(groups.values(), key=lambda idx: (-sum(self._expected(i) for i in idx), idx[0]))
        self.pending[:] = [i for idx in ordered for i in idx]
        if not self.pending:
            return
        # round robin, a group each, so the longest groups start at once on
        # different workers
        while self.pending and any(len(self.node2pending[n]) < 2 for n in self.nodes):
            for node in self.nodes:
                if self.pending and len(self.node2pending[node]) < 2:
                    self._send_group(node)
        for node in self.nodes:
            self.check_schedule(node)

    def _send_group(self, node):
        key = group_of(self.collection[self.pending[0]])
        batch = [i for i in self.pending if group_of(self.collection[i]) == key]
        self.pending[:] = [i for i in self.pending if i not in batch]
        self.node2pending[node].extend(batch)
        node.send_runtest_some(batch)

    def check_schedule(self, node, duration=0):
        if node.shutting_down:
            return
        while self.pending and len(self.node2pending[node]) < 2:
            self._send_group(node)
        if not self.pending:
            node.shutdown()
        self.log("num items waiting for node:", len(self.pending))
