// SPDX-License-Identifier: Apache-2.0
/*
 * The two delivery guarantees behind relay_guarantee.h. At-least-once keeps
 * nothing beyond the ledger, which the row path keeps for both: each of its
 * hooks lets the row go. Exactly-once is relay_eos.c's.
 */
#include "relay_guarantee.h"
#include "relay_parts.h"

/* At-least-once: every hook lets the row go (the build's -Wno-unused-parameter allows the names). */

static bool alo_txn_begins(struct relay *r, uint64_t end_lsn)
{
        return false;
}

static bool alo_row_in_kafka(struct relay *r)
{
        return false;
}

static bool alo_row_refused_before(const struct relay *r, uint64_t end_lsn, const char *work_id, size_t len,
                                   char *ret_code, size_t code_size, char *ret_reason, size_t reason_size)
{
        return false;
}

static int alo_before_record(struct relay *r, const char *topic, const char *work_id, size_t len,
                             uint64_t end_lsn, bool dead_letter)
{
        return 0;
}

static int alo_record_sent(struct relay *r, size_t bytes)
{
        return 0;
}

static int alo_record_refused(struct relay *r, const struct producer_error *e)
{
        return 0;
}

static int alo_txn_ends(struct relay *r, uint64_t end_lsn)
{
        return 0;
}

static const struct relay_guarantee at_least_once = {
        .name = "at-least-once",
        .txn_begins = alo_txn_begins,
        .row_in_kafka = alo_row_in_kafka,
        .row_refused_before = alo_row_refused_before,
        .before_record = alo_before_record,
        .record_sent = alo_record_sent,
        .record_refused = alo_record_refused,
        .txn_ends = alo_txn_ends,
};

static const struct relay_guarantee exactly_once = {
        .name = "exactly-once",
        .txn_begins = relay_eos_txn_begins,
        .row_in_kafka = relay_eos_skip_row,
        .row_refused_before = relay_eos_poisoned,
        .before_record = relay_eos_before_record,
        .record_sent = relay_eos_record_sent,
        .record_refused = relay_eos_produce_failed,
        .txn_ends = relay_eos_after_transaction,
};

const struct relay_guarantee *relay_guarantee_of(const struct relay_config *conf)
{
        return conf->exactly_once ? &exactly_once : &at_least_once;
}
