// SPDX-License-Identifier: Apache-2.0
/*
 * The orchestrator: one poll() loop over the replication socket, librdkafka's
 * delivery-report pipe, the stop pipe and the status-update timer. Reads
 * XLogData, decodes wal2json lines, publishes outbox inserts, feeds the LSN
 * ledger, and reports the ledger's flush LSN in standby status updates. The
 * only module that joins the leaf modules and logs on their behalf.
 */
#include "relay.h"

#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ledger.h"
#include "log.h"
#include "lsn.h"
#include "pgstream.h"
#include "preflight.h"
#include "producer.h"
#include "record.h"
#include "replmsg.h"
#include "wal2json.h"

#define ERRLEN 1024
#define READ_BUDGET 4096  /* CopyData messages handled per loop turn before polling again */

enum { HDR_SPECVERSION, HDR_ID, HDR_TYPE, HDR_SOURCE, HDR_TIME, HDR_CONTENT_TYPE, HDR_PGLSN,
       HDR_PGXID, HDR_COUNT };

struct relay {
        const struct relay_config *conf;
        volatile sig_atomic_t *stop;
        int stop_fd;

        struct record_spec *spec;
        struct w2j_decoder *dec;
        struct ledger *ledger;
        struct producer *prod;
        struct pgstream *pg;
        struct pgstream_system sys;
        struct preflight_result pre;

        int64_t status_interval_ms;
        int64_t last_status_ms;
        bool reply_pending;
        uint64_t write_lsn;       /* highest XLogData start received */
        uint64_t sent_flush_lsn;  /* flush LSN of the last status update */
        uint64_t inflight_bytes;

        /* The open transaction, from its B line. */
        bool skip_txn;            /* already confirmed: a resend after reconnect */
        uint32_t xid;
        uint64_t end_lsn;
        int64_t commit_time_us;
        char lsn_text[LSN_STRLEN];
        char xid_text[16];
        char time_text[64];

        int failure;              /* enum relay_exit of the first failure, 0 if none */

        uint64_t published, acked, ignored[W2J_UNKNOWN + 1];
};

static int64_t mono_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_us(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Record the first failure and log it; later ones are logged only. */
static void fail(struct relay *r, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void fail(struct relay *r, int code, const char *fmt, ...)
{
        char msg[2048];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        log_error("%s", msg);
        if (!r->failure)
                r->failure = code;
}

static const char *action_name(enum w2j_action a)
{
        static const char *const names[] = {"begin", "commit", "insert", "update", "delete",
                                            "truncate", "message", "unknown action"};
        return names[a];
}

static bool is_outbox(const struct relay *r, const char *schema, const char *table)
{
        for (size_t i = 0; i < r->conf->ntables; i++)
                if (strcmp(r->conf->tables[i].table, table) == 0 &&
                    strcmp(r->conf->tables[i].schema, schema) == 0)
                        return true;
        return false;
}

/* RFC 3339 UTC with microseconds, e.g. 2026-11-30T04:07:34.336545Z. */
static void format_rfc3339(int64_t us, char *buf, size_t size)
{
        time_t secs = (time_t)(us >= 0 ? us / 1000000 : (us - 999999) / 1000000);
        int64_t frac = us - (int64_t)secs * 1000000;
        struct tm tm;

        gmtime_r(&secs, &tm);
        snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%06d" "Z", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)frac);
}

/* Append @s percent-encoded (RFC 3986 unreserved characters kept). */
static size_t append_pct(char *buf, size_t o, size_t size, const char *s)
{
        static const char hex[] = "0123456789ABCDEF";

        for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < size; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    *p == '-' || *p == '.' || *p == '_' || *p == '~') {
                        buf[o++] = (char)*p;
                } else {
                        buf[o++] = '%';
                        buf[o++] = hex[*p >> 4];
                        buf[o++] = hex[*p & 15];
                }
        }
        buf[o] = '\0';
        return o;
}

/* ce_source: postgresql://<system identifier>/<database>/<schema>.<table>, percent-encoded. */
static size_t format_source(const struct relay *r, const char *schema, const char *table, char *buf,
                            size_t size)
{
        size_t o = (size_t)snprintf(buf, size, "postgresql://%s/", r->sys.system_id);

        o = append_pct(buf, o, size, r->pre.dbname);
        if (o + 1 < size)
                buf[o++] = '/';
        o = append_pct(buf, o, size, schema);
        if (o + 1 < size)
                buf[o++] = '.';
        return append_pct(buf, o, size, table);
}

static bool backpressured(const struct relay *r)
{
        return (int64_t)ledger_outstanding(r->ledger) >= r->conf->max_inflight_messages ||
               (int64_t)r->inflight_bytes >= r->conf->max_inflight_bytes;
}

static int send_status(struct relay *r)
{
        char err[ERRLEN], a[LSN_STRLEN], b[LSN_STRLEN];
        uint64_t flush = ledger_flush_lsn(r->ledger);
        uint64_t write = r->write_lsn > flush ? r->write_lsn : flush;

        if (pgstream_send_status(r->pg, write, flush, wall_us(), err, sizeof(err)) < 0) {
                fail(r, RELAY_EXIT_RETRY, "could not send standby status update: %s", err);
                return -EIO;
        }
        if (flush != r->sent_flush_lsn)
                log_debug("confirmed flush LSN %s (write %s, %" PRIu64 " messages outstanding)",
                          lsn_format(flush, a), lsn_format(write, b), ledger_outstanding(r->ledger));
        r->sent_flush_lsn = flush;
        r->last_status_ms = mono_ms();
        r->reply_pending = false;
        return 0;
}

static int maybe_send_status(struct relay *r)
{
        if (r->reply_pending || mono_ms() - r->last_status_ms >= r->status_interval_ms)
                return send_status(r);
        return 0;
}

/* Delivery report. @locality: the main thread, from producer_poll(). */
static void on_delivery(void *ctx, uint64_t ticket, size_t bytes, int err, const char *errstr,
                        const char *topic, const char *work_id, const char *lsn_text)
{
        struct relay *r = ctx;

        if (err == 0) {
                if (ledger_ack(r->ledger, ticket) == 0) {
                        r->inflight_bytes -= bytes < r->inflight_bytes ? bytes : r->inflight_bytes;
                        r->acked++;
                }
                return;
        }
        switch (err) {
        case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
        case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
        case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
        case RD_KAFKA_RESP_ERR_INVALID_RECORD:
                fail(r, RELAY_EXIT_DATA,
                     "Kafka refused the message of work ID \"%s\" for topic \"%s\" (transaction "
                     "ending at LSN %s): %s; nothing from this transaction on is confirmed; fix the "
                     "topic or row, then restart", work_id, topic, lsn_text, errstr);
                break;
        default:
                fail(r, RELAY_EXIT_RETRY,
                     "delivery of work ID \"%s\" to topic \"%s\" (transaction ending at LSN %s) "
                     "failed: %s; nothing from this transaction on is confirmed and it will be sent "
                     "again on restart", work_id, topic, lsn_text, errstr);
                break;
        }
}

/* Error event from librdkafka. @locality: the main thread, from producer_poll(). */
static void on_kafka_error(void *ctx, int fatal, int err, const char *reason)
{
        struct relay *r = ctx;
        char buf[512];

        if (fatal) {
                int code = producer_fatal_error(r->prod, buf, sizeof(buf));

                fail(r, RELAY_EXIT_RETRY, "fatal Kafka producer error: %s: %s; unconfirmed messages "
                     "will be sent again on restart", rd_kafka_err2name((rd_kafka_resp_err_t)code), buf);
                return;
        }
        log_warning("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/* Wait up to @ms for delivery reports, answering the server meanwhile. */
static void service_kafka(struct relay *r, int ms)
{
        struct pollfd pfd = {producer_fd(r->prod), POLLIN, 0};

        if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
                return;
        producer_poll(r->prod);
        maybe_send_status(r);
}

static void publish_row(struct relay *r, const struct w2j_record *rec)
{
        struct outbox_row row;
        struct producer_header h[HDR_COUNT];
        char err[ERRLEN], source[1024];
        ledger_ticket ticket;
        size_t nh = 0;
        int ret;

        ret = record_extract(r->spec, rec, &row, err, sizeof(err));
        if (ret < 0) {
                const char *id = NULL;

                for (size_t i = 0; i < rec->ncolumns; i++)
                        if (strcmp(rec->columns[i].name, r->conf->id_column) == 0)
                                id = rec->columns[i].value.ptr;
                fail(r, RELAY_EXIT_DATA,
                     "cannot publish the row with work ID \"%s\" of table \"%s\".\"%s\" at LSN %s "
                     "(transaction %u ending at LSN %s): %s; nothing from this transaction on is "
                     "confirmed; fix the row (or the relay's options) and restart",
                     id ? id : "(none)", rec->schema, rec->table, lsn_format(rec->lsn, source), r->xid,
                     r->lsn_text, err);
                return;
        }
        ret = ledger_add_message(r->ledger, &ticket);
        if (ret < 0) {
                fail(r, RELAY_EXIT_RETRY, "insert at LSN %s outside a transaction: the stream is "
                     "malformed", lsn_format(rec->lsn, source));
                return;
        }
        format_source(r, rec->schema, rec->table, source, sizeof(source));
        h[nh++] = (struct producer_header){"ce_specversion", "1.0", 3};
        h[nh++] = (struct producer_header){"ce_id", row.id->ptr, row.id->len};
        if (row.type && !row.type->is_null)
                h[nh++] = (struct producer_header){"ce_type", row.type->ptr, row.type->len};
        h[nh++] = (struct producer_header){"ce_source", source, strlen(source)};
        h[nh++] = (struct producer_header){"ce_time", r->time_text, strlen(r->time_text)};
        h[nh++] = (struct producer_header){"content-type", "application/json", 16};
        h[nh++] = (struct producer_header){"ce_pglsn", r->lsn_text, strlen(r->lsn_text)};
        h[nh++] = (struct producer_header){"ce_pgxid", r->xid_text, strlen(r->xid_text)};
        for (;;) {
                ret = producer_send(r->prod, row.topic, row.key->ptr, row.key->len, row.payload->ptr,
                                    row.payload->len, r->commit_time_us / 1000, h, nh, ticket, err,
                                    sizeof(err));
                if (ret != -ENOBUFS || r->failure)
                        break;
                /* librdkafka's queue is full: serve delivery reports, keep the server answered. */
                service_kafka(r, 100);
        }
        if (ret < 0) {
                ledger_cancel_message(r->ledger, ticket);
                if (ret == -ENOBUFS)
                        return;
                fail(r, ret == -EMSGSIZE || ret == -ENOENT ? RELAY_EXIT_DATA : RELAY_EXIT_RETRY,
                     "cannot hand the message of work ID \"%.*s\" to Kafka for topic \"%s\" "
                     "(transaction ending at LSN %s): %s", (int)row.id->len, row.id->ptr, row.topic,
                     r->lsn_text, err);
                return;
        }
        r->inflight_bytes += row.key->len + row.payload->len;
        r->published++;
}

static void handle_line(struct relay *r, const struct replmsg *m)
{
        struct w2j_record rec;
        char a[LSN_STRLEN];
        int ret;

        ret = w2j_decode(r->dec, m->data, m->data_len, &rec);
        if (ret < 0) {
                fail(r, RELAY_EXIT_DATA,
                     "cannot decode the wal2json line at LSN %s (%s); nothing from it on is "
                     "confirmed; first 200 bytes: %.*s", lsn_format(m->data_start, a),
                     ret == -E2BIG ? "line too long" : ret == -ENOMEM ? "out of memory" : "invalid JSON",
                     (int)(m->data_len < 200 ? m->data_len : 200), m->data);
                return;
        }
        switch (rec.action) {
        case W2J_BEGIN:
                r->skip_txn = rec.next_lsn <= ledger_flush_lsn(r->ledger);
                if (r->skip_txn) {
                        log_debug("skipping transaction %u ending at %s: already confirmed", rec.xid,
                                  lsn_format(rec.next_lsn, a));
                        break;
                }
                ret = ledger_begin(r->ledger, rec.next_lsn);
                if (ret < 0) {
                        fail(r, RELAY_EXIT_RETRY, "transaction %u ending at LSN %s begins %s: the "
                             "stream is malformed", rec.xid, lsn_format(rec.next_lsn, a),
                             ret == -EBUSY ? "inside another" : "before the previous one ended");
                        break;
                }
                r->xid = rec.xid;
                r->end_lsn = rec.next_lsn;
                r->commit_time_us = rec.commit_time_us;
                lsn_format(rec.next_lsn, r->lsn_text);
                snprintf(r->xid_text, sizeof(r->xid_text), "%u", rec.xid);
                format_rfc3339(rec.commit_time_us, r->time_text, sizeof(r->time_text));
                break;
        case W2J_COMMIT:
                if (r->skip_txn) {
                        r->skip_txn = false;
                        break;
                }
                ret = ledger_commit(r->ledger, rec.next_lsn);
                if (ret < 0)
                        fail(r, RELAY_EXIT_RETRY, "commit of transaction %u at LSN %s does not match "
                             "its begin: the stream is malformed", rec.xid, lsn_format(rec.next_lsn, a));
                break;
        case W2J_INSERT:
                if (r->skip_txn)
                        break;
                if (is_outbox(r, rec.schema, rec.table)) {
                        publish_row(r, &rec);
                        break;
                }
                /* fall through */
        default:
                if (r->ignored[rec.action]++ == 0)
                        log_debug("ignoring %s records (first at LSN %s)", action_name(rec.action),
                                  lsn_format(m->data_start, a));
                break;
        }
}

/*
 * Read what the server sent, within the in-flight bounds. @draining: the
 * relay is stopping; lines are dropped unread (never confirmed) and only
 * reply requests are served.
 */
static int read_stream(struct relay *r, bool draining)
{
        char err[ERRLEN], state[6] = "";

        for (int budget = READ_BUDGET; budget > 0 && !r->failure; budget--) {
                const char *buf;
                size_t len;
                struct replmsg m;
                int ret;

                if (!draining && backpressured(r))
                        return 0;
                ret = pgstream_read(r->pg, &buf, &len, err, sizeof(err), state);
                if (ret == 0)
                        return 0;
                if (ret < 0) {
                        char a[LSN_STRLEN];

                        fail(r, RELAY_EXIT_RETRY, "replication stream ended at LSN %s: %s%s%s%s",
                             lsn_format(r->write_lsn, a), err, state[0] ? " (SQLSTATE " : "", state,
                             state[0] ? ")" : "");
                        return ret;
                }
                if (replmsg_parse(buf, len, &m) < 0) {
                        fail(r, RELAY_EXIT_RETRY, "unexpected replication message of %zu bytes, type "
                             "0x%02x", len, len ? (unsigned char)buf[0] : 0);
                        return -EBADMSG;
                }
                if (m.kind == REPLMSG_KEEPALIVE) {
                        if (!draining)
                                ledger_keepalive(r->ledger, m.wal_end);
                        if (m.reply_requested)
                                r->reply_pending = true;
                        continue;
                }
                if (draining)
                        continue;
                if (m.data_start > r->write_lsn)
                        r->write_lsn = m.data_start;
                handle_line(r, &m);
        }
        return 1;  /* budget used up: more may be buffered */
}

static int wait_events(struct relay *r, bool read_pg, int timeout_ms)
{
        struct pollfd pfd[3] = {
                {producer_fd(r->prod), POLLIN, 0},
                {r->stop_fd, POLLIN, 0},
                {pgstream_socket(r->pg), 0, 0},
        };
        char err[ERRLEN];

        if (read_pg)
                pfd[2].events |= POLLIN;
        if (pgstream_want_write(r->pg))
                pfd[2].events |= POLLOUT;
        if (poll(pfd, 3, timeout_ms) < 0 && errno != EINTR)
                return -errno;
        if (pfd[2].revents & (POLLIN | POLLERR | POLLHUP)) {
                if (pgstream_consume(r->pg, err, sizeof(err)) < 0) {
                        fail(r, RELAY_EXIT_RETRY, "lost the replication connection: %s", err);
                        return -EIO;
                }
        }
        if (pfd[2].revents & POLLOUT)
                pgstream_flush(r->pg);
        return 0;
}

static int next_timeout(const struct relay *r)
{
        int64_t left = r->last_status_ms + r->status_interval_ms - mono_ms();

        if (left < 0)
                left = 0;
        return (int)(left > 1000 ? 1000 : left);
}

static void stream(struct relay *r)
{
        while (!r->failure && !*r->stop) {
                int more = read_stream(r, false);

                if (more < 0)
                        break;
                producer_poll(r->prod);
                if (maybe_send_status(r) < 0)
                        break;
                if (wait_events(r, !backpressured(r), more > 0 ? 0 : next_timeout(r)) < 0)
                        break;
        }
}

/* Stop: wait for acknowledgements (bounded), keep answering the server, report, end the copy. */
static void finish(struct relay *r)
{
        int64_t deadline = mono_ms() + (r->failure ? 0 : r->conf->shutdown_timeout_ms);
        char err[ERRLEN], a[LSN_STRLEN];
        bool connected = r->failure != RELAY_EXIT_RETRY || true;

        if (!r->failure)
                log_info("stopping: waiting up to %" PRId64 " ms for %" PRIu64 " outstanding "
                         "acknowledgements", r->conf->shutdown_timeout_ms, ledger_outstanding(r->ledger));
        while (ledger_outstanding(r->ledger) > 0 && mono_ms() < deadline) {
                int64_t left = deadline - mono_ms();
                int t = next_timeout(r);

                if (left < t)
                        t = (int)left;
                if (wait_events(r, true, t) < 0 || read_stream(r, true) < 0)
                        break;
                producer_poll(r->prod);
                if (maybe_send_status(r) < 0)
                        break;
        }
        if (ledger_outstanding(r->ledger) > 0)
                log_warning("stopping with %" PRIu64 " messages unacknowledged: they will be sent "
                            "again on the next start", ledger_outstanding(r->ledger));
        (void)connected;
        if (send_status(r) == 0) {
                if (pgstream_finish(r->pg, 5000, err, sizeof(err)) < 0)
                        log_warning("ending the replication stream: %s", err);
        }
        log_info("stopped: %" PRIu64 " messages published, %" PRIu64 " acknowledged, confirmed "
                 "flush LSN %s", r->published, r->acked, lsn_format(ledger_flush_lsn(r->ledger), a));
}

static int build_plugin_options(const struct relay_config *conf, char **ret_tables)
{
        size_t size = 1, o = 0;
        char *buf;

        for (size_t i = 0; i < conf->ntables; i++)
                size += 2 * (strlen(conf->tables[i].schema) + strlen(conf->tables[i].table)) + 3;
        buf = malloc(size);
        if (!buf)
                return -ENOMEM;
        for (size_t i = 0; i < conf->ntables; i++) {
                int n;

                if (i)
                        buf[o++] = ',';
                n = w2j_escape_table_name(conf->tables[i].schema, buf + o, size - o);
                if (n < 0)
                        goto fail;
                o += (size_t)n;
                buf[o++] = '.';
                n = w2j_escape_table_name(conf->tables[i].table, buf + o, size - o);
                if (n < 0)
                        goto fail;
                o += (size_t)n;
        }
        buf[o] = '\0';
        *ret_tables = buf;
        return 0;
fail:
        free(buf);
        return -ENOSPC;
}

static int start_stream(struct relay *r, const char *add_tables)
{
        const char *opts[] = {
                "format-version", "2",       "include-transaction", "true",
                "include-lsn", "true",       "include-xids", "true",
                "include-timestamp", "true", "include-type-oids", "false",
                "add-tables", add_tables,
        };
        struct pgstream_start st = {r->conf->slot, opts, sizeof(opts) / sizeof(opts[0]) / 2};
        char err[ERRLEN], state[6] = "", a[LSN_STRLEN];
        int ret;

        ret = pgstream_connect(r->conf->conninfo, &r->pg, &r->sys, err, sizeof(err));
        if (ret < 0) {
                fail(r, RELAY_EXIT_RETRY, "cannot open the replication connection: %s", err);
                return ret;
        }
        ret = pgstream_start(r->pg, &st, err, sizeof(err), state);
        if (ret < 0) {
                bool in_use = strcmp(state, "55006") == 0;

                fail(r, in_use ? RELAY_EXIT_RETRY : RELAY_EXIT_ENVIRONMENT,
                     "cannot start replication from slot \"%s\": %s%s%s%s", r->conf->slot, err,
                     state[0] ? " (SQLSTATE " : "", state, state[0] ? ")" : "");
                return ret;
        }
        log_info("streaming from slot \"%s\" (confirmed flush LSN %s) of system %s, database \"%s\"",
                 r->conf->slot, lsn_format(ledger_flush_lsn(r->ledger), a), r->sys.system_id,
                 r->sys.dbname);
        r->last_status_ms = mono_ms();
        return 0;
}

int relay_run(const struct relay_config *conf, int stop_fd, volatile sig_atomic_t *stop)
{
        struct relay r = {.conf = conf, .stop = stop, .stop_fd = stop_fd};
        const char *const *tcols;
        size_t ntcols;
        char err[ERRLEN], *add_tables = NULL;
        int ret;

        ret = record_spec_new(conf->id_column, conf->key_column, conf->payload_column,
                              conf->type_column, conf->topic_template, &r.spec, err, sizeof(err));
        if (ret < 0) {
                log_error("%s", ret == -ENOMEM ? "out of memory" : err);
                return ret == -ENOMEM ? RELAY_EXIT_RETRY : RELAY_EXIT_USAGE;
        }
        record_spec_template_columns(r.spec, &tcols, &ntcols);
        ret = preflight_run(conf, tcols, ntcols, &r.pre, err, sizeof(err));
        if (ret < 0) {
                log_error("%s", err);
                record_spec_free(r.spec);
                return ret == -ECONNREFUSED ? RELAY_EXIT_RETRY : RELAY_EXIT_ENVIRONMENT;
        }
        r.status_interval_ms = conf->status_interval_ms;
        if (r.pre.wal_sender_timeout_ms > 0 && r.status_interval_ms > r.pre.wal_sender_timeout_ms / 2 - 100) {
                r.status_interval_ms = r.pre.wal_sender_timeout_ms / 2 - 100;
                if (r.status_interval_ms < 100)
                        r.status_interval_ms = 100;
                log_info("status interval lowered to %" PRId64 " ms, under half the server's "
                         "wal_sender_timeout of %" PRId64 " ms", r.status_interval_ms,
                         r.pre.wal_sender_timeout_ms);
        }
        r.dec = w2j_decoder_new();
        r.ledger = ledger_new(r.pre.confirmed_flush_lsn);
        if (!r.dec || !r.ledger || build_plugin_options(conf, &add_tables) < 0) {
                fail(&r, RELAY_EXIT_RETRY, "out of memory");
                goto out;
        }
        r.sent_flush_lsn = r.pre.confirmed_flush_lsn;
        ret = producer_new(conf, on_delivery, on_kafka_error, &r, &r.prod, err, sizeof(err));
        if (ret < 0) {
                fail(&r, ret == -EINVAL ? RELAY_EXIT_USAGE : RELAY_EXIT_RETRY, "%s", err);
                goto out;
        }
        if (start_stream(&r, add_tables) < 0)
                goto out;
        stream(&r);
        finish(&r);
out:
        producer_free(r.prod);
        pgstream_free(r.pg);
        ledger_free(r.ledger);
        w2j_decoder_free(r.dec);
        record_spec_free(r.spec);
        free(add_tables);
        return r.failure;
}
