/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `outbox-relay check`: every preflight item of the relay, run one by one
 * against the database and the Kafka cluster of a configuration, each with a
 * verdict (PASS, WARN, FAIL, SKIP) and, when it is not PASS, the reason and
 * the fix. Every probe has a timeout (PREFLIGHT_PROBE_TIMEOUT_MS): libpq's
 * connect_timeout and statement_timeout, a cancelled slot creation, Kafka
 * request timeouts. Joins preflight (the SQL of each item), pgstream (the
 * temporary-slot probe of the output plugin), publication, producer (metadata, DescribeConfigs)
 * and record (the topic template); changes nothing but a temporary slot that
 * vanishes with its connection. Writes only in check_print().
 */
#ifndef RELAY_CHECK_H
#define RELAY_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "config.h"

enum check_status {
        CHECK_PASS,  /* fine */
        CHECK_WARN,  /* safe to start, but worth an operator's attention */
        CHECK_FAIL,  /* the relay would stop or misbehave: not safe to start */
        CHECK_SKIP,  /* could not run because an earlier item failed */
};

/* Longest text of one item, in bytes with the terminator; longer texts are truncated. */
#define CHECK_TEXT_MAX 2048

struct check_item {
        enum check_status status;
        char name[320];             /* e.g. "wal_level", "table \"public\".\"outbox\"" */
        char text[CHECK_TEXT_MAX];  /* the finding, and for WARN/FAIL the fix */
};

struct check_report {
        struct check_item *items;   /* in the order they ran */
        size_t nitems;
        size_t cap;
        size_t counts[4];           /* per enum check_status */
};

/*
 * check_run() - run every item for @conf and fill @ret_report (owned by the
 * caller, check_report_free(); zeroed first). Failed checks are items, not
 * errors. Returns 0; -EINVAL with the reason in @err for a --topic template
 * that does not compile (a usage error); -ENOMEM.
 */
int check_run(const struct relay_config *conf, struct check_report *ret_report, char *err,
              size_t errlen);

/* check_safe() - true when no item failed: the relay may be started. */
bool check_safe(const struct check_report *report);

/*
 * check_print() - one line per item to @out, "PASS  wal_level: logical",
 * then a summary line saying whether it is safe to start.
 */
void check_print(const struct check_report *report, FILE *out);

/* check_report_free() - free the items; @report may be zeroed. */
void check_report_free(struct check_report *report);

#endif
