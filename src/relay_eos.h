/* SPDX-License-Identifier: Apache-2.0 */
/*
 * --exactly-once (relay_eos.c): the state of the open Kafka transaction, its
 * checkpoint and the commit in flight, and the hooks the row path and the
 * loop call. Every function takes the relay (relay_parts.h) and reads the
 * rest of it (the ledger, the watch's checkpoint position, the producer);
 * only relay_eos.c writes struct relay_eos, and it writes no other part's
 * struct: a committed checkpoint goes to the watch through
 * relay_watch_checkpoint_committed(). The watch never calls in here: the
 * top loop hands over its checkpoint target and resume point. Formats: the
 * checkpoint record is checkpoint.h's; the transactions are Kafka's
 * (KIP-98), through librdkafka's transactional API.
 */
#ifndef RELAY_RELAY_EOS_H
#define RELAY_RELAY_EOS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "metrics.h"
#include "producer.h"
#include "record.h"

struct relay_config;

/*
 * The commit interval of two producers in turn (unless --kafka-commit-interval
 * is given), ms: with the pair a commit no longer waits for the last one's
 * markers (librdkafka's 20 ms retry), so a shorter interval lowers the
 * latency at no more CPU than one producer at 20 ms (outbox-relay(7)).
 */
#define RELAY_EOS_PAIR_INTERVAL_MS 5
struct relay;

/* A row whose record the broker refused inside an aborted Kafka transaction (--exactly-once). */
#define RELAY_POISON_MAX 64
#define RELAY_PROBE_TOPICS 64  /* topics probed per session, at most (the rest are not) */
struct relay_poison {
        uint64_t end_lsn;             /* of its PostgreSQL transaction */
        char work_id[256];
        int error;                    /* Kafka's error code */
        char code[64];                /* and its name */
        char reason[768];
};

/* --exactly-once (relay_eos.c). */
struct relay_eos {
        char tid[512];                /* the transactional.id */
        bool open;                    /* a Kafka transaction is open */
        bool aborting;                /* the relay is aborting it: purged records are expected */
        int64_t abort_deadline_ms;    /* monotonic: the abort under way gives up after this */
        bool aborted;                 /* one was aborted in this session: nothing more is committed */
        int64_t opened_ms;            /* monotonic */
        int64_t timeout_ms;           /* the producer's transaction.timeout.ms */
        int64_t linger_ms;            /* the producer's linger.ms (producer_linger_ms()) */
        bool holds_whole;             /* the open one holds records of a PostgreSQL transaction read whole */
        uint64_t messages, bytes;     /* records and their bytes in the open one */
        uint64_t pending;             /* records of the open one without a delivery report */
        bool failed;                  /* one of them failed: it must be aborted */
        int64_t purged_ms;            /* failed: when its queue was last purged (monotonic ms) */
        bool refused;                 /* one was refused as its own fault (relay_eos_poison()) */
        char fail_name[64], fail_text[512];
        uint64_t last_end;            /* end LSN of the newest PostgreSQL transaction fully in */
        uint64_t part_rows;           /* rows of the current PostgreSQL transaction handled so far */
        /* the newest committed checkpoint's split transaction (end LSN, rows in), or 0: carried on */
        uint64_t committed_part_end, committed_part_rows;
        uint64_t skip_upto;           /* from the checkpoint: transactions ending at or before are in */
        uint64_t resume_end;          /* from the checkpoint: a split transaction, or 0 */
        uint64_t resume_rows;         /* and how many of its rows are in */
        uint64_t resume_left;         /* rows of the current transaction still to skip */
        int64_t last_idle_ms;         /* the last checkpoint-only transaction */
        /*
         * --kafka-commit-interval, ms; when not given, RELAY_EOS_PAIR_INTERVAL_MS
         * with two producers taking the transactions in turn
         */
        int64_t interval_ms;
        int64_t bound_ms;             /* the time bound now: interval_ms, longer in a backlog */
        int64_t last_commit_read_ms;  /* monotonic: the last PostgreSQL commit read */
        /*
         * Finding a topic the transaction coordinator refuses: a transaction
         * failed with a record's error (TOPIC_AUTHORIZATION_FAILED for
         * AddPartitionsToTxn) that no delivery report named. The next session
         * puts each topic's first record into a Kafka transaction of its own,
         * a probe, so that the error is that record's.
         */
        bool probe_next;              /* the next session probes */
        bool probing;                 /* this session does */
        bool probe_open;              /* the open transaction is a probe */
        bool probe_dead_letter;       /* of a dead-letter copy */
        bool probe_produced;          /* its record went into the probe's transaction */
        bool probe_delivered;         /* and its delivery report said it was written */
        char probe_topic[RECORD_TOPIC_MAX + 1];
        char probe_work_id[256];
        uint64_t probe_end;           /* end LSN of the probed row's PostgreSQL transaction */
        char known[RELAY_PROBE_TOPICS][RECORD_TOPIC_MAX + 1];  /* topics probed in this session */
        size_t nknown;
        struct relay_poison poison[RELAY_POISON_MAX];
        size_t npoison, poison_next;
        uint64_t stats_committed, stats_aborted, stats_rows;
        struct metrics_histogram commit_latency;
        /*
         * How the open transaction ends, a step at each turn of the top loop
         * (relay_eos_step()): its commit (the slot checked, the checkpoint
         * record produced, every delivery report in, EndTxn), or its abort
         * once the reports of a failed one are in. Nothing is produced
         * meanwhile: what the server sends waits in the staging queue.
         */
        enum relay_eos_end { RELAY_EOS_END_NONE, RELAY_EOS_END_COMMIT, RELAY_EOS_END_ABORT } ending;
        uint64_t end_lsn, end_part_end, end_part_rows;  /* the checkpoint the commit writes */
        int64_t end_started_ms, end_deadline_ms;        /* monotonic */
        int64_t end_checked_ms, end_reported_ms;        /* when the slot check and the reports were in */
        int64_t end_produced_ms;                        /* when the checkpoint record went in, 0: not yet in */
        int64_t end_hurried_ms;                         /* when the commit last called producer_hurry(), 0: not yet */
        bool end_called;              /* EndTxn was asked for: it can no longer be aborted */
        char end_tid[516];            /* the committing producer's transactional.id (tid, or tid ".1") */
        struct producer_error end_error;  /* the refused produce that began an abort */
};

/* relay_eos_on() - true with --exactly-once. */
bool relay_eos_on(const struct relay *r);

/*
 * relay_eos_wants_pair() - whether @conf asks for two transactional
 * producers: --kafka-transactional-producers=2, or auto with a librdkafka
 * where the pair costs no more CPU than one (producer_pair_cheap()).
 */
bool relay_eos_wants_pair(const struct relay_config *conf);

/* relay_eos_transactional_id() - --transactional-id, or outbox-relay/<system>/<database>/<slot>. */
void relay_eos_transactional_id(const struct relay *r, char *buf, size_t size);

/* relay_eos_init() - init_transactions() on a new producer. Returns 0 or -EIO (recorded). */
int relay_eos_init(struct relay *r);

/*
 * relay_eos_before_record() - before a record of @topic is produced for the
 * row @work_id (@len bytes) of the transaction ending at @end_lsn (a
 * dead-letter copy if @dead_letter): a Kafka transaction is open, of its own
 * when the session probes and @topic has not been probed yet (what was
 * open is committed first). 0; -EAGAIN while a commit or abort is in flight
 * (relay_eos_busy(), which a probe's commit of what was open begins): the
 * caller undoes what it did for the record and leaves it, and r->held_back
 * tells the reader to offer its message again once the commit has ended;
 * or -EIO (recorded).
 */
int relay_eos_before_record(struct relay *r, const char *topic, const char *work_id, size_t len,
                            uint64_t end_lsn, bool dead_letter);

/* relay_eos_produced() - a record of @bytes went into the open Kafka transaction. */
void relay_eos_produced(struct relay *r, size_t bytes);

/* relay_eos_row_done() - an outbox row of the current PostgreSQL transaction was handled. */
void relay_eos_row_done(struct relay *r);

/*
 * relay_eos_after_record() - split the open Kafka transaction at its bounds,
 * or commit a probe. 0 or -EIO.
 */
int relay_eos_after_record(struct relay *r);

/*
 * relay_eos_record_sent() - a row's record of @bytes went into the open
 * Kafka transaction: relay_eos_produced(), relay_eos_row_done(), then
 * relay_eos_after_record(). 0 or -EIO (recorded).
 */
int relay_eos_record_sent(struct relay *r, size_t bytes);

/* relay_eos_after_transaction() - a C line ending at @end_lsn; commit at the bounds. 0 or -EIO. */
int relay_eos_after_transaction(struct relay *r, uint64_t end_lsn);

/*
 * relay_eos_step() - carry the commit or abort in flight one step on: the
 * slot checked, the checkpoint record produced, every delivery report in,
 * EndTxn (one call of librdkafka's commit_transaction(), at most 200 ms and
 * no longer than the time to the next standby status update), or the abort
 * of a failed transaction once its reports are in. Called by the top loops
 * (stream() and end_session()) only, never from inside relay_wait(); it
 * never calls relay_wait() (asserted there). Returns 0 (done, or not yet:
 * relay_eos_busy() says which), or -EIO after recording a failure.
 */
int relay_eos_step(struct relay *r);

/*
 * relay_eos_busy() - true while a commit or abort is in flight: no record may
 * be produced, and what the server sends waits in the staging queue.
 */
bool relay_eos_busy(const struct relay *r);

/*
 * relay_eos_time_bound_ms() - the time bound of a Kafka transaction in ms:
 * @txn_max_ms (--kafka-commit-interval) on a live stream. While draining a
 * backlog, i.e. when @lag_us (µs from a PostgreSQL commit to the server
 * sending it, both by the server's clock) exceeds RELAY_EOS_BACKLOG_LAG_US,
 * as long as that lag, at most RELAY_EOS_BACKLOG_MAX_MS, and never shorter
 * than @txn_max_ms: a row behind a backlog waits for its commit no longer
 * than it has waited already. @txn_max_ms of 0 (a Kafka transaction per
 * PostgreSQL commit) stays 0. Pure; no errors.
 */
#define RELAY_EOS_BACKLOG_LAG_US 250000
#define RELAY_EOS_BACKLOG_MAX_MS 1000
int64_t relay_eos_time_bound_ms(int64_t txn_max_ms, int64_t lag_us);

/*
 * relay_eos_timed_out() - is @e, a fatal producer error, the transaction
 * coordinator's abort of the open Kafka transaction after
 * transaction.timeout.ms rather than a newer relay's fence? librdkafka
 * reports both as a fence (producer_fenced()); only the first can end a
 * transaction that has been open that long. Then a new producer may go on.
 */
bool relay_eos_timed_out(const struct relay *r, const struct producer_error *e);

/* relay_eos_idle() - nothing more to read now: commit an open transaction old enough. 0 or -EIO. */
int relay_eos_idle(struct relay *r);

/*
 * relay_eos_idle_due_ms() - how long an idle stream may sleep, in ms: until
 * relay_eos_idle() would commit the open Kafka transaction (0: now), or -1
 * when none is open. While a commit is in flight (relay_eos_busy()): 0 once
 * EndTxn was asked for (relay_eos_step() calls it again), else until its
 * next producer_hurry() is due, at most BUSY_POLL_MS (50); a delivery
 * report wakes the wait sooner.
 */
int64_t relay_eos_idle_due_ms(const struct relay *r);

/* relay_eos_flush() - a requested stop: commit what is open. 0 or -EIO. */
int relay_eos_flush(struct relay *r);
/*
 * relay_eos_stop_target() - the LSN a stopping relay waits to confirm, given
 * the ledger's flush LSN @flush: @flush itself without --exactly-once; with
 * it, no further than the end of the newest PostgreSQL transaction whose
 * rows are all in a committed or committing Kafka transaction, since a
 * stopping relay commits no new checkpoint (inside a split PostgreSQL
 * transaction the ledger can be ahead of anything a checkpoint may claim).
 */
uint64_t relay_eos_stop_target(const struct relay *r, uint64_t flush);

/*
 * relay_eos_abort() - abort what is open (its records are produced again),
 * from the top of the loop (end_session(), recover()): one call of
 * librdkafka's abort_transaction(), at most 200 ms. Returns 0; -EAGAIN
 * when the abort is under way: the caller waits (relay_wait()) and calls
 * again, and must keep calling until it gets something else (at most
 * TXN_MS, 60 s, after the first call); or -EIO (recorded).
 */
int relay_eos_abort(struct relay *r);

/*
 * relay_eos_abort_refused() - is @e, a fatal producer error, the
 * coordinator's INVALID_TXN_STATE for the abort of a transaction it never
 * began (librdkafka 2.0.2 sends that EndTxn anyway): because it refused a
 * record's topic, or because no record reached it (its topic deleted and
 * not known, the session ended first)? Then a new producer may go on: its
 * init_transactions() settles the coordinator, and the replay meets a
 * refused row's --on-error policy or the next session's own checks.
 */
bool relay_eos_abort_refused(const struct relay *r, const struct producer_error *e);

/*
 * relay_eos_produce_failed() - a produce inside the open Kafka transaction
 * failed with @e. A fence after the coordinator's timeout
 * (relay_eos_timed_out()) discards the producer and records a retry:
 * returns -ECANCELED. When it is librdkafka's _STATE, the transaction has failed
 * (librdkafka's abortable state: a record's delivery failed, or a request of
 * the transaction, such as AddPartitionsToTxn, did): serve the reports so a
 * record's own error is known, abort the transaction and record a retry
 * (streaming again from the slot; a failed row meets its --on-error policy):
 * returns -ECANCELED. Otherwise 0: the caller handles @e.
 */
int relay_eos_produce_failed(struct relay *r, const struct producer_error *e);

/*
 * relay_eos_checkpoint() - begin a checkpoint-only Kafka transaction up to
 * @target (LSN; LSN_INVALID: none is due, relay_watch_checkpoint_target())
 * when nothing else is open or in flight, at most once a second. Called by
 * the top loops at each turn, before relay_eos_step(), which takes the
 * steps. A failure to begin the transaction is recorded.
 */
void relay_eos_checkpoint(struct relay *r, uint64_t target);

/* relay_eos_resume() - the newest checkpoint @c says what is in Kafka already. */
void relay_eos_resume(struct relay *r, const struct checkpoint *c);

/*
 * relay_eos_txn_begins() - BEGIN of a transaction ending at @end_lsn: true
 * when the newest committed checkpoint reaches past it (in Kafka already).
 */
bool relay_eos_txn_begins(struct relay *r, uint64_t end_lsn);

/* relay_eos_skip_row() - true for a row of a split transaction that is in Kafka already. */
bool relay_eos_skip_row(struct relay *r);

/* relay_eos_report() - a delivery report of a record of the open Kafka transaction. */
void relay_eos_report(struct relay *r, const struct producer_report *rep);

/*
 * relay_eos_poison() - remember the row @work_id of the transaction ending
 * at @end_lsn whose record Kafka refused (@e, @reason), and fail the open
 * Kafka transaction; after the abort and the replay the row meets its
 * --on-error policy.
 */
void relay_eos_poison(struct relay *r, uint64_t end_lsn, const char *work_id, const struct producer_error *e,
                      const char *reason);

/* relay_eos_poisoned() - true (with the code and reason) for a remembered row. */
bool relay_eos_poisoned(const struct relay *r, uint64_t end_lsn, const char *work_id, size_t len,
                        char *ret_code, size_t code_size, char *ret_reason, size_t reason_size);

#endif
