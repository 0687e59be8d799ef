// SPDX-License-Identifier: Apache-2.0
/*
 * Exactly-once into Kafka (--exactly-once): how a run of PostgreSQL
 * transactions becomes one Kafka transaction, together with the checkpoint
 * record that says how far it reaches.
 *
 * The named boundary: for consumers that read with isolation.level=
 * read_committed, every committed outbox row appears in Kafka once. The
 * producer is transactional; its transactional.id is derived from the
 * server's system identifier, the database and the slot, so that
 * init_transactions() fences every older relay of the slot (the seeds'
 * claim generation: a stale relay's late writes are refused). Whole
 * PostgreSQL transactions go into one Kafka transaction, bounded by records,
 * bytes and time; one larger than the bounds is split over several, and the
 * checkpoint then also counts how many of its rows are committed. The
 * checkpoint record goes into the same Kafka transaction; only once it is
 * committed may the slot be confirmed past it (relay_confirmable_lsn()). At
 * every start the newest committed checkpoint says which transactions (and
 * rows of a split one) are in Kafka already: they are skipped, so a crash
 * between the commit and the confirm, or a slot rewound by a server crash,
 * repeats nothing.
 *
 * A record the broker refuses makes the whole Kafka transaction abortable:
 * it is aborted, the row is remembered, and streaming starts again from the
 * slot; the row then meets its --on-error policy (the dead-letter topic, in
 * the next transaction, or a stop) and no other row is lost or repeated.
 *
 * The commit is a state machine that the top loop advances
 * (relay_eos_step(), x->ending): begun at a bound, at a PostgreSQL commit
 * once Kafka has acknowledged everything (the group commit), at a split or
 * at a stop, it waits for the side connection's first check of the slot,
 * produces the checkpoint record, waits for every delivery report, then
 * asks for EndTxn. No step waits: the one wait, relay_wait(), is the top
 * loop's (asserted there), and between steps the loop keeps answering the
 * server and reading what it sends into the staging queue (relay.c), which
 * is handled in order once the commit has ended; no record is produced
 * meanwhile (librdkafka refuses to). A record that must wait for a commit
 * it began itself (a probe: struct relay_eos) is offered again (r->held_back).
 *
 * Thread model: rd_kafka_commit_transaction() blocks and serves delivery
 * reports on its caller's thread. The relay calls it only once every record
 * of the transaction has its delivery report, and with a timeout no longer
 * than the time to the next standby status update; on the retriable timeout
 * the next step calls it again, which resumes the commit in the background.
 * The stream never times out while a commit waits on the coordinator.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cloudevents.h"
#include "log.h"
#include "relay_parts.h"

#define INIT_MS 30000             /* init_transactions(), at most */
#define TXN_MS 60000              /* a commit or abort, at most: librdkafka's transaction.timeout.ms */
#define CALL_MS 200               /* one blocking call of the transactions API, at most */
#define EOS_IDLE_CHECKPOINT_MS 1000 /* a checkpoint-only Kafka transaction at most this often */
#define BUSY_POLL_MS 50           /* a commit in flight: look at it at least this often */
#define PURGE_AGAIN_MS 100        /* a failed transaction's queue purged again, at most this often */
#define HURRY_AGAIN_MS 5          /* a commit waiting for delivery reports: producer_hurry() this often, */
                                  /* for linger.ms after its last record */
/*
 * ... and only when linger.ms is longer than this. At the relay's default
 * of 5 the flushes cost the relay 13% more CPU (median of 10 rounds, 1.01
 * to 1.30 times) for a p50 1.3 ms lower and a p99 no better (ratio 1.14,
 * 0.25 to 3.5): within the noise of a 2-core machine. At 50 they took the
 * p50 from 85 to 23 ms.
 */
#define HURRY_MIN_LINGER_MS 5

bool relay_eos_on(const struct relay *r)
{
        return r->conf->exactly_once;
}

bool relay_eos_wants_pair(const struct relay_config *conf)
{
        return strcmp(conf->txn_producers, "2") == 0 ||
               (strcmp(conf->txn_producers, "auto") == 0 && producer_pair_cheap());
}

void relay_eos_transactional_id(const struct relay *r, char *buf, size_t size)
{
        if (r->conf->transactional_id)
                snprintf(buf, size, "%s", r->conf->transactional_id);
        else
                snprintf(buf, size, "outbox-relay/%s/%s/%s", r->pre.system_id, r->pre.dbname,
                         r->conf->slot);
}

int relay_eos_init(struct relay *r)
{
        struct producer_error e;
        char tid[sizeof(r->eos.tid) + 4];
        const char *why, *ids;
        int ret;

        r->eos.open = false;
        r->eos.aborting = false;
        r->eos.aborted = false;
        r->eos.refused = false;
        r->eos.probing = r->eos.probe_next;
        r->eos.probe_next = false;
        r->eos.probe_open = false;
        r->eos.nknown = 0;
        r->eos.pending = 0;
        r->eos.timeout_ms = producer_transaction_timeout_ms(r->prod);
        r->eos.linger_ms = producer_linger_ms(r->prod);
        r->eos.failed = false;
        r->eos.ending = RELAY_EOS_END_NONE;
        r->held_back = false;
        ret = producer_init_transactions(r->prod, INIT_MS, &e);
        /* Whether the pair stands is known now: unless given, the interval is the pair's. */
        r->eos.interval_ms = !r->conf->txn_max_given && producer_paired(r->prod) ? RELAY_EOS_PAIR_INTERVAL_MS :
                             r->conf->txn_max_ms;
        r->eos.bound_ms = r->eos.interval_ms < r->eos.timeout_ms / 2 ? r->eos.interval_ms : r->eos.timeout_ms / 2;
        if (ret == 0)
                return 0;
        producer_transactional_id(r->prod, tid, sizeof(tid));
        /* Past a timeout (retried), what transactions need, and why the relay uses the id with ".1". */
        if (ret == -EAGAIN)
                why = ids = "";
        else {
                why = "; --exactly-once needs brokers with transactions (Kafka 0.11+, a transaction state "
                      "log that can be written) and, with ACLs, WRITE and DESCRIBE on the TransactionalId";
                ids = relay_eos_wants_pair(r->conf) ?
                      " (both ids, the second with \".1\": a PREFIXED ACL on the first serves both; "
                      "or --kafka-transactional-producers=1)" :
                      strcmp(tid, r->eos.tid) != 0 ?
                      " (the relay fences the id with \".1\" too, which a relay with two producers used)" : "";
        }
        relay_fail(r, ret == -EAGAIN ? RELAY_EXIT_RETRY : RELAY_EXIT_ENVIRONMENT,
                   "cannot start Kafka transactions (init_transactions for transactional.id \"%s\"): %s "
                   "(%s)%s%s", tid, e.text, e.name, why, ids);
        return -EIO;
}

static int produce_checkpoint(struct relay *r, uint64_t lsn, uint64_t part_end, uint64_t part_rows);
static uint64_t unverified(const struct relay *r);

/*
 * The checkpoint partition joins a transaction with its first records, in
 * the same AddPartitionsToTxn request, through a record of the newest
 * committed checkpoint: else it joins only when the commit's own checkpoint
 * record is produced, and each commit waits a round trip to the
 * transaction coordinator more (10 ms and more on a busy broker). The
 * record claims nothing new: the commit's checkpoint record follows it in
 * the same transaction and partition, so it is never the newest committed
 * one, and an abort takes both. Queue full: left out (the commit registers
 * the partition then). Returns 0; -EAGAIN when librdkafka refused the
 * record because the transaction had already failed (the row that opened
 * it is held back, r->held_back, and the abort from the top loop ends the
 * session); -EIO (recorded).
 */
static int register_checkpoint_partition(struct relay *r)
{
        const struct relay_eos *x = &r->eos;
        int ret;

        if (r->watch.ckpt_acked == LSN_INVALID)
                return 0;
        ret = produce_checkpoint(r, r->watch.ckpt_acked, x->committed_part_end, x->committed_part_rows);
        if (ret == -EAGAIN)
                return 0;
        /* Failed under it (relay_eos_produce_failed()): nothing recorded, the row must not be dropped. */
        if (ret < 0 && !r->failure && x->ending == RELAY_EOS_END_ABORT) {
                r->held_back = true;
                return -EAGAIN;
        }
        return ret;
}

/*
 * Begin a Kafka transaction if none is open; @rows: it is for records of
 * rows, and the checkpoint partition joins at once
 * (register_checkpoint_partition()). Returns 0, -EAGAIN (the row held
 * back), or -EIO (recorded).
 */
static int ensure_open(struct relay *r, bool rows)
{
        struct relay_eos *x = &r->eos;
        struct producer_error e;
        int ret;

        if (x->open)
                return 0;
        /*
         * After an abort the session ends and streaming starts again from
         * the slot: a transaction begun after it would hold rows that follow
         * the aborted ones, and its checkpoint would claim those too.
         */
        if (x->aborted) {
                relay_fail(r, RELAY_EXIT_RETRY, "no Kafka transaction after an abort in the same "
                           "session: streaming again from the slot");
                return -EIO;
        }
        ret = producer_begin_transaction(r->prod, &e);
        if (ret < 0) {
                relay_fail(r, ret == -EPERM ? RELAY_EXIT_ENVIRONMENT : RELAY_EXIT_RETRY,
                           "cannot begin a Kafka transaction: %s (%s)", e.text, e.name);
                if (ret != -EPERM)
                        r->producer_broken = true;
                return -EIO;
        }
        x->open = true;
        x->opened_ms = relay_mono_ms();
        x->holds_whole = false;
        x->messages = x->bytes = 0;
        x->failed = false;
        x->refused = false;
        return rows ? register_checkpoint_partition(r) : 0;
}

static bool probed(const struct relay_eos *x, const char *topic)
{
        if (x->nknown >= RELAY_PROBE_TOPICS)
                return true;  /* bounded: the rest go unprobed */
        for (size_t i = 0; i < x->nknown; i++)
                if (strcmp(x->known[i], topic) == 0)
                        return true;
        return false;
}

static int split(struct relay *r);

int relay_eos_before_record(struct relay *r, const char *topic, const char *work_id, size_t len,
                            uint64_t end_lsn, bool dead_letter)
{
        struct relay_eos *x = &r->eos;

        if (!relay_eos_on(r))
                return 0;
        /* A commit or abort in flight: nothing goes into a transaction before it ends. */
        if (relay_eos_busy(r)) {
                r->held_back = true;
                return -EAGAIN;
        }
        if (x->probing && !probed(x, topic)) {
                /*
                 * What is open first, then this record alone: again once that
                 * commit has ended. A transaction that holds no record yet (the
                 * last one's produce was refused at once) is this probe's.
                 */
                if (x->open && x->messages > 0 && split(r) < 0)
                        return -EIO;
                if (relay_eos_busy(r)) {
                        r->held_back = true;
                        return -EAGAIN;
                }
                x->probe_open = true;
                x->probe_produced = false;
                x->probe_delivered = false;
                x->probe_dead_letter = dead_letter;
                snprintf(x->probe_topic, sizeof(x->probe_topic), "%s", topic);
                snprintf(x->probe_work_id, sizeof(x->probe_work_id), "%.*s", (int)len, work_id);
                x->probe_end = end_lsn;
        }
        /* A probe's record alone: a refused AddPartitionsToTxn is its topic's. */
        return ensure_open(r, !x->probe_open);
}

void relay_eos_produced(struct relay *r, size_t bytes)
{
        if (!relay_eos_on(r))
                return;
        r->eos.pending++;
        r->eos.messages++;
        r->eos.bytes += bytes;
        if (r->eos.probe_open)
                r->eos.probe_produced = true;
}

void relay_eos_report(struct relay *r, const struct producer_report *rep)
{
        struct relay_eos *x = &r->eos;

        bool purged;

        if (!relay_eos_on(r))
                return;
        purged = rep->error.code == PRODUCER_ERR_PURGE_QUEUE || rep->error.code == PRODUCER_ERR_PURGE_INFLIGHT;
        /* Purged by the relay's own abort, or after it: a transaction that is gone. */
        if (purged && (x->aborting || !x->open))
                return;
        if (x->pending)
                x->pending--;
        /* The probe's record written: its topic's partition had joined the transaction. */
        if (x->probe_open && !rep->error.code && !(rep->msg.ticket & TICKET_CHECKPOINT))
                x->probe_delivered = true;
        if (purged && !x->failed) {
                /* librdkafka failed the open transaction itself and purged its records. */
                x->failed = true;
                snprintf(x->fail_name, sizeof(x->fail_name), "%s", rep->error.name);
                snprintf(x->fail_text, sizeof(x->fail_text), "librdkafka failed it and purged its "
                         "records");
        } else if (rep->error.code && !purged) {
                /* librdkafka sends nothing more of it: what is queued would wait for its timeout. */
                if (!x->failed) {
                        producer_purge_queued(r->prod);
                        x->purged_ms = relay_mono_ms();
                }
                x->failed = true;
                snprintf(x->fail_name, sizeof(x->fail_name), "%s", rep->error.name);
                snprintf(x->fail_text, sizeof(x->fail_text), "%s", rep->error.text);
        }
}

bool relay_eos_abort_refused(const struct relay *r, const struct producer_error *e)
{
        /*
         * x->aborted: an abort of this session began, and the session ends after
         * it, so the INVALID_TXN_STATE is that abort's.
         */
        return relay_eos_on(r) && (r->eos.refused || r->eos.aborted) &&
               e->code == PRODUCER_ERR_INVALID_TXN_STATE;
}

bool relay_eos_poisoned(const struct relay *r, uint64_t end_lsn, const char *work_id, size_t len,
                        char *ret_code, size_t code_size, char *ret_reason, size_t reason_size)
{
        const struct relay_eos *x = &r->eos;

        for (size_t i = 0; i < x->npoison; i++) {
                const struct relay_poison *p = &x->poison[i];

                if (p->end_lsn == end_lsn && strlen(p->work_id) == len &&
                    memcmp(p->work_id, work_id, len) == 0) {
                        snprintf(ret_code, code_size, "%s", p->code);
                        snprintf(ret_reason, reason_size, "%s", p->reason);
                        return true;
                }
        }
        return false;
}

void relay_eos_poison(struct relay *r, uint64_t end_lsn, const char *work_id, const struct producer_error *e,
                      const char *reason)
{
        struct relay_eos *x = &r->eos;
        struct relay_poison *p;
        char id[256];

        snprintf(id, sizeof(id), "%s", work_id);
        x->failed = true;
        if (relay_eos_poisoned(r, end_lsn, id, strlen(id), (char[8]){0}, 8, (char[8]){0}, 8))
                return;
        /* Bounded: the oldest is forgotten (its transaction is long committed or dead-lettered). */
        p = &x->poison[x->npoison < RELAY_POISON_MAX ? x->npoison++ : (x->poison_next++ % RELAY_POISON_MAX)];
        p->end_lsn = end_lsn;
        snprintf(p->work_id, sizeof(p->work_id), "%s", id);
        p->error = e->code;
        snprintf(p->code, sizeof(p->code), "%s", e->name);
        snprintf(p->reason, sizeof(p->reason), "%s", reason);
        x->refused = true;
        /* The abort then says why: the record's refusal, not the purge that followed it. */
        snprintf(x->fail_name, sizeof(x->fail_name), "%s", e->name);
        snprintf(x->fail_text, sizeof(x->fail_text), "work ID \"%s\": %.400s", id, reason);
        x->failed = true;
}

/*
 * Abort the open transaction (purging what is not delivered). @once: one
 * call of abort_transaction(), -EAGAIN while it is under way, for the top
 * of the loop to wait and call again; else, inside a turn or a step (a
 * refused produce, a commit's step), the calls are repeated here, keeping
 * Kafka and the server answered, without waiting in the one wait. Returns
 * 0, -EAGAIN (@once), or -EIO (recorded).
 */
static int abort_open(struct relay *r, bool once)
{
        struct relay_eos *x = &r->eos;
        struct producer_error e;
        bool timed_out;
        int ret;

        /* An abort begun with @once is carried on by its caller alone, to its end. */
        assert(once || !x->aborting);
        if (!x->open) {
                x->aborting = false;
                return 0;
        }
        if (!x->aborting) {
                /* Acknowledged is not committed: no checkpoint in this session may claim what it held. */
                x->aborted = true;
                x->aborting = true;
                x->abort_deadline_ms = relay_mono_ms() + TXN_MS;
                /* EndTxn was asked for: only a new producer's init_transactions() settles it now. */
                if (x->ending == RELAY_EOS_END_COMMIT && x->end_called) {
                        log_warning("the session ended while the Kafka transaction was being committed: a "
                                    "new producer settles it, and the newest checkpoint says how far it "
                                    "reached");
                        x->ending = RELAY_EOS_END_NONE;
                        x->aborting = false;
                        x->open = false;
                        x->pending = 0;
                        r->producer_broken = true;
                        return -EIO;
                }
                x->ending = RELAY_EOS_END_NONE;
        }
        for (;;) {
                ret = producer_abort_transaction(r->prod, CALL_MS, &e);
                if (ret != -EAGAIN || relay_mono_ms() > x->abort_deadline_ms)
                        break;
                if (once)
                        return -EAGAIN;
                relay_keep_answered(r);
        }
        x->aborting = false;
        timed_out = ret == -EPERM && relay_eos_timed_out(r, &e);
        if (timed_out) {
                relay_fail(r, RELAY_EXIT_RETRY, "cannot abort the Kafka transaction: %s (%s): the "
                           "transaction coordinator aborted it already, open %" PRId64 " ms, past its "
                           "transaction.timeout.ms of %" PRId64 " ms; a new producer streams again from "
                           "the slot", e.text, e.name, relay_mono_ms() - x->opened_ms, x->timeout_ms);
                r->producer_broken = true;
        }
        x->open = false;
        x->pending = 0;
        x->stats_aborted++;
        if (timed_out)
                return -EIO;
        if (ret < 0 && relay_eos_abort_refused(r, &e)) {
                if (x->refused)
                        relay_fail(r, RELAY_EXIT_RETRY, "cannot abort the Kafka transaction: %s (%s), since "
                                   "the coordinator never began it (%s); a new producer streams again from "
                                   "the slot", e.text, e.name, x->fail_text);
                else
                        relay_fail(r, RELAY_EXIT_RETRY, "cannot abort the Kafka transaction: %s (%s): the "
                                   "coordinator holds no such transaction (its records never reached it: "
                                   "a topic gone, or not yet known); a new producer settles it and streams "
                                   "again from the slot", e.text, e.name);
                r->producer_broken = true;
                return -EIO;
        }
        if (ret < 0) {
                relay_fail(r, ret == -EPERM ? RELAY_EXIT_ENVIRONMENT : RELAY_EXIT_RETRY,
                           "cannot abort the Kafka transaction: %s (%s)", e.text, e.name);
                if (ret != -EPERM)
                        r->producer_broken = true;
                return -EIO;
        }
        return 0;
}

int relay_eos_abort(struct relay *r)
{
        return relay_eos_on(r) ? abort_open(r, true) : 0;
}

/*
 * The open transaction failed and no record's delivery report said why
 * (x->refused unset): librdkafka failed it for a request of its own, whose
 * error its transactions API gives. A record's kind of error
 * (TOPIC_AUTHORIZATION_FAILED for AddPartitionsToTxn) is the checkpoint
 * topic's when no row's record was in, or the probe's record was written;
 * else the probe's record's own; else the next session probes to find the
 * topic, and a session that probes already stops (exit 3) rather than go
 * round.
 */
static void explain_failure(struct relay *r)
{
        struct relay_eos *x = &r->eos;
        struct producer_error e;
        char reason[1024];

        if (x->refused || producer_transaction_error(r->prod, &e) < 0)
                return;
        snprintf(x->fail_name, sizeof(x->fail_name), "%s", e.name);
        snprintf(x->fail_text, sizeof(x->fail_text), "%.500s", e.text);
        if (e.fault != PRODUCER_FAULT_RECORD)
                return;
        /*
         * A record's kind of error while the transaction held no row's record,
         * or once the probe's record was written: the checkpoint record's,
         * i.e. its topic's (AddPartitionsToTxn refused it: an ACL revoked
         * while running, say). No row is to blame, and none meets its
         * --on-error policy for it. A topic gone is streamed again once: the
         * next session's read of the checkpoint finds it gone and says so.
         */
        if (x->messages == 0 || (x->probe_open && x->probe_delivered)) {
                const char *fix = producer_fix(e.code);

                x->refused = true;
                if (producer_unknown_topic(e.code) && !x->probing) {
                        x->probe_next = true;
                        snprintf(x->fail_text, sizeof(x->fail_text), "%.400s, for the checkpoint topic "
                                 "\"%s\"", e.text, r->conf->checkpoint_topic);
                        return;
                }
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "Kafka refused the checkpoint topic \"%s\" to "
                           "the Kafka transaction: %s (%s). %s; stopping without confirming anything "
                           "more, since no checkpoint can be committed", r->conf->checkpoint_topic,
                           e.text, e.name, fix ? fix : "Check the relay's access to it");
                return;
        }
        /* A probe whose record never went in (held back, the transaction empty) is not its cause. */
        if (x->probe_open && x->probe_produced && x->probe_dead_letter) {
                relay_fail(r, RELAY_EXIT_DATA, "the dead-letter publish of work ID \"%s\" (transaction ending "
                           "at LSN %s) to \"%s\" failed: Kafka refused the topic to the transaction: %s "
                           "(%s). Stopping: nothing from this transaction on is confirmed. %s and restart, or "
                           "skip it: --skip-transaction=%s", x->probe_work_id,
                           lsn_format(x->probe_end, (char[LSN_STRLEN]){0}), x->probe_topic, e.text, e.name,
                           producer_fix(e.code) ? producer_fix(e.code) : "Let the dead-letter topic take the row",
                           lsn_format(x->probe_end, (char[LSN_STRLEN]){0}));
                x->refused = true;
                return;
        }
        if (x->probe_open && x->probe_produced) {
                snprintf(reason, sizeof(reason), "Kafka refused the message for topic \"%s\": %s (%s)%s%s",
                         x->probe_topic, e.text, e.name, producer_fix(e.code) ? ". " : "",
                         producer_fix(e.code) ? producer_fix(e.code) : "");
                metrics_labels_add(r->stats.errors, e.name, 1);
                relay_eos_poison(r, x->probe_end, x->probe_work_id, &e, reason);
                x->probe_next = true;  /* another topic may be refused too */
                return;
        }
        if (x->probing) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "a Kafka transaction failed with %s (%s), an error of "
                           "one of its records that no delivery report named, though each topic's first "
                           "record went into a transaction of its own; stopping rather than streaming again "
                           "into the same failure. Check the relay's access to its topics", e.text, e.name);
                x->refused = true;
                return;
        }
        /* Its abort may find the coordinator never began it (librdkafka then fails the producer). */
        x->refused = true;
        x->probe_next = true;
        snprintf(x->fail_text, sizeof(x->fail_text), "%.300s, an error of one of its records that no delivery "
                 "report named: the next session puts each topic's first record into a Kafka transaction of "
                 "its own to find it", e.text);
}

/*
 * A record of the open transaction failed: abort it and stream again, or
 * stop when the failure already recorded says so (its error line stays the
 * last). Returns -EIO (recorded).
 */
static int abort_failed(struct relay *r)
{
        struct relay_eos *x = &r->eos;
        char why[600];

        explain_failure(r);
        snprintf(why, sizeof(why), "%s (%s)", x->fail_text, x->fail_name);
        if (abort_open(r, false) < 0)
                return -EIO;
        if (r->failure && r->failure != RELAY_EXIT_RETRY) {
                log_info("aborted the failed Kafka transaction (%s); stopping", why);
                return -EIO;
        }
        relay_fail(r, RELAY_EXIT_RETRY, "the Kafka transaction failed: %s; aborted it, streaming again "
                   "from the slot (the committed part is skipped)", why);
        return -EIO;
}

int relay_eos_produce_failed(struct relay *r, const struct producer_error *e)
{
        struct relay_eos *x = &r->eos;

        if (relay_eos_timed_out(r, e)) {
                relay_fail(r, RELAY_EXIT_RETRY, "cannot hand a record to Kafka: %s (%s): the transaction "
                           "coordinator aborted the open Kafka transaction, open %" PRId64 " ms, past its "
                           "transaction.timeout.ms of %" PRId64 " ms; a new producer streams again from "
                           "the slot", e->text, e->name, relay_mono_ms() - x->opened_ms, x->timeout_ms);
                r->producer_broken = true;
                return -ECANCELED;
        }
        if (!relay_eos_on(r) || !x->open || e->code != PRODUCER_ERR_STATE)
                return 0;
        /*
         * In an open transaction librdkafka refuses to enqueue only once the
         * transaction has become abortable: a record's delivery failed, or a
         * request of its own did (AddPartitionsToTxn, an epoch bump), which
         * no delivery report names. A fatal error is _FATAL, not _STATE.
         * Every report is served first (librdkafka purges what is queued,
         * what is in flight ends soon), so that each record refused as its
         * own fault is known, whichever report comes first: the replay then
         * applies its --on-error policy. Then it is aborted either way, by
         * relay_eos_step() from the top loop; nothing is produced meanwhile.
         */
        x->end_error = *e;
        /* A commit's checkpoint record too: no EndTxn was asked for yet. */
        x->ending = RELAY_EOS_END_ABORT;
        x->end_deadline_ms = relay_mono_ms() + TXN_MS;
        return -ECANCELED;
}

/*
 * The transaction's checkpoint record, produced inside it. Returns 0,
 * -EAGAIN while librdkafka's queue is full (the next step tries again), or
 * -EIO (a failure recorded, or the transaction failed: x->failed).
 */
static int produce_checkpoint(struct relay *r, uint64_t lsn, uint64_t part_end, uint64_t part_rows)
{
        struct relay_watch *w = &r->watch;
        struct relay_eos *x = &r->eos;
        struct checkpoint c = {.lsn = lsn, .txn_end_lsn = part_end, .txn_rows = part_rows};
        struct producer_error e;
        char value[CHECKPOINT_VALUE_MAX];
        int n, ret;

        n = relay_checkpoint_value(r, &c, "exactly-once", value, sizeof(value));
        if (n < 0)
                return n;
        ret = producer_send(r->prod, &(struct producer_msg){.topic = r->conf->checkpoint_topic, .key = w->key,
                                                            .key_len = strlen(w->key), .value = value,
                                                            .value_len = (size_t)n,
                                                            .ticket = TICKET_CHECKPOINT | TICKET_EOS,
                                                            .first_partition = true},
                            &e);
        if (ret == -ENOBUFS)
                return -EAGAIN;
        if (ret < 0) {
                if (!r->failure && relay_eos_produce_failed(r, &e) == 0)
                        relay_fail(r, e.fault == PRODUCER_FAULT_CLUSTER ? RELAY_EXIT_RETRY :
                                   RELAY_EXIT_ENVIRONMENT, "cannot write the checkpoint record to topic "
                                   "\"%s\" in the Kafka transaction: %s (%s)", r->conf->checkpoint_topic,
                                   e.text, e.name);
                return -EIO;
        }
        x->pending++;
        return 0;
}

/*
 * Begin to commit the open transaction with its checkpoint: @lsn (every
 * PostgreSQL transaction ending at or before it is in), and for a split one
 * its end @part_end and @part_rows rows. relay_eos_step() carries it on
 * from the top loop; nothing is produced until it has ended.
 */
static void begin_commit(struct relay *r, uint64_t lsn, uint64_t part_end, uint64_t part_rows)
{
        struct relay_eos *x = &r->eos;

        assert(x->ending == RELAY_EOS_END_NONE);
        x->ending = RELAY_EOS_END_COMMIT;
        x->end_lsn = lsn;
        x->end_part_end = part_end;
        x->end_part_rows = part_rows;
        x->end_started_ms = relay_mono_ms();
        x->end_deadline_ms = x->end_started_ms + TXN_MS;
        x->end_checked_ms = x->end_reported_ms = x->end_hurried_ms = x->end_produced_ms = 0;
        x->end_called = false;
        producer_transactional_id(r->prod, x->end_tid, sizeof(x->end_tid));
}

/* Begin the commit and take its first step. Returns 0, or -EIO after recording why. */
static int commit(struct relay *r, uint64_t lsn, uint64_t part_end, uint64_t part_rows)
{
        if (!r->eos.open)
                return 0;
        begin_commit(r, lsn, part_end, part_rows);
        return relay_eos_step(r);
}

/* The slot checked, then the checkpoint record in the transaction. 1 once it is, 0 not yet, or -EIO. */
static int commit_checkpoint(struct relay *r)
{
        struct relay_eos *x = &r->eos;
        int ret;

        if (x->end_produced_ms)
                return 1;
        /*
         * Not before the first round saw the slot where it was read: a checkpoint
         * past a slot that someone moved meanwhile would hide the move.
         */
        if (!r->round.slot_checked) {
                if (!r->failure && r->streaming && relay_mono_ms() < x->end_deadline_ms)
                        return 0;
                if (!r->failure)
                        relay_fail(r, RELAY_EXIT_RETRY, "the side connection did not check the slot in "
                                   "time; aborting the Kafka transaction");
                abort_open(r, false);
                return -EIO;
        }
        if (!x->end_checked_ms) {
                x->end_checked_ms = relay_mono_ms();
                /* A checkpoint never claims less than the newest committed one. */
                if (x->end_lsn < r->watch.ckpt_acked)
                        x->end_lsn = r->watch.ckpt_acked;
                /*
                 * Nor less of a split transaction: one short of the end of a
                 * transaction whose rows an earlier commit covered in part (a
                 * checkpoint-only one, held back to what the side connection has
                 * verified) carries that part on. Without it a restart takes those
                 * rows, committed in Kafka, for unpublished and sends them again.
                 */
                if (x->end_part_end == LSN_INVALID && x->committed_part_end > x->end_lsn) {
                        x->end_part_end = x->committed_part_end;
                        x->end_part_rows = x->committed_part_rows;
                }
                if (x->end_lsn > x->last_end)
                        x->last_end = x->end_lsn;
                /*
                 * The round that must verify what the checkpoint claims
                 * (wait_verified()) runs beside the delivery reports, not
                 * after them: one round trip less on every commit's path.
                 */
                relay_round_hurry(r, unverified(r));
        }
        /*
         * A probe's record is written before the checkpoint record joins: one
         * AddPartitionsToTxn for both would fail both for either topic, and a
         * refusal of the checkpoint topic would be taken for the probe's
         * (explain_failure()). Its failure: aborted without a checkpoint.
         */
        if (x->probe_open && x->probe_produced && !x->probe_delivered) {
                if (x->pending > 0 && !x->failed && !r->failure && !r->producer_broken &&
                    relay_mono_ms() < x->end_deadline_ms)
                        return 0;
                if (x->failed)
                        return 1;  /* commit_step() aborts it */
        }
        ret = produce_checkpoint(r, x->end_lsn, x->end_part_end, x->end_part_rows);
        if (ret == -EAGAIN && relay_mono_ms() < x->end_deadline_ms)
                return 0;
        if (ret == -EAGAIN) {
                relay_fail(r, RELAY_EXIT_RETRY, "librdkafka's queue stayed full for %d s: cannot write the "
                           "checkpoint record; aborting the Kafka transaction", TXN_MS / 1000);
                abort_open(r, false);
                return -EIO;
        }
        if (ret < 0) {
                /* The transaction failed under it (relay_eos_produce_failed()): aborted once the reports are in. */
                if (x->ending == RELAY_EOS_END_ABORT)
                        return 0;
                x->ending = RELAY_EOS_END_NONE;
                return -EIO;
        }
        x->end_produced_ms = relay_mono_ms();
        return 1;
}

/*
 * When the commit waiting for delivery reports calls producer_hurry() next,
 * monotonic ms (at once the first time), or -1: not waiting, or no batch
 * can be lingering any more. Every record was produced by the time the
 * checkpoint record was (end_produced_ms), so none lingers past linger.ms
 * after it. Not counted from the slot check: a probe's delivery or a full
 * queue can hold the checkpoint record back past linger.ms, and its own
 * batch then lingers from when it went in. Never with a linger.ms of
 * HURRY_MIN_LINGER_MS or less.
 */
static int64_t next_hurry_ms(const struct relay *r)
{
        const struct relay_eos *x = &r->eos;
        int64_t at;

        if (x->ending != RELAY_EOS_END_COMMIT || !x->end_produced_ms || x->end_called || x->failed ||
            x->pending == 0 || x->linger_ms <= HURRY_MIN_LINGER_MS)
                return -1;
        if (!x->end_hurried_ms)
                return x->end_produced_ms;
        at = x->end_hurried_ms + HURRY_AGAIN_MS;
        return at - x->end_produced_ms <= x->linger_ms ? at : -1;
}

/*
 * The commit's checkpoint LSN, every transaction ending at or before it
 * taken as in Kafka, if the side connection's round has not verified it;
 * else LSN_INVALID. Not a split transaction's end: that one's rows are
 * claimed by count, each published or not as it was read, and its commit's
 * LSN is not received before its last row is (a change's XLogData carries
 * that change's LSN), which the relay does not read while the commit waits.
 */
static uint64_t unverified(const struct relay *r)
{
        const struct relay_eos *x = &r->eos;

        return x->end_lsn > r->round.verified ? x->end_lsn : LSN_INVALID;
}

/*
 * No EndTxn before the round has verified what the checkpoint claims. The
 * checkpoint is the resume point: one past a commit whose catalog change no
 * round has seen yet makes a restart skip that transaction. Found by a
 * breaker helper: a rename of the outbox and an insert under the new name,
 * held invisible by a synchronous standby, then a row of another outbox
 * table; its commit's checkpoint passed the rename, the round then stopped
 * the relay, and restarted with the new name it skipped the renamed
 * table's row. Rounds go out at once meanwhile (relay_round_hurry()). What
 * is not verified by the deadline (a transaction left open after altering
 * an outbox table, the side connection away) aborts the Kafka transaction;
 * the session streams again from the slot, nothing committed. Returns 0
 * (waiting) or -EIO (recorded).
 */
static int wait_verified(struct relay *r)
{
        struct relay_eos *x = &r->eos;
        uint64_t lsn = unverified(r);
        char a[LSN_STRLEN], b[LSN_STRLEN];

        relay_round_hurry(r, lsn);
        /* After a row's stop the rounds go on, and what came before the row is still committed. */
        if ((!r->failure || r->failure == RELAY_EXIT_DATA) && r->streaming && relay_mono_ms() < x->end_deadline_ms)
                return 0;
        if (!r->failure)
                relay_fail(r, RELAY_EXIT_RETRY, "the side connection's catalog check did not verify LSN %s "
                           "within %d s (it verified up to LSN %s): aborting the Kafka transaction, streaming "
                           "again from the slot", lsn_format(lsn, a), TXN_MS / 1000,
                           lsn_format(r->round.verified, b));
        abort_open(r, false);
        return -EIO;
}

/* One step of the commit (x->ending == RELAY_EOS_END_COMMIT). Returns 0, or -EIO (recorded). */
static int commit_step(struct relay *r)
{
        struct relay_eos *x = &r->eos;
        struct producer_error e;
        char a[LSN_STRLEN];
        int ret;

        ret = commit_checkpoint(r);
        if (ret <= 0)
                return ret;
        /*
         * Every record's delivery report first, served by the one wait: all
         * of them for a failed transaction too (x->failed), before its abort.
         * A recorded stop (r->failure) waits for none: what is open stays
         * open, or, for a row's stop (RELAY_EXIT_DATA), is committed, and
         * commit_transaction() fails it if any record of it was refused.
         */
        if (x->pending > 0 && !r->failure && !r->producer_broken && relay_mono_ms() < x->end_deadline_ms) {
                /*
                 * Every record of the transaction is produced: none need wait
                 * out linger.ms (the checkpoint record's batch would, every
                 * commit). Again while reports are due: a partition whose
                 * AddPartitionsToTxn was not answered when the flush ran
                 * sends nothing until it is, and then waits out linger.ms
                 * (counted from its first record) unless a flush runs.
                 */
                int64_t at = next_hurry_ms(r);

                if (at >= 0 && relay_mono_ms() >= at) {
                        x->end_hurried_ms = relay_mono_ms();
                        producer_hurry(r->prod);
                }
                return 0;
        }
        if (!x->end_reported_ms)
                x->end_reported_ms = relay_mono_ms();
        if (r->failure && r->failure != RELAY_EXIT_DATA) {
                /* Left open: the session ends, and what is open is aborted between sessions. */
                x->ending = RELAY_EOS_END_NONE;
                return -EIO;
        }
        if (x->failed) {
                x->ending = RELAY_EOS_END_NONE;
                return abort_failed(r);
        }
        if (!x->end_called && unverified(r) != LSN_INVALID)
                return wait_verified(r);
        /*
         * At most CALL_MS: on the retriable timeout the commit goes on in
         * librdkafka's background, and the next turn of the loop calls it
         * again. Never shorter. In librdkafka (2.0.2 to 2.8 at least) a call
         * whose first phase (begin commit) times out is not resumed but leaves
         * that phase's late result behind, and the next call takes each
         * phase's result from the one before: its last phase then runs while
         * the EndTxn is still in flight and fails with _STATE ("Operation not
         * valid in state CommittingTransaction"), and the EndTxn's answer,
         * arriving with no commit call under way, is taken for an abort's
         * (rd_kafka_txn_endtxn_complete() asks the current call's name), which
         * librdkafka asserts against: the process aborts. Seen in CI with a
         * 10 ms call on a loaded machine.
         */
        /* Draining a backlog the next transaction stays on this producer (producer_stay()). */
        producer_stay(r->prod, x->bound_ms > x->interval_ms);
        ret = producer_commit_transaction(r->prod, CALL_MS, &e);
        /*
         * That _STATE: a commit call under way again before the EndTxn's answer
         * arrives lets librdkafka finish it as a commit (the results are in step
         * again), so it is made at once.
         */
        for (int again = 0; ret == -EIO && e.code == PRODUCER_ERR_STATE && x->end_called && again < 3; again++) {
                log_warning("librdkafka answered a resumed commit of the Kafka transaction with %s (%s): "
                            "calling it again", e.text, e.name);
                ret = producer_commit_transaction(r->prod, CALL_MS, &e);
        }
        x->end_called = true;
        if (ret == -EAGAIN && relay_mono_ms() <= x->end_deadline_ms)
                return 0;
        x->ending = RELAY_EOS_END_NONE;
        if (ret == 0) {
                x->open = false;
                x->pending = 0;
                x->stats_committed++;
                x->stats_rows += x->messages;
                metrics_histogram_observe(&x->commit_latency, (relay_mono_ms() - x->end_started_ms) / 1000.0);
                relay_watch_checkpoint_committed(r, x->end_lsn);
                x->committed_part_end = x->end_part_end;
                x->committed_part_rows = x->end_part_rows;
                /* Probed once its record is committed: not when it never reached Kafka. */
                if (x->probe_open && x->probe_produced && x->nknown < RELAY_PROBE_TOPICS)
                        snprintf(x->known[x->nknown++], sizeof(x->known[0]), "%s", x->probe_topic);
                x->probe_open = false;
                log_debug("committed a Kafka transaction of %" PRIu64 " records up to LSN %s%s: open %"
                          PRId64 " ms before the commit began, then %" PRId64 " ms for the slot check, %"
                          PRId64 " ms for the delivery reports, %" PRId64 " ms to commit (transactional.id "
                          "\"%s\")", x->messages,
                          lsn_format(x->end_lsn, a), x->end_part_end ? " (a split transaction)" : "",
                          x->end_started_ms - x->opened_ms, x->end_checked_ms - x->end_started_ms,
                          x->end_reported_ms - x->end_checked_ms, relay_mono_ms() - x->end_reported_ms,
                          x->end_tid);
                return 0;
        }
        if (ret == -ECANCELED) {
                abort_open(r, false);
                relay_fail(r, RELAY_EXIT_RETRY, "committing the Kafka transaction failed: %s (%s); aborted "
                           "it, streaming again from the slot", e.text, e.name);
                return -EIO;
        }
        if (ret == -EPERM && relay_eos_timed_out(r, &e)) {
                relay_fail(r, RELAY_EXIT_RETRY, "cannot commit the Kafka transaction: %s (%s): the "
                           "transaction coordinator aborted it, open %" PRId64 " ms, past its "
                           "transaction.timeout.ms of %" PRId64 " ms; a new producer streams again from "
                           "the slot", e.text, e.name, relay_mono_ms() - x->opened_ms, x->timeout_ms);
                x->open = false;
                r->producer_broken = true;
                return -EIO;
        }
        x->open = false;
        relay_fail(r, ret == -EPERM ? RELAY_EXIT_ENVIRONMENT : RELAY_EXIT_RETRY,
                   "cannot commit the Kafka transaction: %s (%s)%s", e.text, e.name,
                   ret == -EPERM ? ". This relay was fenced by a newer producer with its transactional.id "
                   "(another relay took the slot over) or lost its permission: stopping without "
                   "confirming anything more; do not restart it while the other one runs" : "");
        if (ret != -EPERM)
                r->producer_broken = true;
        return -EIO;
}

/* One step of the abort of a failed transaction (RELAY_EOS_END_ABORT). Returns 0, or -EIO (recorded). */
static int abort_step(struct relay *r)
{
        struct relay_eos *x = &r->eos;

        if (x->pending > 0 && !r->failure && !r->producer_broken && relay_mono_ms() < x->end_deadline_ms)
                return 0;
        x->ending = RELAY_EOS_END_NONE;
        if (!x->failed) {
                x->failed = true;
                snprintf(x->fail_name, sizeof(x->fail_name), "%s", x->end_error.name);
                snprintf(x->fail_text, sizeof(x->fail_text), "librdkafka refused a record: %.300s, as "
                         "it does once it has failed the transaction", x->end_error.text);
        }
        return abort_failed(r);
}

/*
 * A failed transaction's records that librdkafka put back in its queue after
 * the purge that followed the failure: a batch in flight behind the refused
 * one is answered OUT_OF_ORDER_SEQUENCE_NUMBER, and its records wait for an
 * epoch bump (rdkafka_request.c), which under transactions only the abort
 * brings. Their reports would come at message.timeout.ms, and the commit or
 * abort waits for every report: purged again, at most every PURGE_AGAIN_MS,
 * while reports are due.
 */
static void purge_put_back(struct relay *r)
{
        struct relay_eos *x = &r->eos;
        int64_t now = relay_mono_ms();

        if (!x->failed || x->pending == 0 || now - x->purged_ms < PURGE_AGAIN_MS)
                return;
        producer_purge_queued(r->prod);
        x->purged_ms = now;
}

int relay_eos_step(struct relay *r)
{
        struct relay_eos *x = &r->eos;
        bool handling;
        int ret;

        if (!relay_eos_on(r) || x->ending == RELAY_EOS_END_NONE)
                return 0;
        purge_put_back(r);
        /* A step never waits in relay_wait() (asserted there), whoever calls it. */
        handling = r->handling;
        r->handling = true;
        ret = x->ending == RELAY_EOS_END_COMMIT ? commit_step(r) : abort_step(r);
        r->handling = handling;
        return ret;
}

bool relay_eos_busy(const struct relay *r)
{
        return relay_eos_on(r) && r->eos.ending != RELAY_EOS_END_NONE;
}

/* Is the open transaction at a bound of records or bytes? */
static bool full(const struct relay *r)
{
        return r->eos.messages >= (uint64_t)r->conf->txn_max_messages ||
               r->eos.bytes >= (uint64_t)r->conf->txn_max_bytes;
}

/*
 * Inside a PostgreSQL transaction: when the open Kafka transaction is split
 * on time (monotonic ms), or -1. Nothing commits on time inside one, and
 * the walsender can take long over the rest of it (millions of changes of
 * other tables, filtered out): at half the producer's transaction.timeout.ms
 * it is split, or the coordinator aborts it and fences the producer. And
 * whole PostgreSQL transactions read before it, held in the same Kafka
 * transaction, wait no longer than the time bound.
 */
static int64_t split_at_ms(const struct relay *r)
{
        const struct relay_eos *x = &r->eos;
        int64_t at = x->opened_ms + x->timeout_ms / 2;

        if (x->holds_whole && x->opened_ms + x->bound_ms < at)
                at = x->opened_ms + x->bound_ms;
        return at;
}

/* Mid-transaction: split it; the checkpoint counts the PostgreSQL transaction's rows committed so far. */
static int split(struct relay *r)
{
        return commit(r, r->eos.last_end, r->txn.end_lsn, r->eos.part_rows);
}

int relay_eos_record_sent(struct relay *r, size_t bytes)
{
        relay_eos_produced(r, bytes);
        relay_eos_row_done(r);
        return relay_eos_after_record(r);
}

int relay_eos_after_record(struct relay *r)
{
        struct relay_eos *x = &r->eos;

        if (!relay_eos_on(r) || !x->open || relay_eos_busy(r))
                return 0;
        /* A probe is committed at once; its topic is known once that commit has ended. */
        if (x->probe_open)
                return split(r);
        if (!full(r) && relay_mono_ms() < split_at_ms(r))
                return 0;
        return split(r);
}

bool relay_eos_timed_out(const struct relay *r, const struct producer_error *e)
{
        const struct relay_eos *x = &r->eos;

        return relay_eos_on(r) && producer_fenced(e) && x->open &&
               relay_mono_ms() - x->opened_ms >= x->timeout_ms;
}

int64_t relay_eos_time_bound_ms(int64_t txn_max_ms, int64_t lag_us)
{
        int64_t longer = lag_us / 1000;

        if (lag_us <= RELAY_EOS_BACKLOG_LAG_US || txn_max_ms == 0)
                return txn_max_ms;
        if (longer > RELAY_EOS_BACKLOG_MAX_MS)
                longer = RELAY_EOS_BACKLOG_MAX_MS;
        return longer > txn_max_ms ? longer : txn_max_ms;
}

/*
 * Each PostgreSQL commit sets the bound the open Kafka transaction is
 * committed at. Draining a backlog, a row's
 * wait is the backlog's, not the time bound's: fewer, larger Kafka
 * transactions drain it sooner, since each commit holds the stream for its
 * last delivery reports and the coordinator's round trips, and the next one
 * waits for the coordinator to finish the last (librdkafka retries
 * AddPartitionsToTxn after CONCURRENT_TRANSACTIONS in 20 ms). The lag is
 * measured on the server's clock alone (a commit's timestamp against its
 * XLogData's send time), so a clock skew between relay and server cannot make
 * a live stream look like a backlog. The bound set at the last PostgreSQL
 * commit also holds while the stream is momentarily empty (the walsender
 * decodes the next part of the backlog), for up to --kafka-commit-interval
 * (relay_eos_idle()): a live commit sets it back.
 */
int relay_eos_after_transaction(struct relay *r, uint64_t end_lsn)
{
        struct relay_eos *x = &r->eos;
        int64_t lag_us, bound;

        if (!relay_eos_on(r))
                return 0;
        lag_us = r->txn.commit_time_us ? r->fb.send_time_us + REPLMSG_PG_EPOCH_OFFSET_S * INT64_C(1000000) -
                                         r->txn.commit_time_us : 0;
        bound = relay_eos_time_bound_ms(x->interval_ms, lag_us);
        /* Never as long as the coordinator's limit: it aborts what is open longer. */
        if (bound > x->timeout_ms / 2)
                bound = x->timeout_ms / 2;
        /* Logged as the stream falls behind or catches up, not as the lag moves by a millisecond. */
        if ((bound > x->interval_ms) != (x->bound_ms > x->interval_ms))
                log_debug("%s a backlog (a commit sent %" PRId64 " ms after it happened): Kafka "
                          "transactions of up to %" PRId64 " ms", bound > x->interval_ms ?
                          "draining" : "done with", lag_us / 1000, bound);
        x->bound_ms = bound;
        x->last_commit_read_ms = relay_mono_ms();
        x->last_end = end_lsn;
        x->part_rows = 0;
        x->holds_whole = x->open;
        if (x->open && !relay_eos_busy(r) && (full(r) || relay_mono_ms() - x->opened_ms >= bound))
                return commit(r, end_lsn, LSN_INVALID, 0);
        return 0;
}

/*
 * When relay_eos_idle() commits the open Kafka transaction (monotonic ms).
 * Between PostgreSQL transactions on a live stream, as soon as Kafka has
 * acknowledged every record in it: a group commit. Its commit is then
 * the checkpoint record and EndTxn, and the rows read meanwhile wait in
 * the socket for the next one, so a Kafka transaction holds what arrived
 * during the last commit and the time bound is reached only when Kafka is
 * slower than it. Draining a backlog the bound alone decides: fewer,
 * larger Kafka transactions drain it sooner; with
 * --kafka-commit-fixed-interval too.
 */
static int64_t idle_commit_at_ms(const struct relay *r)
{
        const struct relay_eos *x = &r->eos;

        if (ledger_in_transaction(r->ledger))
                return split_at_ms(r);
        if (x->pending == 0 && x->bound_ms <= x->interval_ms && !r->conf->txn_fixed_time)
                return x->opened_ms;
        /*
         * Draining a backlog: no PostgreSQL commit read for a whole
         * --kafka-commit-interval says the backlog is drained (or the
         * walsender is busy with other tables): the rows in wait no longer
         * for the longer bound.
         */
        if (x->bound_ms > x->interval_ms &&
            x->last_commit_read_ms + x->interval_ms < x->opened_ms + x->bound_ms)
                return x->last_commit_read_ms + x->interval_ms;
        return x->opened_ms + x->bound_ms;
}

int relay_eos_idle(struct relay *r)
{
        struct relay_eos *x = &r->eos;

        /*
         * Nothing more to read now: a transaction open long enough goes, at a
         * PostgreSQL boundary, or split inside a PostgreSQL transaction.
         */
        if (!relay_eos_on(r) || !x->open || relay_eos_busy(r) || relay_mono_ms() < idle_commit_at_ms(r))
                return 0;
        if (ledger_in_transaction(r->ledger))
                return split(r);
        if (x->bound_ms > x->interval_ms && relay_mono_ms() < x->opened_ms + x->bound_ms)
                log_debug("the stream went quiet while draining a backlog: committing the Kafka "
                          "transaction after %" PRId64 " ms, not %" PRId64, relay_mono_ms() - x->opened_ms,
                          x->bound_ms);
        return commit(r, x->last_end, LSN_INVALID, 0);
}

int64_t relay_eos_idle_due_ms(const struct relay *r)
{
        int64_t left;

        if (!relay_eos_on(r) || !r->eos.open)
                return -1;
        /*
         * A commit in flight: at once after EndTxn timed out, else when a
         * report wakes the wait, or at its next producer_hurry().
         */
        if (relay_eos_busy(r)) {
                int64_t at = next_hurry_ms(r);

                if (r->eos.end_called)
                        return 0;
                if (at < 0)
                        return BUSY_POLL_MS;
                left = at - relay_mono_ms();
                return left <= 0 ? 0 : left < BUSY_POLL_MS ? left : BUSY_POLL_MS;
        }
        left = idle_commit_at_ms(r) - relay_mono_ms();
        return left > 0 ? left : 0;
}

int relay_eos_flush(struct relay *r)
{
        struct relay_eos *x = &r->eos;

        if (!relay_eos_on(r) || !x->open || relay_eos_busy(r))
                return 0;
        /* At a stop: what is open is committed; a split transaction keeps its count. */
        return commit(r, x->last_end, ledger_in_transaction(r->ledger) ? r->txn.end_lsn : LSN_INVALID,
                      ledger_in_transaction(r->ledger) ? x->part_rows : 0);
}

uint64_t relay_eos_stop_target(const struct relay *r, uint64_t flush)
{
        if (!relay_eos_on(r))
                return flush;
        return r->eos.last_end < flush ? r->eos.last_end : flush;
}

void relay_eos_checkpoint(struct relay *r, uint64_t target)
{
        struct relay_eos *x = &r->eos;

        /*
         * Nothing of the outbox to publish, but the slot moves on (keepalives,
         * other tables' transactions): a transaction holding only the
         * checkpoint, at most every EOS_IDLE_CHECKPOINT_MS. Each is a round of
         * requests to the transaction coordinator (AddPartitionsToTxn, Produce,
         * EndTxn) and two records in the checkpoint partition.
         */
        if (!relay_eos_on(r) || target == LSN_INVALID || x->open || x->aborted || relay_eos_busy(r) ||
            ledger_in_transaction(r->ledger) ||
            relay_mono_ms() - x->last_idle_ms < EOS_IDLE_CHECKPOINT_MS)
                return;
        x->last_idle_ms = relay_mono_ms();
        if (ensure_open(r, false) < 0)
                return;
        /* The top loop's turns take the steps (relay_eos_step()). */
        begin_commit(r, target, LSN_INVALID, 0);
}

void relay_eos_resume(struct relay *r, const struct checkpoint *c)
{
        struct relay_eos *x = &r->eos;

        /* A fresh resume point is read before every stream, never while one runs (its counts go on). */
        assert(!r->streaming);

        x->skip_upto = c->lsn;
        x->resume_end = c->txn_end_lsn;
        x->resume_rows = c->txn_rows;
        /* What the checkpoint holds of a split transaction is committed: the next ones keep it. */
        x->committed_part_end = c->txn_end_lsn;
        x->committed_part_rows = c->txn_rows;
        /* Everything up to the slot's position is done too: a checkpoint never claims less. */
        x->last_end = c->lsn > r->round.slot_start_lsn ? c->lsn : r->round.slot_start_lsn;
        x->part_rows = 0;
}

bool relay_eos_txn_begins(struct relay *r, uint64_t end_lsn)
{
        struct relay_eos *x = &r->eos;

        x->part_rows = 0;
        x->resume_left = end_lsn == x->resume_end ? x->resume_rows : 0;
        /* In Kafka already: the newest checkpoint reaches past it. */
        return end_lsn <= x->skip_upto;
}

bool relay_eos_skip_row(struct relay *r)
{
        struct relay_eos *x = &r->eos;

        if (!relay_eos_on(r) || x->resume_left == 0)
                return false;
        x->resume_left--;
        x->part_rows++;
        return true;
}

void relay_eos_row_done(struct relay *r)
{
        if (relay_eos_on(r))
                r->eos.part_rows++;
}
