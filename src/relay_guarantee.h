/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The delivery guarantee, as the row path sees it. relay_row.c calls these
 * hooks, through r->guarantee and nowhere else, at a transaction's BEGIN,
 * around each row's record and at its COMMIT; it has no branch on the mode.
 * Two implementations (relay_guarantee.c): at-least-once, the default, whose
 * only bookkeeping is the LSN ledger the row path keeps for both (so every
 * hook of it lets the row go); and exactly-once (--exactly-once,
 * relay_eos.c), which puts the records into Kafka transactions, each with a
 * checkpoint record, and knows from the newest checkpoint what is in Kafka
 * already. LSNs are PostgreSQL's (end LSN: just past a commit record).
 */
#ifndef RELAY_RELAY_GUARANTEE_H
#define RELAY_RELAY_GUARANTEE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "producer.h"

struct relay;

struct relay_guarantee {
        const char *name;       /* "at-least-once" or "exactly-once", for logs */

        /*
         * BEGIN of a transaction ending at @end_lsn, just opened in the
         * ledger. Returns true when its rows are in Kafka already (the whole
         * transaction is then passed over), else false.
         */
        bool (*txn_begins)(struct relay *r, uint64_t end_lsn);

        /*
         * A row of it (or a logical message), before anything is done for
         * it. Returns true when its record is in Kafka already (the part of
         * a split transaction that a committed checkpoint counts): the row
         * is passed over. May count it; called once per row and offer.
         */
        bool (*row_in_kafka)(struct relay *r);

        /*
         * The row @work_id (@len bytes) of the transaction ending at
         * @end_lsn had its record refused by Kafka before, in a transaction
         * that was aborted: true with its error code and reason (@code_size,
         * @reason_size bytes) for its --on-error policy, else false.
         */
        bool (*row_refused_before)(const struct relay *r, uint64_t end_lsn, const char *work_id, size_t len,
                                   char *ret_code, size_t code_size, char *ret_reason, size_t reason_size);

        /*
         * Just before the row's record (@dead_letter: its dead-letter copy)
         * is produced for @topic. Returns 0 to produce; -EAGAIN when it
         * cannot go yet (r->held_back set: the caller undoes what it did and
         * the reader offers the row again); -EIO after recording a failure.
         */
        int (*before_record)(struct relay *r, const char *topic, const char *work_id, size_t len,
                             uint64_t end_lsn, bool dead_letter);

        /*
         * The row's record, of @bytes (producer_msg_bytes()), is with
         * librdkafka: the row is done. Returns 0 or -EIO (recorded).
         */
        int (*record_sent)(struct relay *r, size_t bytes);

        /*
         * librdkafka refused the row's record at once with @e. Returns 0 to
         * judge the refusal as the row's or the producer's; negative when
         * it ended the transaction instead (recorded, or left to the loop:
         * nothing more is done for the row).
         */
        int (*record_refused)(struct relay *r, const struct producer_error *e);

        /*
         * COMMIT of the transaction ending at @end_lsn, just closed in the
         * ledger. Returns 0 or -EIO (recorded).
         */
        int (*txn_ends)(struct relay *r, uint64_t end_lsn);
};

/*
 * relay_guarantee_of() - the implementation @conf asks for: exactly-once with
 * --exactly-once, else at-least-once. Static; never NULL.
 */
const struct relay_guarantee *relay_guarantee_of(const struct relay_config *conf);

#endif
