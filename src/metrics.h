/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Metrics and health over HTTP, for slot monitoring: GET /metrics answers in
 * the Prometheus text exposition format (version 0.0.4), GET /healthz answers
 * 200 "ok" while the relay streams and 503 otherwise. Served by GNU
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
        uint64_t connects;             /* replication streams started */
        uint64_t reconnects;
        uint64_t producer_restarts;
        uint64_t status_updates;
};

struct metrics_snapshot {
        struct metrics_counters c;
        uint64_t flush_lsn;            /* LSN confirmed (or about to be) to the server */
        uint64_t write_lsn;            /* LSN of the newest change received */
        uint64_t server_lsn;           /* newest WAL end the server reported */
        uint64_t outstanding;          /* messages not yet acknowledged */
        uint64_t inflight_bytes;       /* key + value bytes not yet acknowledged */
        int64_t oldest_unacked_ms;     /* age of the oldest transaction with unacknowledged messages */
        bool streaming;                /* a replication stream is open */
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

/* metrics_serve() - answer pending HTTP requests without blocking. */
void metrics_serve(struct metrics *m);

/* metrics_update() - the numbers the next request will see (copied). */
void metrics_update(struct metrics *m, const struct metrics_snapshot *s);

/*
 * metrics_format() - write the Prometheus text for @s into @buf (@size
 * bytes). Returns the length, or -ENOSPC if @buf is too small. Pure; for tests.
 */
int metrics_format(const struct metrics_snapshot *s, const char *slot, char *buf, size_t size);

#endif
