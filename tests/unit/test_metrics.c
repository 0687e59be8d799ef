// SPDX-License-Identifier: Apache-2.0
/*
 * Unit tests of the metrics module's pure parts: bounded label families,
 * the latency histogram, the Prometheus text and the /readyz decision.
 */
#include <errno.h>
#include <stdlib.h>

#include "unit_check.h"
#include "metrics.h"

/* Past the cap, new labels fold into "_other"; known ones keep counting. */
static void test_labels_bounded(void)
{
        struct metrics_labels *f = metrics_labels_new(2);
        char long_label[METRICS_LABEL_MAX + 2];

        CHECK(metrics_labels_new(0) == NULL);
        CHECK(metrics_labels_new(METRICS_LABELS_CAP_MAX + 1) == NULL);
        metrics_labels_add(f, "a", 1);
        metrics_labels_add(f, "b", 2);
        metrics_labels_add(f, "c", 3);
        metrics_labels_add(f, "a", 10);
        metrics_labels_add(f, "d", 4);
        metrics_labels_add(f, "_other", 5);    /* a topic named like the fold label is folded */
        CHECK_INT(metrics_labels_get(f, "a"), 11);
        CHECK_INT(metrics_labels_get(f, "b"), 2);
        CHECK_INT(metrics_labels_get(f, "c"), 0);
        CHECK_INT(metrics_labels_get(f, METRICS_OTHER), 12);
        CHECK_INT(metrics_labels_total(f), 25);
        metrics_labels_free(f);

        f = metrics_labels_new(8);
        memset(long_label, 'x', sizeof(long_label) - 1);
        long_label[sizeof(long_label) - 1] = '\0';
        metrics_labels_add(f, long_label, 1);
        CHECK_INT(metrics_labels_get(f, METRICS_OTHER), 1);
        metrics_labels_free(f);
}

static void test_histogram(void)
{
        struct metrics_histogram h = {0};

        metrics_histogram_observe(&h, 0.001);
        metrics_histogram_observe(&h, -3);       /* clock skew: counts as 0 */
        metrics_histogram_observe(&h, 0.02);
        metrics_histogram_observe(&h, 1000);     /* +Inf only */
        CHECK_INT(h.buckets[0], 2);
        CHECK_INT(h.buckets[2], 1);
        CHECK_INT(h.count, 4);
        CHECK(h.sum > 1000.02 && h.sum < 1000.022);
}

static void test_format(void)
{
        struct metrics_labels *topics = metrics_labels_new(1), *errors = metrics_labels_new(4);
        struct metrics_histogram h = {0};
        struct metrics_snapshot s = {
                .flush_lsn = 100, .server_lsn = 164, .since_confirm_ms = 2500,
                .since_progress_ms = 0, .brokers_up = 1, .streaming = true, .state = "streaming",
                .published_by_topic = topics, .errors_by_code = errors, .latency = &h,
        };
        char buf[32768], small[64];
        int n;

        metrics_labels_add(topics, "orders.created", 7);
        metrics_labels_add(topics, "odd\"topic\\\n", 2);
        metrics_labels_add(errors, "MSG_SIZE_TOO_LARGE", 1);
        metrics_histogram_observe(&h, 0.02);
        metrics_histogram_observe(&h, 0.2);
        n = metrics_format(&s, "s1", buf, sizeof(buf));
        CHECK(n > 0);
        CHECK(strstr(buf, "outbox_relay_slot_lag_bytes{slot=\"s1\"} 64\n") != NULL);
        CHECK(strstr(buf, "outbox_relay_server_wal_end_lsn{slot=\"s1\"} 164\n") != NULL);
        CHECK(strstr(buf, "outbox_relay_seconds_since_last_confirm{slot=\"s1\"} 2.500\n") != NULL);
        CHECK(strstr(buf, "outbox_relay_ready{slot=\"s1\"} 1\n") != NULL);
        CHECK(strstr(buf, "outbox_relay_rows_published_total{slot=\"s1\",topic=\"orders.created\"} 7\n"));
        CHECK(strstr(buf, "outbox_relay_rows_published_total{slot=\"s1\",topic=\"_other\"} 2\n"));
        CHECK(strstr(buf, "outbox_relay_delivery_errors_total{slot=\"s1\",code=\"MSG_SIZE_TOO_LARGE\"} 1\n"));
        /* Buckets are cumulative and end in +Inf = count. */
        CHECK(strstr(buf, "outbox_relay_commit_to_ack_seconds_bucket{slot=\"s1\",le=\"0.01\"} 0\n"));
        CHECK(strstr(buf, "outbox_relay_commit_to_ack_seconds_bucket{slot=\"s1\",le=\"0.025\"} 1\n"));
        CHECK(strstr(buf, "outbox_relay_commit_to_ack_seconds_bucket{slot=\"s1\",le=\"0.25\"} 2\n"));
        CHECK(strstr(buf, "outbox_relay_commit_to_ack_seconds_bucket{slot=\"s1\",le=\"+Inf\"} 2\n"));
        CHECK(strstr(buf, "outbox_relay_commit_to_ack_seconds_count{slot=\"s1\"} 2\n"));
        CHECK(strstr(buf, "outbox_relay_role{slot=\"s1\",role=\"active\"} 1\n"));
        CHECK(strstr(buf, "outbox_relay_role{slot=\"s1\",role=\"standby\"} 0\n"));
        CHECK_INT(metrics_format(&s, "s1", small, sizeof(small)), -ENOSPC);
        /* A warm standby says so, so that alerts on readiness can leave it alone. */
        s.standby = true;
        s.c.standby_checks = 5;
        CHECK(metrics_format(&s, "s1", buf, sizeof(buf)) > 0);
        CHECK(strstr(buf, "outbox_relay_role{slot=\"s1\",role=\"active\"} 0\n"));
        CHECK(strstr(buf, "outbox_relay_role{slot=\"s1\",role=\"standby\"} 1\n"));
        CHECK(strstr(buf, "outbox_relay_standby_checks_total{slot=\"s1\"} 5\n"));
        CHECK(strstr(buf, "outbox_relay_reconnects_total{slot=\"s1\"} 0\n"));
        s.standby = false;

        /* Label values are escaped as the exposition format requires. */
        metrics_labels_free(topics);
        topics = metrics_labels_new(4);
        metrics_labels_add(topics, "odd\"topic\\\n", 2);
        s.published_by_topic = topics;
        CHECK(metrics_format(&s, "s1", buf, sizeof(buf)) > 0);
        CHECK(strstr(buf, "topic=\"odd\\\"topic\\\\\\n\"} 2\n") != NULL);
        metrics_labels_free(topics);
        metrics_labels_free(errors);
}

static void test_ready(void)
{
        struct metrics_snapshot s = {.streaming = true, .state = "streaming", .brokers_up = -1,
                                     .since_progress_ms = 5000, .ready_timeout_ms = 60000};
        char why[256];

        /* The broker state is not known yet: not ready until it is. */
        CHECK(!metrics_ready(&s, why, sizeof(why)));
        CHECK(strstr(why, "not known") != NULL);
        s.brokers_up = 1;
        CHECK(metrics_ready(&s, why, sizeof(why)));
        s.brokers_up = 0;
        CHECK(!metrics_ready(&s, why, sizeof(why)));
        CHECK(strstr(why, "no Kafka broker") != NULL);
        s.brokers_up = 2;
        s.since_progress_ms = 61000;
        s.outstanding = 3;
        CHECK(!metrics_ready(&s, why, sizeof(why)));
        CHECK(strstr(why, "stuck") != NULL && strstr(why, "3 messages") != NULL);
        s.ready_timeout_ms = 0;          /* progress check off */
        CHECK(metrics_ready(&s, why, sizeof(why)));
        s.streaming = false;
        s.state = "standby: the slot is held by another process";
        CHECK(!metrics_ready(&s, why, sizeof(why)));
        CHECK(strstr(why, "standby") != NULL);
}

int main(void)
{
        test_labels_bounded();
        test_histogram();
        test_format();
        test_ready();
        return check_summary();
}
