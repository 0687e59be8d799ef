/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Metrics and health over HTTP, for slot monitoring: GET /metrics answers in
 * the Prometheus text exposition format (version 0.0.4); GET /healthz answers
 * 200 "ok" whenever it is answered at all (the process lives and its loop
 * turns); GET /readyz answers 200 only while the relay streams, a Kafka
 * broker is connected and progress was made within the ready timeout, 503
 * with the reason otherwise. Served by GNU
 * libmicrohttpd without threads of its own: its epoll descriptor joins the
 * relay's poll(), so handlers read the last snapshot without locks. Knows
 * nothing of PostgreSQL or Kafka beyond the numbers it is given.
 */
#ifndef RELAY_METRICS_H
#define RELAY_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Monotonic counters, reported as *_total. */
struct metrics_counters {
        uint64_t published;            /* messages handed to Kafka */
        uint64_t acked;                /* successful delivery reports */
        uint64_t dead_lettered;        /* rows sent to the dead-letter topic */
        uint64_t row_errors;           /* rows that stopped the relay */
        uint64_t skipped_transactions; /* skipped by --skip-transaction */
        uint64_t skipped_rows;
        uint64_t ignored;              /* records not published (update, delete, other tables, ...) */
        uint64_t nontx_messages;       /* non-transactional logical messages with --message-prefix */
        uint64_t connects;             /* replication streams started */
        uint64_t reconnects;           /* new connections after a lost stream; not a standby's looks */
        uint64_t standby_checks;       /* looks at a slot another process holds (warm standby) */
        uint64_t refused_batches;      /* topics whose batches the broker refused as too large, each time */
        uint64_t producer_restarts;
        uint64_t queue_full;           /* produces refused by librdkafka's full queue (the row held back) */
        uint64_t status_updates;
};

/*
 * A counter with one label whose values come from data (topics from rows,
 * error names from Kafka): at most @cap distinct values get their own
 * series; the rest are added to one series labelled METRICS_OTHER, so a
 * scrape stays bounded whatever the rows say.
 */
#define METRICS_LABEL_MAX 255          /* bytes of a label value; longer ones are folded */
#define METRICS_LABELS_CAP_MAX 1024
#define METRICS_OTHER "_other"

struct metrics_labels;

/*
 * metrics_labels_new() - an empty labelled counter keeping at most @cap
 * (1..METRICS_LABELS_CAP_MAX) values apart. Returns NULL for a bad @cap or
 * when out of memory; free with metrics_labels_free().
 */
struct metrics_labels *metrics_labels_new(unsigned cap);

/* metrics_labels_free() - NULL-safe; returns NULL. */
struct metrics_labels *metrics_labels_free(struct metrics_labels *f);

/*
 * metrics_labels_add() - add @n to the series of @label (NUL-terminated,
 * copied), or to METRICS_OTHER once @cap values are taken or @label is
 * longer than METRICS_LABEL_MAX bytes. O(cap) worst case, O(1) when the
 * same label repeats.
 */
void metrics_labels_add(struct metrics_labels *f, const char *label, uint64_t n);

/* metrics_labels_total() - the sum over every series, METRICS_OTHER included. */
uint64_t metrics_labels_total(const struct metrics_labels *f);

/* metrics_labels_get() - the count of @label (METRICS_OTHER for the folded ones); 0 if unseen. */
uint64_t metrics_labels_get(const struct metrics_labels *f, const char *label);

/* Commit-to-acknowledgement latency, a Prometheus histogram in seconds. */
#define METRICS_LATENCY_BUCKETS 14
extern const double metrics_latency_bounds[METRICS_LATENCY_BUCKETS]; /* upper bounds, seconds */

struct metrics_histogram {
        uint64_t buckets[METRICS_LATENCY_BUCKETS]; /* observations <= the bound (not cumulative) */
        uint64_t count;                            /* all observations, +Inf included */
        double sum;                                /* seconds */
};

/* metrics_histogram_observe() - one observation of @seconds (negative counts as 0). */
void metrics_histogram_observe(struct metrics_histogram *h, double seconds);

struct metrics_snapshot {
        struct metrics_counters c;
        uint64_t flush_lsn;            /* LSN confirmed (or about to be) to the server */
        uint64_t write_lsn;            /* LSN of the newest change received */
        uint64_t server_lsn;           /* newest WAL end the server reported */
        uint64_t outstanding;          /* messages not yet acknowledged */
        uint64_t inflight_bytes;       /* key + value bytes not yet acknowledged */
        int64_t oldest_unacked_ms;     /* age of the oldest transaction with unacknowledged messages */
        int64_t since_confirm_ms;      /* since the confirmed LSN last advanced or caught up; -1: never */
        int64_t since_progress_ms;     /* since the last ack, confirm or idle catch-up; -1: never */
        int64_t ready_timeout_ms;      /* /readyz: longest tolerated since_progress_ms */
        int brokers_up;                /* Kafka brokers connected; -1: not known yet */
        bool streaming;                /* a replication stream is open */
        bool standby;                  /* role: another process holds the slot (warm standby) */
        const char *state;             /* one word for /readyz: "streaming", "standby", ... */
        const char *blocked;           /* why nothing new is confirmed now (/readyz 503), or NULL */
        uint64_t checkpoint_lsn;       /* LSN of the newest checkpoint record Kafka acknowledged */
        const struct metrics_labels *published_by_topic; /* acknowledged rows per topic; borrowed */
        const struct metrics_labels *errors_by_code;     /* failed delivery reports per error name */
        const struct metrics_histogram *latency;         /* commit to acknowledgement */
        bool exactly_once;             /* the Kafka transaction series below are served */
        uint64_t txn_committed;        /* Kafka transactions committed */
        uint64_t txn_aborted;          /* Kafka transactions aborted */
        uint64_t txn_records;          /* records in committed Kafka transactions */
        const struct metrics_histogram *txn_commit_latency; /* seconds per commit */
};

struct metrics;

/*
 * metrics_new() - listen on @address ("HOST:PORT", "[V6]:PORT" or ":PORT"
 * for all addresses). @slot labels the metrics. Returns 0 and *ret_m (owned
 * by the caller, metrics_free()), or -EINVAL with the reason in @err for a
 * malformed address, -EADDRINUSE/-EIO if it cannot listen.
 */
int metrics_new(const char *address, const char *slot, struct metrics **ret_m, char *err, size_t errlen);

/* metrics_free() - NULL-safe; returns NULL. */
struct metrics *metrics_free(struct metrics *m);

/* metrics_fd() - descriptor to poll() for POLLIN; then call metrics_serve(). */
int metrics_fd(const struct metrics *m);

/*
 * metrics_timeout_ms() - milliseconds until libmicrohttpd needs
 * metrics_serve() even if metrics_fd() stays quiet (an idle connection's
 * timeout, a response left half sent, a connection's 10 s for its one
 * request running out), or -1 if it has no deadline. The
 * caller's poll() must not sleep longer: connections are closed on their
 * timeout only inside metrics_serve().
 */
int metrics_timeout_ms(const struct metrics *m);

/*
 * metrics_serve() - answer pending HTTP requests and close timed-out
 * connections, without blocking. Call it after every poll() whose timeout
 * was bounded by metrics_timeout_ms(), whether metrics_fd() was readable or not.
 */
void metrics_serve(struct metrics *m);

/* metrics_update() - the numbers the next request will see (copied). */
void metrics_update(struct metrics *m, const struct metrics_snapshot *s);

/*
 * metrics_format() - write the Prometheus text (exposition format 0.0.4,
 * prometheus.io/docs/instrumenting/exposition_formats) for @s into @buf
 * (@size bytes). Returns the length, or -ENOSPC if @buf is too small. Pure.
 */
int metrics_format(const struct metrics_snapshot *s, const char *slot, char *buf, size_t size);

/*
 * metrics_ready() - whether @s is ready (see /readyz above); when not, the
 * reason as one line in @why (@size bytes). Pure.
 */
bool metrics_ready(const struct metrics_snapshot *s, char *why, size_t size);

#endif
