# SPDX-License-Identifier: Apache-2.0
"""The test harness's own Kafka helpers."""

from harness.kafka import random_cluster_id


def test_cluster_id_never_starts_with_a_dash():
    """CI once failed formatting a broker: the cluster id began with "-" and
    kafka-storage took it for an option. 20,000 draws hold about 312 such
    ids when nothing prevents them."""
    ids = [random_cluster_id() for _ in range(20000)]
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 22 for i in ids)
