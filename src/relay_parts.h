/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The relay's state and its parts' interfaces, shared by relay.c and its
 * parts and nothing else. The family has no circle: relay.c at the top
 * runs the loop (the one wait, relay_wait()) and calls its parts; no part
 * calls relay.c, and each calls only the parts below it:
 *
 *   relay.c         how the loop turns: start, sessions, the one wait,
 *                   reconnects, the warm standby, stop, `slot create`'s
 *                   first checkpoint
 *   relay_pgoutput.c  what a pgoutput message becomes: records in wal2json.h's
 *                   form, the table's identity by OID (--plugin=pgoutput;
 *                   its own header, relay_pgoutput.h)
 *   relay_row.c     what happens to one decoded record and one outbox row,
 *                   through the guarantee's hooks (relay_guarantee.h)
 *   relay_ack.c     a record handed to librdkafka, and what happens on its
 *                   ack or nack (delivery reports, the dead-letter topic;
 *                   its own header, relay_ack.h)
 *   relay_limit.c   topics' max.message.bytes, and a producer whose record
 *                   batches fit them (its own header, relay_limit.h)
 *   relay_watch.c   what it keeps true while it runs: the checkpoint
 *                   record's verdicts, the checkpoint chase
 *   relay_round.c   the side connection's round of catalog checks: how
 *                   far the relay may confirm (the verified LSN; its own
 *                   header, relay_round.h: its struct and interface)
 *   relay_guarantee.c  the row path's hooks: at-least-once, exactly-once
 *   relay_eos.c     --exactly-once: how transactions become Kafka
 *                   transactions with their checkpoint (its own header,
 *                   relay_eos.h: its struct and hooks)
 *   relay_report.c  what the relay tells the server (standby status updates,
 *                   and how far it may confirm), Kafka (the checkpoint
 *                   record's value) and the operator (failures, metrics,
 *                   the stats line)
 *
 * No part waits: what cannot go on holds its record back (r->held_back) or
 * is a state the loop advances (relay_eos_step()).
 *
 * struct relay groups its state the way pg_basebackup's StreamCtl does: the
 * leaf modules it joins, then one sub-struct per question.
 */
#ifndef RELAY_RELAY_PARTS_H
#define RELAY_RELAY_PARTS_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "checkpoint.h"
#include "config.h"
#include "ledger.h"
#include "lsn.h"
#include "metrics.h"
#include "pgoutput.h"
#include "pgside.h"
#include "pgstream.h"
#include "relay_eos.h"
#include "relay_ack.h"
#include "relay_guarantee.h"
#include "relay_limit.h"
#include "relay_pgoutput.h"
#include "relay_round.h"
#include "preflight.h"
#include "producer.h"
#include "record.h"
#include "replmsg.h"
#include "sdnotify.h"
#include "wal2json.h"

struct relay_reload;  /* relay.h: relay_run()'s SIGHUP reload, only relay.c uses it */

#define ERRLEN 1024
#define MAX_HEADERS (16 + RECORD_HEADERS_MAX) /* the relay's own, then the row's */
#define STATUS_MIN_GAP_MS 100                 /* status updates at most this often when only the flush LSN moved */

/* A checkpoint record's opaque: this bit and relay_watch's sequence, never a ledger ticket's. */
#define TICKET_CHECKPOINT (UINT64_C(1) << 63)
/* With TICKET_CHECKPOINT: the checkpoint inside a Kafka transaction (--exactly-once). */
#define TICKET_EOS (UINT64_C(1) << 62)

extern const char RELAY_STATE_STREAMING[];

/* The open transaction, from its B line to its C line. */
struct relay_txn {
        bool skip;                 /* already confirmed: a resend after reconnect */
        bool operator_skip;        /* --skip-transaction names it */
        bool operator_dead_letter; /* --dead-letter-transaction names it */
        bool eos_skip;             /* --exactly-once: committed to Kafka already */
        uint32_t xid;
        uint64_t end_lsn;          /* LSN just past its commit record */
        int64_t commit_time_us;    /* µs since the Unix epoch */
        char lsn_text[LSN_STRLEN]; /* end_lsn as pg_lsn text: ce_pglsn */
        char xid_text[16];         /* ce_pgxid */
        char time_text[64];        /* ce_time, RFC 3339 */
        bool noted;                /* the row offered again was logged and counted as dead-lettered */
};

/* What the server was told, and when to tell it again. */
struct relay_feedback {
        int64_t interval_ms;       /* standby status interval, under half of wal_sender_timeout */
        int64_t last_status_ms;    /* monotonic */
        bool reply_pending;        /* a primary keepalive asked for a reply */
        int quick_requests;        /* reply requests in a row, each soon after our last update */
        int64_t server_stopping_ms; /* when a shutdown of the server was noticed, or 0 */
        uint64_t write_lsn;        /* highest XLogData start received */
        uint64_t server_lsn;       /* highest WAL end the server reported */
        uint64_t sent_flush_lsn;   /* flush LSN of the last standby status update */
        int64_t send_time_us;      /* the newest XLogData's send time, server clock, µs since 2000-01-01 */
};

/* Counters and clocks for /metrics, /readyz and the stats line. */
struct relay_stats {
        struct metrics_counters c;
        uint64_t ignored[W2J_UNKNOWN + 1]; /* records not published, by action */
        struct metrics_labels *topics;     /* acknowledged rows by topic, bounded */
        struct metrics_labels *errors;     /* failed delivery reports by error name, bounded */
        struct metrics_histogram latency;  /* commit to acknowledgement */
        int64_t last_confirm_ms;   /* monotonic; the flush LSN advanced or caught up; 0: never */
        int64_t last_progress_ms;  /* monotonic; an ack, a confirm or nothing pending; 0: never */
        int64_t last_stats_ms;     /* the periodic stats line */
        struct metrics_counters prev;
        uint64_t prev_errors;
        int64_t nontx_log_ms;      /* monotonic; the last non-transactional message logged; 0: none */
        uint64_t nontx_unlogged;   /* non-transactional messages not logged since then */
};

/* A warm standby's state, so its log says each change once (relay_report.c). */
struct relay_standby {
        bool on;                   /* the last look found the slot held by another process */
        char holder[512];          /* what was last logged about the holder */
        int64_t since_ms;          /* monotonic: when this relay became a standby */
        int64_t logged_ms;         /* monotonic: the last line about it */
};

/* What the relay keeps true while it runs: the checkpoint (relay_watch.c). */
struct relay_watch {
        struct checkpoint_source src;
        char key[512];                /* the checkpoint key: system identifier/database/slot */
        char mapping[CHECKPOINT_MAPPING_MAX];
        char digest[17];
        char writer[160];
        struct checkpoint_topic topic; /* the checkpoint topic as the session's start found it */
        bool topic_warned;            /* its weakness was logged */
        int64_t topic_next_ms;        /* monotonic: when to ask for its settings again */
        int64_t standby_next_ms;      /* a standby compares its mapping again at this relay_mono_ms() */
        int64_t standby_gap_ms;       /* and then after this long: doubling while there is no mapping */
        bool judged_once;             /* a checkpoint was judged against the slot in this process */
        bool ckpt_unknown;            /* streaming before the checkpoint could be read: confirm nothing */
        int64_t ckpt_retry_ms;        /* monotonic: when to try reading it again */
        int ckpt_retries;             /* reads of it since that ran out of time (each waits twice as long) */
        uint64_t ckpt_acked;          /* LSN of the newest checkpoint Kafka acknowledged */
        uint64_t ckpt_floor;          /* LSN of the newest checkpoint read: never write less */
        uint64_t ckpt_inflight;       /* LSN of the checkpoint record in flight, or 0 */
        uint64_t ckpt_inflight_seq;   /* its ticket sequence */
        uint64_t ckpt_seq;
        int64_t ckpt_sent_ms;         /* monotonic */
};

/*
 * What the server sent while a Kafka commit was in flight (--exactly-once),
 * whole CopyData messages in the order received, handled once it has ended.
 * Bounded: when full, the relay reads no more until it empties.
 */
#define RELAY_STAGE_MAX 4096               /* messages */
#define RELAY_STAGE_MAX_BYTES (2u << 20)   /* bytes */
struct relay_staged {
        char *data;
        size_t len;                   /* bytes */
};
struct relay_stage {
        struct relay_staged q[RELAY_STAGE_MAX];  /* a ring */
        size_t head, n, bytes;
};

/*
 * How the replication socket is read (relay.c): while the server sends
 * faster than RELAY_READ_BATCH_RATE, the kernel gathers RELAY_READ_BATCH
 * bytes before the loop wakes, so that a backlog costs the relay and the
 * walsender one wake-up, one recv() and one window update (an ACK) per
 * batch instead of per CopyData message; a slower stream wakes the loop
 * at every arrival, as before.
 */
#define RELAY_READ_BATCH 65536              /* bytes gathered before a wake-up, while batching */
#define RELAY_READ_BATCH_WAIT_MS 2          /* the longest wait while batching: a tail below it */
#define RELAY_READ_WINDOW_MS 10             /* the rate is measured over at least this long */
#define RELAY_READ_BATCH_RATE (16u << 20)   /* bytes/s from which the relay batches */
#define RELAY_READ_SINGLE_RATE (4u << 20)   /* bytes/s below which it stops batching */
struct relay_reads {
        bool batch;                   /* SO_RCVLOWAT is RELAY_READ_BATCH on this session's socket */
        bool unsupported;             /* setsockopt refused it: never again in this session */
        bool held;                    /* the loop waited without reading in this window */
        int64_t window_ms;            /* monotonic: when the rate's window began */
        uint64_t window_bytes;        /* CopyData bytes read since then */
};

struct relay {
        /* Given to relay_run(). */
        const struct relay_config *conf;
        volatile sig_atomic_t *stop;
        int stop_fd;
        const struct relay_reload *reload;

        const struct relay_guarantee *guarantee;  /* the row path's hooks: relay_guarantee_of(conf) */

        /* The leaf modules it joins. */
        struct record_spec *spec;
        struct w2j_decoder *dec;
        struct relay_pgo pgo;
        struct ledger *ledger;
        struct producer *prod;
        struct producer_options prod_opts;
        /* the callbacks every producer of the relay gets: relay_on_delivery(), relay_on_kafka_event() */
        producer_dr_fn *on_delivery;
        producer_event_fn *on_kafka_event;
        const char **prod_props;   /* name, value pairs for prod_opts */
        struct pgstream *pg;       /* the replication connection, while a session lasts */
        bool streaming;            /* START_REPLICATION succeeded on pg */
        struct metrics *metrics;

        /* Who and where. */
        struct pgstream_system sys;
        char *tli_history;         /* this session's timeline history (TIMELINE_HISTORY), or NULL on timeline 1 */
        size_t tli_history_len;    /* bytes */
        struct preflight_result pre;
        char system_id[32];        /* of the first connection; a change stops the relay */
        char who[128];             /* the operator, for remedy logs */
        char *add_tables;          /* wal2json's add-tables option */

        struct relay_txn txn;
        struct relay_feedback fb;
        struct relay_stats stats;
        struct relay_standby standby;
        struct relay_limits limits;
        struct relay_nacks nacks;
        struct relay_watch watch;
        struct relay_round round;
        struct relay_eos eos;
        struct relay_stage stage;
        struct relay_reads reads;

        /*
         * The record just offered was not taken, and nothing was done for it:
         * its message is offered again after the next turn of the loop (a
         * wal2json line from the staging queue's head, a pgoutput event given
         * back). Set by what cannot go on without waiting: a Kafka commit in
         * flight (relay_eos.c), librdkafka's full queue (relay_produce()), a
         * topic's limit being read (relay_fit_topic()). The reader clears it.
         */
        bool held_back;
        bool kafka_full;           /* librdkafka's queue was full: nothing offered until the next wait */
        bool handling;             /* a turn handles what came, or relay_wait() serves: it must not be called */

        int failure;               /* enum relay_exit of the first failure, 0 if none */
        int pg_session_code;       /* how the last session ended (relay.c's SESSION_*) */
        bool producer_broken;      /* discard the producer before streaming again */
        const char *state;         /* one phrase for /readyz and systemd's STATUS= (relay_set_state()) */
        struct sdnotify notify;    /* what the service manager was told (relay_run() only) */
        bool notify_failing;       /* the last notification failed (logged once) */
};

/* relay.c: the loop */

/* relay_wait() flags. */
#define RELAY_WAIT_READ 0x1        /* also wake when the replication socket is readable */

/*
 * relay_wait() - the one wait. Sleeps until the stop pipe (a stop or a
 * reload), Kafka (delivery reports, events), HTTP, the replication socket
 * (while streaming: readable with RELAY_WAIT_READ, writable when output is
 * queued) or a deadline wants attention: @timeout_ms (ms; -1: none), the
 * next standby status update while streaming, libmicrohttpd's deadlines,
 * at most 1000 ms. Then serves every one of them: empties the stop pipe and
 * reloads, consumes and flushes the replication connection, serves delivery
 * reports, answers HTTP, sends a due standby status update, refreshes the
 * metrics. Every place that waits calls it; none has a poll() of its own.
 * Only relay.c calls it (the parts never wait; the unit tests do, as its
 * loop would). Returns 0, or -EIO after recording a lost replication
 * connection.
 */
int relay_wait(struct relay *r, int timeout_ms, unsigned flags);

/* relay_row.c: lines and rows */

/*
 * relay_handle_line() - decode and act on one XLogData @m, a wal2json line
 * (format-version 2; wal2json's README). With --plugin=pgoutput relay.c
 * gives the message to relay_pgo_line() instead.
 */
void relay_handle_line(struct relay *r, const struct replmsg *m);

/*
 * relay_handle_record() - act on one decoded record @rec (wal2json.h's form,
 * whichever plugin decoded it) that arrived in the XLogData starting at
 * @data_start (LSN, for the log).
 */
void relay_handle_record(struct relay *r, const struct w2j_record *rec, uint64_t data_start);

/*
 * relay_headers() - the CloudEvents binary-mode headers of a row of @rec,
 * from what @row has (a row that failed extraction may lack the ID or
 * type), then the row's own headers; @source (@source_size bytes) receives
 * ce_source. Returns the count written to @h (at most MAX_HEADERS).
 */
size_t relay_headers(struct relay *r, const struct w2j_record *rec, const struct outbox_row *row,
                     struct producer_header *h, char *source, size_t source_size);

/* relay_watch.c: what the relay keeps true */

/* relay_watch_init() - the mapping and its digest. Returns 0. */
int relay_watch_init(struct relay *r);

/*
 * relay_watch_before_stream() - before START_REPLICATION: compare the slot
 * (@slot, just read) with its newest checkpoint; stop (exit 3) on a slot
 * moved by someone else or a checkpoint of another mapping unless the
 * operator accepted them; write a checkpoint of the slot's position when
 * there is none (or it was accepted). The newest checkpoint goes to
 * @ret_newest (its lsn LSN_INVALID when there is none, or it could not be
 * read and the stream goes on without it: never with --exactly-once), the
 * resume point of --exactly-once (relay_eos_resume()). Returns 0, or a
 * negative errno after recording the failure.
 */
int relay_watch_before_stream(struct relay *r, const struct preflight_slot *slot, struct checkpoint *ret_newest);

/*
 * relay_watch_checkpoint_target() - the LSN a checkpoint should now be
 * written up to: what the ledger has acknowledged and the side connection
 * verified, never less than the newest checkpoint claimed; LSN_INVALID
 * when none is due (one in flight, the newest unknown, nothing new, a
 * failure). Pure.
 */
uint64_t relay_watch_checkpoint_target(const struct relay *r);

/*
 * relay_watch_checkpoint_committed() - --exactly-once: a Kafka transaction
 * holding a checkpoint of @lsn was committed; it counts as the newest
 * acknowledged checkpoint (the watch's, which it alone writes).
 */
void relay_watch_checkpoint_committed(struct relay *r, uint64_t lsn);

/*
 * relay_watch_verify_topic() - the checkpoint topic, if it exists, is one
 * whose records the relay can trust (checkpoint_topic_judge()). Returns 0;
 * -EAGAIN when the cluster did not answer (the reason in @err); -EINVAL
 * after recording a failure no retry cures (exit 3).
 */
int relay_watch_verify_topic(struct relay *r, char *err, size_t errlen);

/*
 * relay_watch_read_newest() - the newest checkpoint record of the slot of
 * r->conf (key checkpoint_key() of r->system_id, r->pre.dbname), read with
 * read_committed for up to 30 s: *@ret_found, and the record in *@ret_c
 * when found (format: checkpoint.h). A missing topic is not found.
 * Returns 0; -EAGAIN when Kafka did not answer in time (the reason in
 * @err, @errlen bytes); -EINVAL after recording a failure no retry cures
 * (a topic that cannot be trusted, a record that is not a checkpoint, a
 * refused read).
 */
int relay_watch_read_newest(struct relay *r, struct checkpoint *ret_c, bool *ret_found, char *err,
                            size_t errlen);

/*
 * relay_watch_ensure_topic() - `slot create`: the checkpoint topic is there
 * (created with durable settings if missing) and can be trusted. Returns 0
 * or -EIO (recorded).
 */
int relay_watch_ensure_topic(struct relay *r);

/*
 * relay_watch_send_checkpoint() - produce a checkpoint record of @lsn
 * (checkpoint.h's format) outside any Kafka transaction; its delivery
 * report (relay_watch_checkpoint_report()) makes it acknowledged. Never
 * waits. Returns 0, -ENOBUFS (librdkafka's queue is full: try again after
 * a wait), or -EIO (recorded).
 */
int relay_watch_send_checkpoint(struct relay *r, uint64_t lsn);

/* relay_watch_standby() - a warm standby's look, now and then: the active relay's mapping is this one's. */
int relay_watch_standby(struct relay *r);

/* relay_watch_stream_started() - START_REPLICATION succeeded: rounds and topic checks begin. */
void relay_watch_stream_started(struct relay *r);

/*
 * relay_watch_serve() - after poll(), after relay_round_serve(): the
 * checkpoint read again if it could not be, the checkpoint topic's
 * settings, the checkpoint chase (without --exactly-once).
 */
void relay_watch_serve(struct relay *r);

/* relay_watch_checkpoint_report() - the delivery report of a checkpoint record. */
void relay_watch_checkpoint_report(struct relay *r, const struct producer_report *rep);

/* relay_report.c: the server and the operator */

/*
 * relay_confirmable_lsn() - the LSN the relay may confirm now: the least of
 * the ledger's flush LSN, the newest acknowledged checkpoint and the
 * verified LSN, never less than what was confirmed already.
 */
uint64_t relay_confirmable_lsn(const struct relay *r);

/* relay_confirm_blocked() - why nothing new is confirmed now, for /readyz, or NULL. */
const char *relay_confirm_blocked(const struct relay *r);

/*
 * relay_publication_state() - pgoutput's publication as this session's
 * preflight read it (r->pre), in the checkpoint's form (struct checkpoint,
 * publication) into @buf (CHECKPOINT_PUBLICATION_MAX bytes); "" with
 * wal2json or before a preflight. Pure.
 */
void relay_publication_state(const struct relay *r, char buf[CHECKPOINT_PUBLICATION_MAX]);

/*
 * relay_checkpoint_value() - @c (its LSN fields set by the caller) completed
 * with this relay's digest, mapping, publication state, @mode, writer and
 * the time now, and
 * formatted into @value (@size bytes, CHECKPOINT_VALUE_MAX suffice). Returns
 * the bytes written, or -EIO after relay_fail() when it does not fit.
 */
int relay_checkpoint_value(struct relay *r, struct checkpoint *c, const char *mode, char *value, size_t size);

/*
 * relay_keep_answered() - without waiting: serve delivery reports, flush the
 * replication connection's output and send a due standby status update.
 * For a blocking call repeated in a loop (an abort's) that must not wait
 * in relay_wait().
 */
void relay_keep_answered(struct relay *r);

/* relay_fail() - record the first failure (an enum relay_exit) and log it; later ones are logged only. */
void relay_fail(struct relay *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* relay_send_status() - a standby status update now. Returns 0 or -EIO (recorded). */
int relay_send_status(struct relay *r);

/* relay_maybe_send_status() - on the interval, on request, soon after the flush LSN moved. */
int relay_maybe_send_status(struct relay *r);

/* relay_status_due_ms() - ms until relay_maybe_send_status() would send (0: now). */
int64_t relay_status_due_ms(const struct relay *r);

/*
 * relay_note_reply_request() - a primary keepalive asked for a reply; a few in
 * a row, each soon after the relay's last standby status update, mean the
 * server is shutting down and waits for the relay (r->fb.server_stopping_ms).
 */
void relay_note_reply_request(struct relay *r, uint64_t wal_end);

/*
 * relay_note_standby() - a look found the slot held by another process,
 * @holder says by whom (preflight_slot_explain()'s sentence). Logs the change
 * to standby, or to another holder, once; then a reminder every
 * RELAY_STANDBY_REMIND_MS; counts the look.
 */
void relay_note_standby(struct relay *r, const char *holder);

/* relay_note_active() - streaming starts: logs the end of a standby, if it was one. */
void relay_note_active(struct relay *r);

#define RELAY_STANDBY_REMIND_MS (10 * 60 * 1000)

/*
 * relay_set_state() - @state (a static phrase) is what the relay does now:
 * /readyz's reason and the service manager's STATUS= (sent at once, so that
 * `systemctl status` shows "connecting" while a connection attempt blocks).
 */
void relay_set_state(struct relay *r, const char *state);

/*
 * relay_notify_turn() - the loop turned (relay_wait()): tell the service
 * manager STOPPING=1 once a stop is requested, READY=1 the first time the
 * relay streams or waits as a warm standby, and WATCHDOG=1 when one is due.
 * Only relay_wait() calls it: a relay stuck anywhere else stops the pings
 * and systemd's WatchdogSec= restarts it.
 */
void relay_notify_turn(struct relay *r);

/* relay_notify_due_ms() - ms until the next WATCHDOG=1 is due (0: now; -1: no watchdog). */
int64_t relay_notify_due_ms(const struct relay *r);

/* relay_publish_metrics() - progress clocks, the stats line, and the numbers /metrics serves. */
void relay_publish_metrics(struct relay *r);

/* Clocks: monotonic ms, and wall-clock µs since the Unix epoch. */
int64_t relay_mono_ms(void);
int64_t relay_wall_us(void);

#endif
