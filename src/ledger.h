/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The LSN ledger: which transactions have been fully acknowledged by Kafka,
 * and so how far the slot may be confirmed (the flush LSN of the standby
 * status update, which the server stores as the slot's confirmed_flush_lsn).
 *
 * A ring of transactions in commit order. Each entry holds the transaction's
 * end LSN (wal2json's "nextlsn": the LSN just past its commit record) and the
 * count of its messages still waiting for a delivery report. The flush LSN is
 * the end LSN of the newest transaction such that it and every older one are
 * committed (their C line was read) and have no message outstanding. It never
 * moves backwards. Acknowledgements may arrive in any order (partitions are
 * independent).
 *
 * A primary keepalive's walEnd is adopted only once every transaction read
 * before the keepalive is fully acknowledged: until then it is remembered.
 *
 * Transactions without messages cost no entry when nothing is outstanding
 * (the flush LSN moves at once) and are folded into the newest entry
 * otherwise, so an idle outbox on a busy server uses no memory.
 *
 * Pure bookkeeping: no I/O, no clock, no knowledge of Kafka or libpq.
 */
#ifndef RELAY_LEDGER_H
#define RELAY_LEDGER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ledger;

/*
 * A message's claim on its transaction, carried as the Kafka message opaque.
 * Bit 63 of a ticket is always clear, and no sequence reaches bit 47: the
 * caller may mark opaques with those bits.
 */
typedef uint64_t ledger_ticket;

/*
 * ledger_new() - a ledger whose flush LSN starts at @start_lsn (the slot's
 * confirmed_flush_lsn, so that the relay never reports less than the server
 * already has). Returns NULL when out of memory; free with ledger_free().
 */
struct ledger *ledger_new(uint64_t start_lsn);

/* ledger_free() - NULL-safe; returns NULL. */
struct ledger *ledger_free(struct ledger *l);

/*
 * ledger_begin() - a transaction whose end LSN is @end_lsn starts (wal2json
 * "B" line). @stamp is kept with it for ledger_oldest_stamp() (the relay
 * passes the commit time in µs). Returns 0, -EBUSY if a transaction is
 * already open (the stream is malformed), -ERANGE if @end_lsn is not past the
 * previous transaction's end LSN, or -ENOMEM.
 */
int ledger_begin(struct ledger *l, uint64_t end_lsn, int64_t stamp);

/*
 * ledger_oldest_stamp() - the @stamp of the oldest transaction not yet
 * confirmable (open, or with unacknowledged messages). Returns 0 and sets
 * *ret_stamp, or -ENOENT when there is none.
 */
int ledger_oldest_stamp(const struct ledger *l, int64_t *ret_stamp);

/*
 * ledger_add_message() - the open transaction gets one more message to be
 * acknowledged. Sets *ret_ticket for ledger_ack(). Returns 0, -EPROTO if no
 * transaction is open, or -ENOMEM.
 */
int ledger_add_message(struct ledger *l, ledger_ticket *ret_ticket);

/*
 * ledger_cancel_message() - undo the last ledger_add_message() of the open
 * transaction when the message could not be handed to Kafka after all.
 * Returns 0, or -EPROTO if no transaction is open or it has no message.
 */
int ledger_cancel_message(struct ledger *l, ledger_ticket ticket);

/*
 * ledger_commit() - the open transaction's last line ("C") was read; the
 * transaction's end LSN must be @end_lsn (the one given to ledger_begin()).
 * Returns 0, -EPROTO if no transaction is open, or -ERANGE on an end LSN
 * that differs from the begin line's.
 */
int ledger_commit(struct ledger *l, uint64_t end_lsn);

/*
 * ledger_ack() - a successful delivery report for the message of @ticket.
 * Returns 0, or -ENOENT for a ticket the ledger does not know (already fully
 * acknowledged, or from before ledger_reset()).
 */
int ledger_ack(struct ledger *l, ledger_ticket ticket);

/*
 * ledger_ticket_stamp() - the @stamp given to ledger_begin() for the
 * transaction of @ticket (the relay's commit time in µs), for commit-to-ack
 * latency; call it before ledger_ack(). Returns 0 and sets *ret_stamp, or
 * -ENOENT for a ticket the ledger does not know (as ledger_ack()).
 */
int ledger_ticket_stamp(const struct ledger *l, ledger_ticket ticket, int64_t *ret_stamp);

/*
 * ledger_keepalive() - a primary keepalive reported @wal_end (LSN). Adopted
 * as the flush LSN as soon as all transactions read before it, including an
 * open one, are fully acknowledged (at once if there are none).
 */
void ledger_keepalive(struct ledger *l, uint64_t wal_end);

/* ledger_flush_lsn() - the LSN that may be confirmed to the server now. */
uint64_t ledger_flush_lsn(const struct ledger *l);

/* ledger_outstanding() - messages handed out and not yet acknowledged. */
uint64_t ledger_outstanding(const struct ledger *l);

/* ledger_transactions() - transactions in the ring (open one included). */
size_t ledger_transactions(const struct ledger *l);

/* ledger_in_transaction() - true between ledger_begin() and ledger_commit(). */
bool ledger_in_transaction(const struct ledger *l);

/*
 * ledger_reset() - forget every unconfirmed transaction and message (the
 * producer was discarded and streaming restarts from the slot). The flush
 * LSN is kept. Tickets handed out before are unknown afterwards.
 */
void ledger_reset(struct ledger *l);

/*
 * ledger_rewind() - ledger_reset(), and the flush LSN lowered to @lsn if it is
 * higher. With Kafka transactions an acknowledged message is in Kafka only
 * once its transaction committed: after an abort the flush LSN goes back to
 * the newest committed checkpoint, so that streaming again redoes what the
 * aborted transaction held instead of taking it for confirmed.
 */
void ledger_rewind(struct ledger *l, uint64_t lsn);

#endif
