// SPDX-License-Identifier: Apache-2.0
/*
 * The orchestrator: one poll() loop over the replication socket, librdkafka's
 * delivery-report pipe, the stop pipe and the status-update timer. Reads
 * XLogData, decodes wal2json lines, publishes outbox inserts, feeds the LSN
 * ledger, and reports the ledger's flush LSN in standby status updates.
 * Around it: reconnects with backoff, a warm-standby wait for a slot held by
 * another relay, producer replacement after fatal errors, and the per-row
 * error policy (stop or dead-letter). The only module that joins the leaf
 * modules and logs on their behalf.
 */
#include "relay.h"

#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <poll.h>
#include <pwd.h>
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
#include "metrics.h"
#include "pgstream.h"
#include "preflight.h"
#include "producer.h"
#include "record.h"
#include "replmsg.h"
#include "wal2json.h"

#define ERRLEN 1024
#define READ_BUDGET 4096          /* CopyData messages handled per loop turn before polling again */
#define STATUS_MIN_GAP_MS 100     /* at most this often when only the flush LSN moved */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 15000
#define SLOT_BUSY_MAX_MS 2000     /* warm standby: how often to look at a slot held by another relay */
#define RECONNECT_DRAIN_MS 5000   /* wait this long for acks before discarding the producer */
#define BROKER_CHECK_MS 10000
#define STOPPING_BURST 5          /* reply requests this close together: the server is shutting down */
#define STOPPING_GAP_MS 200
#define STOPPING_GRACE_MS 2000    /* then let acks drain this long before ending the stream */
#define MAX_HEADERS (16 + RECORD_HEADERS_MAX) /* the relay's own, then the headers column's */
#define TOPIC_LIMITS 16           /* topics whose max.message.bytes is remembered */

static const char STATE_STREAMING[] = "streaming";

enum { SESSION_ENDED, SESSION_SLOT_BUSY };

struct relay {
        const struct relay_config *conf;
        volatile sig_atomic_t *stop;
        int stop_fd;
        const struct relay_reload *reload;

        struct record_spec *spec;
        struct w2j_decoder *dec;
        struct ledger *ledger;
        struct producer *prod;
        struct pgstream *pg;
        struct pgstream_system sys;
        struct preflight_result pre;
        struct metrics *metrics;
        char system_id[32];        /* of the first connection; a change stops the relay */
        char who[128];             /* the operator, for remedy logs */

        int64_t status_interval_ms;
        int64_t last_status_ms;
        bool reply_pending;
        int64_t last_reply_req_ms; /* when the server last asked for a reply */
        int reply_burst;           /* reply requests in a row, each within STOPPING_GAP_MS */
        int64_t server_stopping_ms; /* when a shutdown of the server was noticed, or 0 */
        uint64_t write_lsn;        /* highest XLogData start received */
        uint64_t server_lsn;       /* highest WAL end the server reported */
        uint64_t sent_flush_lsn;   /* flush LSN of the last status update */
        uint64_t inflight_bytes;

        /* The open transaction, from its B line. */
        bool skip_txn;             /* already confirmed: a resend after reconnect */
        bool operator_skip;        /* --skip-transaction names it */
        bool operator_dead_letter; /* --dead-letter-transaction names it */
        uint32_t xid;
        uint64_t end_lsn;
        int64_t commit_time_us;
        char lsn_text[LSN_STRLEN];
        char xid_text[16];
        char time_text[64];

        int failure;               /* enum relay_exit of the first failure, 0 if none */
        bool producer_broken;      /* discard the producer before streaming again */

        struct metrics_counters c;
        uint64_t ignored[W2J_UNKNOWN + 1];
        struct metrics_labels *topics;     /* acknowledged rows by topic, bounded */
        struct metrics_labels *errors;     /* failed delivery reports by error name, bounded */
        struct metrics_histogram latency;  /* commit to acknowledgement */
        int64_t last_confirm_ms;   /* monotonic; the flush LSN advanced or caught up; 0: never */
        int64_t last_progress_ms;  /* monotonic; an ack, a confirm or nothing pending; 0: never */
        const char *state;         /* for /readyz */
        int64_t last_stats_ms;     /* the periodic stats line */
        struct metrics_counters stats_prev;
        uint64_t stats_prev_errors;

        struct {
                char name[RECORD_TOPIC_MAX + 1];
                int64_t max_bytes;
        } limits[TOPIC_LIMITS];   /* learned after the broker refused a batch as too large */
        unsigned next_limit;
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
        if (!r->failure || (r->failure == RELAY_EXIT_RETRY && code != RELAY_EXIT_RETRY))
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
        int frac = (int)(us - (int64_t)secs * 1000000);
        struct tm tm;

        gmtime_r(&secs, &tm);
        snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

/*
 * Append @s percent-encoded (RFC 3986 unreserved characters kept, but '.'
 * encoded when @dot is false, so that it can separate schema and table).
 */
static size_t append_pct(char *buf, size_t o, size_t size, const char *s, bool dot)
{
        static const char hex[] = "0123456789ABCDEF";

        for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < size; p++) {
                if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                    *p == '-' || *p == '_' || *p == '~' || (*p == '.' && dot)) {
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

/*
 * ce_source: postgresql://<system identifier>/<database>/<schema>.<table>,
 * percent-encoded, with '.' inside the schema and table names encoded too.
 */
static size_t format_source(const struct relay *r, const char *schema, const char *table, char *buf,
                            size_t size)
{
        size_t o = (size_t)snprintf(buf, size, "postgresql://%s/", r->system_id);

        o = append_pct(buf, o, size, r->pre.dbname, true);
        if (o + 1 < size)
                buf[o++] = '/';
        o = append_pct(buf, o, size, schema, false);
        if (o + 1 < size)
                buf[o++] = '.';
        return append_pct(buf, o, size, table, false);
}

static int hex_digit(char c)
{
        return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 :
               c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/*
 * 'table "schema"."name"' from a ce_source header written by format_source(),
 * into @buf; "an unknown table" if it has no such form.
 */
static const char *table_of_source(const char *source, char *buf, size_t size)
{
        const char *p = strrchr(source, '/');
        size_t o;

        if (!p || !strchr(p, '.')) {
                snprintf(buf, size, "an unknown table");
                return buf;
        }
        o = (size_t)snprintf(buf, size, "table \"");
        for (p++; *p && o + 5 < size; p++) {
                if (*p == '.') {
                        o += (size_t)snprintf(buf + o, size - o, "\".\"");
                } else if (*p == '%' && hex_digit(p[1]) >= 0 && hex_digit(p[2]) >= 0) {
                        buf[o++] = (char)(hex_digit(p[1]) * 16 + hex_digit(p[2]));
                        p += 2;
                } else {
                        buf[o++] = *p;
                }
        }
        snprintf(buf + o, size - o, "\"");
        return buf;
}

static bool backpressured(const struct relay *r)
{
        return (int64_t)ledger_outstanding(r->ledger) >= r->conf->max_inflight_messages ||
               (int64_t)r->inflight_bytes >= r->conf->max_inflight_bytes;
}

static uint64_t delivery_errors(const struct relay *r)
{
        return metrics_labels_total(r->errors);
}

/* The periodic one-line summary at info level (--stats-interval). */
static void maybe_log_stats(struct relay *r, int64_t now, int64_t oldest_ms)
{
        int64_t span = now - r->last_stats_ms;
        uint64_t flush = ledger_flush_lsn(r->ledger), errors = delivery_errors(r);
        char a[LSN_STRLEN], b[LSN_STRLEN];

        if (r->conf->stats_interval_ms <= 0)
                return;
        if (!r->last_stats_ms) {
                r->last_stats_ms = now;
                return;
        }
        if (span < r->conf->stats_interval_ms)
                return;
        log_info("stats: %" PRIu64 " rows acknowledged in %.0f s (%.1f/s), %" PRIu64 " dead-lettered, "
                 "%" PRIu64 " delivery errors; confirmed LSN %s, server WAL end %s (lag %" PRIu64
                 " bytes); %" PRIu64 " messages outstanding, oldest unacknowledged %.1f s; %" PRIu64
                 " reconnects", r->c.acked - r->stats_prev.acked, span / 1000.0,
                 (r->c.acked - r->stats_prev.acked) * 1000.0 / (double)span,
                 r->c.dead_lettered - r->stats_prev.dead_lettered, errors - r->stats_prev_errors,
                 lsn_format(flush, a), lsn_format(r->server_lsn, b),
                 r->server_lsn > flush ? r->server_lsn - flush : 0, ledger_outstanding(r->ledger),
                 oldest_ms / 1000.0, r->c.reconnects);
        r->stats_prev = r->c;
        r->stats_prev_errors = errors;
        r->last_stats_ms = now;
}

/* Progress clocks, the stats line, and the numbers /metrics and /readyz serve. */
static void publish_metrics(struct relay *r)
{
        int64_t oldest, now = mono_ms(), oldest_ms = 0;
        bool pending = ledger_oldest_stamp(r->ledger, &oldest) == 0;

        /* Commit time of the oldest transaction read but not yet confirmable. */
        if (pending && wall_us() > oldest)
                oldest_ms = (wall_us() - oldest) / 1000;
        if (!pending && r->pg) {
                /* Nothing waits for Kafka: caught up, which is progress. */
                r->last_progress_ms = now;
                if (ledger_flush_lsn(r->ledger) == r->sent_flush_lsn)
                        r->last_confirm_ms = now;
        }
        maybe_log_stats(r, now, oldest_ms);
        if (!r->metrics)
                return;
        metrics_update(r->metrics, &(struct metrics_snapshot){
                .c = r->c,
                .flush_lsn = ledger_flush_lsn(r->ledger),
                .write_lsn = r->write_lsn,
                .server_lsn = r->server_lsn,
                .outstanding = ledger_outstanding(r->ledger),
                .inflight_bytes = r->inflight_bytes,
                .oldest_unacked_ms = oldest_ms,
                .since_confirm_ms = r->last_confirm_ms ? now - r->last_confirm_ms : -1,
                .since_progress_ms = r->last_progress_ms ? now - r->last_progress_ms : -1,
                .ready_timeout_ms = r->conf->ready_timeout_ms,
                .brokers_up = r->prod ? producer_brokers_up(r->prod) : 0,
                .streaming = r->pg != NULL && !r->failure && r->state == STATE_STREAMING,
                .state = r->failure ? "failed" : r->state,
                .published_by_topic = r->topics,
                .errors_by_code = r->errors,
                .latency = &r->latency,
        });
}

static int send_status(struct relay *r)
{
        char err[ERRLEN], a[LSN_STRLEN], b[LSN_STRLEN];
        uint64_t flush = ledger_flush_lsn(r->ledger);
        uint64_t write = r->write_lsn > flush ? r->write_lsn : flush;

        if (pgstream_send_status(r->pg, write, flush, wall_us(), err, sizeof(err)) < 0) {
                /* After a failure that ended the stream this only repeats it. */
                if (!r->failure)
                        fail(r, RELAY_EXIT_RETRY, "could not send standby status update: %s", err);
                return -EIO;
        }
        if (flush > r->sent_flush_lsn)
                r->last_confirm_ms = r->last_progress_ms = mono_ms();
        if (flush != r->sent_flush_lsn)
                log_debug("confirmed flush LSN %s (write %s, %" PRIu64 " messages outstanding)",
                          lsn_format(flush, a), lsn_format(write, b), ledger_outstanding(r->ledger));
        r->sent_flush_lsn = flush;
        r->last_status_ms = mono_ms();
        r->reply_pending = false;
        r->c.status_updates++;
        publish_metrics(r);
        return 0;
}

/* On the interval, on the server's request, and soon after the flush LSN moved. */
static int maybe_send_status(struct relay *r)
{
        int64_t since = mono_ms() - r->last_status_ms;

        if (r->reply_pending || since >= r->status_interval_ms ||
            (ledger_flush_lsn(r->ledger) != r->sent_flush_lsn && since >= STATUS_MIN_GAP_MS))
                return send_status(r);
        return 0;
}

/* A Kafka error that belongs to the row (retrying cannot help), not to the cluster. */
static bool row_error_code(int err)
{
        switch (err) {
        case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
        case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
        case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
        case RD_KAFKA_RESP_ERR__INVALID_ARG:
        case RD_KAFKA_RESP_ERR_INVALID_RECORD:
        case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
        case RD_KAFKA_RESP_ERR_INVALID_MSG:
                return true;
        default:
                return false;
        }
}

/* What the operator fixes on the Kafka side after a row error @err, as the start of a sentence. */
static const char *kafka_fix(int err)
{
        /* Kafka's ACLs: WRITE implies DESCRIBE, which the producer's metadata request needs. */
        if (err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
                return "Grant WRITE on the topic to the relay's Kafka principal (an ACL)";
        return "Fix the topic or its limits";
}

static const char *operator_name(void)
{
        struct passwd *pw = getpwuid(geteuid());
        const char *user = getenv("USER");

        return user && *user ? user : pw ? pw->pw_name : "unknown";
}

/*
 * A message sent again after the broker refused its batch as too large
 * while the message alone fits: the flag rides in the Kafka opaque next to
 * the ledger ticket (whose sequence never reaches bit 47) and is masked off
 * before the ledger sees it.
 */
#define TICKET_RESENT (UINT64_C(1) << 47)

/* Record batch overhead (Kafka protocol, RecordBatch v2 header) and per-record varints, bytes. */
#define BATCH_OVERHEAD 61
#define RECORD_OVERHEAD 24

/* An upper estimate of the bytes a record takes alone in a batch, for max.message.bytes. */
static size_t record_size(size_t key_len, size_t value_len, const struct producer_header *h, size_t nh)
{
        size_t n = BATCH_OVERHEAD + RECORD_OVERHEAD + key_len + value_len;

        for (size_t i = 0; i < nh; i++)
                n += strlen(h[i].name) + h[i].len + 10;
        return n;
}

/* The topic's max.message.bytes if known (learned after a refusal), else 0. */
static int64_t topic_limit(const struct relay *r, const char *topic)
{
        for (int i = 0; i < TOPIC_LIMITS; i++)
                if (r->limits[i].max_bytes && strcmp(r->limits[i].name, topic) == 0)
                        return r->limits[i].max_bytes;
        return 0;
}

/* Ask the cluster for the topic's max.message.bytes and remember it. Returns it, or 0. */
static int64_t learn_topic_limit(struct relay *r, const char *topic)
{
        char err[ERRLEN];
        int64_t bytes = 0;
        int slot = r->next_limit++ % TOPIC_LIMITS;

        if (producer_topic_max_bytes(r->prod, topic, 5000, &bytes, err, sizeof(err)) < 0) {
                log_warning("cannot read max.message.bytes of topic \"%s\": %s", topic, err);
                return 0;
        }
        snprintf(r->limits[slot].name, sizeof(r->limits[slot].name), "%s", topic);
        r->limits[slot].max_bytes = bytes;
        return bytes;
}

/*
 * Send a row that cannot be published to the dead-letter topic under
 * @ticket (the message the ledger waits for): original key, value and
 * headers, plus the reason, the intended topic and the error code.
 * @work_id and @lsn_text name the row in errors. Returns 0, or a negative
 * errno after recording the failure.
 */
static int dead_letter(struct relay *r, uint64_t ticket, const char *topic, const char *key,
                       size_t key_len, const char *value, size_t value_len,
                       const struct producer_header *orig, size_t norig, const char *code,
                       const char *reason, int64_t timestamp_ms, const char *work_id,
                       const char *lsn_text)
{
        struct producer_header h[MAX_HEADERS + 4];
        char err[ERRLEN], source[1024] = "", table[512];
        size_t nh = 0;
        int ret;

        for (size_t i = 0; i < norig && nh < MAX_HEADERS; i++) {
                h[nh++] = orig[i];
                if (strcmp(orig[i].name, "ce_source") == 0)
                        snprintf(source, sizeof(source), "%.*s", (int)orig[i].len, orig[i].value);
        }
        h[nh++] = (struct producer_header){"outbox_relay_error", reason, strlen(reason)};
        h[nh++] = (struct producer_header){"outbox_relay_error_code", code, strlen(code)};
        h[nh++] = (struct producer_header){"outbox_relay_topic", topic ? topic : "",
                                           topic ? strlen(topic) : 0};
        /*
         * May run inside a delivery report, where serving reports again is not
         * allowed: on a full queue wait for librdkafka's own threads to send.
         */
        for (int tries = 0;; tries++) {
                ret = producer_send(r->prod, r->conf->dead_letter_topic, key, key_len, value,
                                    value_len, timestamp_ms, h, nh, ticket, err, sizeof(err));
                if (ret != -ENOBUFS || r->failure || *r->stop || tries >= 3000)
                        break;
                poll(NULL, 0, 10);
        }
        if (ret < 0) {
                fail(r, RELAY_EXIT_DATA, "the dead-letter publish of work ID \"%s\" (%s, transaction "
                     "ending at LSN %s) to \"%s\" failed too: %s. Stopping: nothing from this "
                     "transaction on is confirmed. Let the dead-letter topic take the row (e.g. raise "
                     "its max.message.bytes and -X message.max.bytes) and restart, or skip it: "
                     "--skip-transaction=%s", work_id, table_of_source(source, table, sizeof(table)),
                     lsn_text, r->conf->dead_letter_topic, err, lsn_text);
                return ret;
        }
        /* Its own three headers, which its delivery report subtracts with the rest. */
        for (size_t i = nh - 3; i < nh; i++)
                r->inflight_bytes += strlen(h[i].name) + h[i].len;
        r->c.dead_lettered++;
        return 0;
}

/*
 * Bytes a message adds to the in-flight bound: key, value and headers @h
 * (a headers column can hold far more than the payload), as the delivery
 * report subtracts them.
 */
static size_t message_bytes(const struct outbox_row *row, const struct producer_header *h, size_t nh)
{
        size_t n = 0;

        for (size_t i = 0; i < nh; i++)
                n += strlen(h[i].name) + h[i].len;
        if (row && row->key && !row->key->is_null)
                n += row->key->len;
        if (row && row->payload && !row->payload->is_null)
                n += row->payload->len;
        return n;
}

/*
 * The broker refused the batch holding this message as too large. If the
 * message alone fits the topic's max.message.bytes, it only shared a batch
 * with an oversized one: send it again (once). Returns true if it was.
 */
static bool resend_if_collateral(struct relay *r, const struct producer_report *rep)
{
        int64_t limit;
        size_t size;
        char err[ERRLEN], work_id[256];

        if (rep->err != RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE || (rep->ticket & TICKET_RESENT))
                return false;
        limit = topic_limit(r, rep->topic);
        if (!limit)
                limit = learn_topic_limit(r, rep->topic);
        size = record_size(rep->key_len, rep->value_len, rep->headers, rep->nheaders);
        if (!limit || (int64_t)size > limit)
                return false;
        producer_header_value(rep, "ce_id", work_id, sizeof(work_id));
        log_info("the broker refused a batch holding work ID \"%s\" as too large for topic \"%s\", "
                 "but this record (about %zu bytes) fits its max.message.bytes of %" PRId64 ": "
                 "sending it again", work_id, rep->topic, size, limit);
        return producer_send(r->prod, rep->topic, rep->key, rep->key_len, rep->value, rep->value_len,
                             0, rep->headers, rep->nheaders, rep->ticket | TICKET_RESENT, err,
                             sizeof(err)) == 0;
}

/* Delivery report. @locality: the main thread, from producer_poll(). */
static void on_delivery(void *ctx, const struct producer_report *rep)
{
        struct relay *r = ctx;
        char work_id[256], lsn[32], xid[16], source[1024], reason[1024], table[512];
        uint64_t ticket = rep->ticket & ~TICKET_RESENT;

        if (rep->err == 0) {
                int64_t stamp;
                bool stamped = ledger_ticket_stamp(r->ledger, ticket, &stamp) == 0;

                if (ledger_ack(r->ledger, ticket) == 0) {
                        size_t bytes = rep->key_len + rep->value_len + rep->header_bytes;

                        r->inflight_bytes -= bytes < r->inflight_bytes ? bytes : r->inflight_bytes;
                        r->c.acked++;
                        r->last_progress_ms = mono_ms();
                        metrics_labels_add(r->topics, rep->topic, 1);
                        if (stamped)
                                metrics_histogram_observe(&r->latency, (wall_us() - stamp) / 1e6);
                }
                return;
        }
        metrics_labels_add(r->errors, rep->errname, 1);
        producer_header_value(rep, "ce_id", work_id, sizeof(work_id));
        producer_header_value(rep, "ce_pglsn", lsn, sizeof(lsn));
        producer_header_value(rep, "ce_pgxid", xid, sizeof(xid));
        producer_header_value(rep, "ce_source", source, sizeof(source));
        table_of_source(source, table, sizeof(table));
        if (strcmp(rep->topic, r->conf->dead_letter_topic) == 0) {
                fail(r, RELAY_EXIT_DATA, "the dead-letter publish of work ID \"%s\" (%s, transaction "
                     "%s ending at LSN %s) to \"%s\" failed: %s (%s). Stopping: nothing from this "
                     "transaction on is confirmed. %s and restart, or skip it: "
                     "--skip-transaction=%s", work_id, table, xid, lsn, rep->topic, rep->errstr,
                     rep->errname, rep->err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ?
                     kafka_fix(rep->err) : "Let the dead-letter topic take the row", lsn);
                return;
        }
        if (!row_error_code(rep->err)) {
                /* Timed out, broker gone, fatal: not the row's fault. Start over with a new producer. */
                fail(r, RELAY_EXIT_RETRY, "delivery of work ID \"%s\" to topic \"%s\" (transaction "
                     "ending at LSN %s) failed: %s (%s); discarding the producer and streaming again "
                     "from the slot (messages not yet confirmed will be sent again)", work_id,
                     rep->topic, lsn, rep->errstr, rep->errname);
                r->producer_broken = true;
                return;
        }
        if (resend_if_collateral(r, rep))
                return;
        r->c.row_errors++;
        snprintf(reason, sizeof(reason), "Kafka refused the message for topic \"%s\": %s (%s)",
                 rep->topic, rep->errstr, rep->errname);
        if (r->conf->dead_letter ||
            (r->conf->dead_letter_transaction && lsn[0] &&
             strcmp(lsn, lsn_format(r->conf->dead_letter_transaction, (char[LSN_STRLEN]){0})) == 0)) {
                log_warning("dead-lettering work ID \"%s\" of %s (transaction %s ending at LSN %s): %s",
                            work_id, table, xid, lsn, reason);
                dead_letter(r, ticket, rep->topic, rep->key, rep->key_len, rep->value,
                            rep->value_len, rep->headers, rep->nheaders, rep->errname, reason, 0,
                            work_id, lsn);
                return;
        }
        fail(r, RELAY_EXIT_DATA, "cannot publish the row with work ID \"%s\" of %s (transaction %s "
             "ending at LSN %s): %s. Nothing from this transaction on is confirmed. %s and restart, "
             "or choose a remedy: --dead-letter-transaction=%s or --skip-transaction=%s", work_id,
             table, xid, lsn, reason, kafka_fix(rep->err), lsn, lsn);
}

/* Error event from librdkafka. @locality: the main thread, from producer_poll(). */
static void on_kafka_error(void *ctx, int fatal, int err, const char *reason)
{
        struct relay *r = ctx;
        char buf[512];

        if (fatal) {
                int code = producer_fatal_error(r->prod, buf, sizeof(buf));

                fail(r, RELAY_EXIT_RETRY, "fatal Kafka producer error: %s: %s; discarding the producer "
                     "and streaming again from the slot", rd_kafka_err2name((rd_kafka_resp_err_t)code),
                     buf);
                r->producer_broken = true;
                return;
        }
        log_warning("kafka: %s: %s", rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

/*
 * The CloudEvents binary-mode headers of a row, from what it has (a row that
 * failed extraction may lack the ID or type), then the pairs of its headers
 * column. @source receives ce_source. Returns the number of headers written
 * to @h (at most MAX_HEADERS).
 */
static size_t build_headers(struct relay *r, const struct w2j_record *rec, const struct outbox_row *row,
                            struct producer_header *h, char *source, size_t source_size)
{
        size_t nh = 0;

        format_source(r, rec->schema, rec->table, source, source_size);
        h[nh++] = (struct producer_header){"ce_specversion", "1.0", 3};
        if (row->id && !row->id->is_null)
                h[nh++] = (struct producer_header){"ce_id", row->id->ptr, row->id->len};
        if (row->type && !row->type->is_null)
                h[nh++] = (struct producer_header){"ce_type", row->type->ptr, row->type->len};
        h[nh++] = (struct producer_header){"ce_source", source, strlen(source)};
        h[nh++] = (struct producer_header){"ce_time", r->time_text, strlen(r->time_text)};
        h[nh++] = (struct producer_header){"content-type", "application/json", 16};
        h[nh++] = (struct producer_header){"ce_pglsn", r->lsn_text, strlen(r->lsn_text)};
        h[nh++] = (struct producer_header){"ce_pgxid", r->xid_text, strlen(r->xid_text)};
        for (size_t i = 0; i < row->nheaders && nh < MAX_HEADERS; i++)
                h[nh++] = (struct producer_header){row->headers[i].name, row->headers[i].value,
                                                   row->headers[i].len};
        return nh;
}

/*
 * A row of the open transaction that cannot be published (found before
 * producing it): dead-letter it if the operator chose so, else stop.
 * @row holds what extraction found; @topic is the intended topic, if any.
 */
static void row_error(struct relay *r, const struct w2j_record *rec, const struct outbox_row *row,
                      const char *topic, const char *code, const char *reason)
{
        char a[LSN_STRLEN], source[1024];
        const char *id = row->id && !row->id->is_null ? row->id->ptr : "(none)";
        struct producer_header h[MAX_HEADERS];
        ledger_ticket ticket;
        size_t nh;

        r->c.row_errors++;
        if (r->conf->dead_letter || r->operator_dead_letter) {
                log_warning("dead-lettering work ID \"%s\" of table \"%s\".\"%s\" at LSN %s "
                            "(transaction %u ending at LSN %s): %s", id, rec->schema, rec->table,
                            lsn_format(rec->lsn, a), r->xid, r->lsn_text, reason);
                if (ledger_add_message(r->ledger, &ticket) < 0) {
                        fail(r, RELAY_EXIT_RETRY, "row outside a transaction: the stream is malformed");
                        return;
                }
                nh = build_headers(r, rec, row, h, source, sizeof(source));
                if (dead_letter(r, ticket, topic, row->key && !row->key->is_null ? row->key->ptr : NULL,
                                row->key ? row->key->len : 0,
                                row->payload && !row->payload->is_null ? row->payload->ptr : NULL,
                                row->payload ? row->payload->len : 0, h, nh, code, reason,
                                r->commit_time_us / 1000, id, r->lsn_text) < 0)
                        ledger_cancel_message(r->ledger, ticket);
                else
                        r->inflight_bytes += message_bytes(row, h, nh);
                return;
        }
        fail(r, RELAY_EXIT_DATA,
             "cannot publish the row with work ID \"%s\" of table \"%s\".\"%s\" at LSN %s "
             "(transaction %u ending at LSN %s): %s. Nothing from this transaction on is confirmed; "
             "fix the row or the relay's options and restart, or choose a remedy: "
             "--dead-letter-transaction=%s or --skip-transaction=%s",
             id, rec->schema, rec->table, lsn_format(rec->lsn, a), r->xid, r->lsn_text,
             reason, r->lsn_text, r->lsn_text);
}

static void publish_row(struct relay *r, const struct w2j_record *rec)
{
        struct outbox_row row = {0};
        struct producer_header h[MAX_HEADERS];
        char err[ERRLEN], source[1024];
        ledger_ticket ticket;
        int64_t limit;
        size_t nh, size;
        int ret;

        ret = record_extract(r->spec, rec, &row, err, sizeof(err));
        if (ret < 0) {
                row_error(r, rec, &row, row.topic,
                          ret == -EDOM ? "INVALID_TOPIC" : ret == -EILSEQ ? "INVALID_JSON" :
                          ret == -EBADMSG ? "INVALID_HEADERS" :
                          ret == -ENOENT ? "MISSING_COLUMN" : "NULL_VALUE", err);
                return;
        }
        nh = build_headers(r, rec, &row, h, source, sizeof(source));
        limit = topic_limit(r, row.topic);
        size = record_size(row.key->len, row.payload->len, h, nh);
        if (limit && (int64_t)size > limit) {
                snprintf(err, sizeof(err), "the record (about %zu bytes) is larger than the topic's "
                         "max.message.bytes of %" PRId64 "; raise the topic's limit or store less in "
                         "the row", size, limit);
                row_error(r, rec, &row, row.topic, "MSG_SIZE_TOO_LARGE", err);
                return;
        }
        ret = ledger_add_message(r->ledger, &ticket);
        if (ret < 0) {
                fail(r, RELAY_EXIT_RETRY, "insert at LSN %s outside a transaction: the stream is "
                     "malformed", lsn_format(rec->lsn, source));
                return;
        }
        for (;;) {
                ret = producer_send(r->prod, row.topic, row.key->ptr, row.key->len,
                                    row.payload->is_null ? NULL : row.payload->ptr, row.payload->len,
                                    r->commit_time_us / 1000, h, nh, ticket, err, sizeof(err));
                if (ret != -ENOBUFS || r->failure || *r->stop)
                        break;
                /* librdkafka's queue is full: serve delivery reports, keep the server answered. */
                {
                        struct pollfd pfd = {producer_fd(r->prod), POLLIN, 0};

                        poll(&pfd, 1, 100);
                        producer_poll(r->prod);
                        maybe_send_status(r);
                }
        }
        if (ret < 0) {
                ledger_cancel_message(r->ledger, ticket);
                if (ret == -ENOBUFS)
                        return;  /* stopping or failed meanwhile: the row stays unconfirmed */
                if (ret == -EMSGSIZE || ret == -ENOENT) {
                        char reason[ERRLEN + 256];

                        snprintf(reason, sizeof(reason), "the producer refused it: %s%s",
                                 ret == -EMSGSIZE ? "the message is larger than -X message.max.bytes "
                                 "(raise it, and the topic's max.message.bytes, or store less in the "
                                 "row)" : err, ret == -EMSGSIZE ? "" : "");
                        row_error(r, rec, &row, row.topic,
                                  ret == -EMSGSIZE ? "MSG_SIZE_TOO_LARGE" : "UNKNOWN_TOPIC", reason);
                        return;
                }
                fail(r, RELAY_EXIT_RETRY, "cannot hand the message of work ID \"%.*s\" to Kafka for "
                     "topic \"%s\" (transaction ending at LSN %s): %s", (int)row.id->len, row.id->ptr,
                     row.topic, r->lsn_text, err);
                r->producer_broken = true;
                return;
        }
        log_debug("published work ID \"%.*s\" to topic \"%s\" (transaction ending at LSN %s)",
                  (int)row.id->len, row.id->ptr, row.topic, r->lsn_text);
        r->inflight_bytes += message_bytes(&row, h, nh);
        r->c.published++;
}

static void begin_transaction(struct relay *r, const struct w2j_record *rec)
{
        char a[LSN_STRLEN];
        int ret;

        r->skip_txn = rec->next_lsn <= ledger_flush_lsn(r->ledger);
        if (r->skip_txn) {
                log_debug("skipping transaction %u ending at %s: already confirmed", rec->xid,
                          lsn_format(rec->next_lsn, a));
                return;
        }
        ret = ledger_begin(r->ledger, rec->next_lsn, rec->commit_time_us);
        if (ret < 0) {
                fail(r, RELAY_EXIT_RETRY, "transaction %u ending at LSN %s begins %s: the stream is "
                     "malformed", rec->xid, lsn_format(rec->next_lsn, a),
                     ret == -EBUSY ? "inside another" : "before the previous one ended");
                return;
        }
        r->xid = rec->xid;
        r->end_lsn = rec->next_lsn;
        r->commit_time_us = rec->commit_time_us;
        lsn_format(rec->next_lsn, r->lsn_text);
        snprintf(r->xid_text, sizeof(r->xid_text), "%u", rec->xid);
        format_rfc3339(rec->commit_time_us, r->time_text, sizeof(r->time_text));
        r->operator_skip = rec->next_lsn == r->conf->skip_transaction;
        r->operator_dead_letter = rec->next_lsn == r->conf->dead_letter_transaction;
        if (r->operator_skip)
                log_warning("SKIPPING transaction %u ending at LSN %s as requested with "
                            "--skip-transaction by %s: its outbox rows are NOT published",
                            rec->xid, r->lsn_text, r->who);
        if (r->operator_dead_letter)
                log_warning("transaction %u ending at LSN %s: rows that cannot be published go to "
                            "\"%s\" as requested with --dead-letter-transaction by %s", rec->xid,
                            r->lsn_text, r->conf->dead_letter_topic, r->who);
}

static void handle_line(struct relay *r, const struct replmsg *m)
{
        struct w2j_record rec;
        char a[LSN_STRLEN];
        int ret;

        ret = w2j_decode(r->dec, m->data, m->data_len, &rec);
        if (ret < 0) {
                fail(r, RELAY_EXIT_DATA,
                     "cannot decode the wal2json line at LSN %s (%s); stopping without skipping it, "
                     "nothing from it on is confirmed; first 200 bytes: %.*s",
                     lsn_format(m->data_start, a),
                     ret == -E2BIG ? "line too long" : ret == -ENOMEM ? "out of memory" : "invalid JSON",
                     (int)(m->data_len < 200 ? m->data_len : 200), m->data);
                return;
        }
        switch (rec.action) {
        case W2J_BEGIN:
                begin_transaction(r, &rec);
                break;
        case W2J_COMMIT:
                if (r->skip_txn) {
                        r->skip_txn = false;
                        break;
                }
                if (r->operator_skip)
                        r->c.skipped_transactions++;
                r->operator_skip = r->operator_dead_letter = false;
                ret = ledger_commit(r->ledger, rec.next_lsn);
                if (ret < 0)
                        fail(r, RELAY_EXIT_RETRY, "commit of transaction %u at LSN %s does not match "
                             "its begin: the stream is malformed", rec.xid, lsn_format(rec.next_lsn, a));
                break;
        case W2J_INSERT:
                if (r->skip_txn)
                        break;
                if (is_outbox(r, rec.schema, rec.table)) {
                        if (r->operator_skip) {
                                r->c.skipped_rows++;
                                log_warning("skipped row of table \"%s\".\"%s\" at LSN %s "
                                            "(--skip-transaction)", rec.schema, rec.table,
                                            lsn_format(rec.lsn, a));
                                break;
                        }
                        publish_row(r, &rec);
                        break;
                }
                /* fall through */
        default:
                r->c.ignored++;
                if (r->ignored[rec.action]++ == 0)
                        log_info("not publishing %s records%s%s (first at LSN %s); counted in metrics",
                                 action_name(rec.action), rec.table ? " of " : "",
                                 rec.table ? rec.table : "", lsn_format(m->data_start, a));
                break;
        }
}

/*
 * A walsender that is shutting down (WalSndDone() in walsender.c) asks for a
 * reply again as soon as it gets one, until the reported flush LSN equals
 * what it sent. In normal streaming it asks at most every half
 * wal_sender_timeout. A burst of requests therefore means a shutdown that
 * waits for the relay: it gets STOPPING_GRACE_MS for acks to drain, then the
 * relay ends the stream (see stream()) rather than hold the shutdown up.
 */
static void note_reply_request(struct relay *r, uint64_t wal_end)
{
        int64_t now = mono_ms();
        char a[LSN_STRLEN];

        r->reply_burst = now - r->last_reply_req_ms < STOPPING_GAP_MS ? r->reply_burst + 1 : 1;
        r->last_reply_req_ms = now;
        r->reply_pending = true;
        if (r->reply_burst >= STOPPING_BURST && !r->server_stopping_ms) {
                r->server_stopping_ms = now;
                log_info("the server is shutting down and waits for confirmation of LSN %s (%" PRIu64
                         " messages unacknowledged)", lsn_format(wal_end, a),
                         ledger_outstanding(r->ledger));
        }
}

/*
 * Read what the server sent, within the in-flight bounds. @draining: the
 * relay is stopping; lines are dropped unread (never confirmed) and only
 * reply requests are served. Returns 1 if more may be buffered, 0 if not,
 * negative after a failure during this call (one recorded before does not stop
 * a drain from reading).
 */
static int read_stream(struct relay *r, bool draining)
{
        char err[ERRLEN], state[6] = "";
        int failure = r->failure;  /* a drain after a row error still reads */

        for (int budget = READ_BUDGET; budget > 0 && r->failure == failure; budget--) {
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

                        fail(r, RELAY_EXIT_RETRY, "replication stream from slot \"%s\" ended at LSN %s: "
                             "%s%s%s%s", r->conf->slot, lsn_format(r->write_lsn, a), err,
                             state[0] ? " (SQLSTATE " : "", state, state[0] ? ")" : "");
                        return ret;
                }
                if (replmsg_parse(buf, len, &m) < 0) {
                        fail(r, RELAY_EXIT_RETRY, "unexpected replication message of %zu bytes, type "
                             "0x%02x", len, len ? (unsigned char)buf[0] : 0);
                        return -EBADMSG;
                }
                if (m.wal_end > r->server_lsn)
                        r->server_lsn = m.wal_end;
                if (m.kind == REPLMSG_KEEPALIVE) {
                        if (!draining)
                                ledger_keepalive(r->ledger, m.wal_end);
                        if (m.reply_requested)
                                note_reply_request(r, m.wal_end);
                        continue;
                }
                if (draining)
                        continue;
                if (m.data_start > r->write_lsn)
                        r->write_lsn = m.data_start;
                handle_line(r, &m);
        }
        return r->failure != failure ? -1 : 1;
}

/*
 * After poll(): empty the signal pipe, or poll() would not block again (a
 * stop's byte too: the flag says it, and the drain after SIGTERM would spin
 * for --shutdown-timeout). A SIGHUP's byte while no stop is requested reloads.
 */
static void check_reload(struct relay *r, short revents)
{
        char buf[64];

        if (!(revents & POLLIN))
                return;
        while (read(r->stop_fd, buf, sizeof(buf)) > 0)
                ;
        if (*r->stop)
                return;
        if (r->reload && *r->reload->requested) {
                *r->reload->requested = 0;
                r->reload->fn(r->reload->ctx);
        }
}

/*
 * @timeout_ms, shortened to when the HTTP server must run even without a
 * request (idle connections it closes on their timeout): otherwise sixteen
 * silent connections would hold every slot of its connection limit forever.
 */
static int http_timeout(const struct relay *r, int timeout_ms)
{
        int t = r->metrics ? metrics_timeout_ms(r->metrics) : -1;

        return t >= 0 && (timeout_ms < 0 || t < timeout_ms) ? t : timeout_ms;
}

static int wait_events(struct relay *r, bool read_pg, int timeout_ms)
{
        struct pollfd pfd[4] = {
                {producer_fd(r->prod), POLLIN, 0},
                {r->stop_fd, POLLIN, 0},
                {pgstream_socket(r->pg), 0, 0},
                {r->metrics ? metrics_fd(r->metrics) : -1, POLLIN, 0},
        };
        char err[ERRLEN];

        if (read_pg)
                pfd[2].events |= POLLIN;
        if (pgstream_want_write(r->pg))
                pfd[2].events |= POLLOUT;
        timeout_ms = http_timeout(r, timeout_ms);
        if (poll(pfd, 4, timeout_ms) < 0 && errno != EINTR)
                return -errno;
        check_reload(r, pfd[1].revents);
        if (pfd[2].revents & (POLLIN | POLLERR | POLLHUP)) {
                if (pgstream_consume(r->pg, err, sizeof(err)) < 0) {
                        fail(r, RELAY_EXIT_RETRY, "lost the replication connection: %s", err);
                        return -EIO;
                }
        }
        if (pfd[2].revents & POLLOUT)
                pgstream_flush(r->pg);
        if (r->metrics)
                metrics_serve(r->metrics);
        return 0;
}

static int next_timeout(const struct relay *r)
{
        int64_t left = r->last_status_ms + r->status_interval_ms - mono_ms();

        if (ledger_flush_lsn(r->ledger) != r->sent_flush_lsn && left > STATUS_MIN_GAP_MS)
                left = STATUS_MIN_GAP_MS;
        if (left < 0)
                left = 0;
        return (int)(left > 1000 ? 1000 : left);
}

static void stream(struct relay *r)
{
        r->server_stopping_ms = 0;
        r->reply_burst = 0;
        while (!r->failure && !*r->stop) {
                int more = read_stream(r, false);

                if (more < 0)
                        break;
                if (r->server_stopping_ms && mono_ms() - r->server_stopping_ms > STOPPING_GRACE_MS &&
                    ledger_flush_lsn(r->ledger) < r->server_lsn) {
                        char a[LSN_STRLEN];

                        fail(r, RELAY_EXIT_RETRY, "the server is shutting down and %" PRIu64 " messages "
                             "are still unacknowledged: ending the stream at confirmed LSN %s so the "
                             "shutdown is not held up; they will be sent again after reconnecting",
                             ledger_outstanding(r->ledger), lsn_format(ledger_flush_lsn(r->ledger), a));
                        break;
                }
                producer_poll(r->prod);
                if (maybe_send_status(r) < 0)
                        break;
                publish_metrics(r);
                if (wait_events(r, !backpressured(r), more > 0 ? 0 : next_timeout(r)) < 0)
                        break;
        }
}

/*
 * End the session: on a requested stop, wait for acknowledgements
 * (bounded) while answering the server; then report the flush LSN and end
 * the copy if the connection still works.
 */
static void end_session(struct relay *r)
{
        /*
         * On a requested stop wait up to --shutdown-timeout; after a row error
         * a little, so earlier transactions still acked get confirmed and are
         * not sent again; after a lost connection or broken producer not at all.
         */
        int64_t wait_ms = !r->failure ? r->conf->shutdown_timeout_ms :
                          r->failure == RELAY_EXIT_DATA && !r->producer_broken ?
                          (r->conf->shutdown_timeout_ms < 5000 ? r->conf->shutdown_timeout_ms : 5000) : 0;
        int64_t deadline = mono_ms() + wait_ms;
        int failure = r->failure;
        char err[ERRLEN];

        if (!r->failure)
                log_info("stopping: waiting up to %" PRId64 " ms for %" PRIu64 " outstanding "
                         "acknowledgements", wait_ms, ledger_outstanding(r->ledger));
        while (ledger_outstanding(r->ledger) > 0 && mono_ms() < deadline && r->failure == failure) {
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
        if (!r->failure && ledger_outstanding(r->ledger) > 0)
                log_warning("stopping with %" PRIu64 " messages unacknowledged: they will be sent "
                            "again on the next start", ledger_outstanding(r->ledger));
        /* A last report; after a lost connection it fails quietly. */
        if (pgstream_send_status(r->pg, r->write_lsn > ledger_flush_lsn(r->ledger) ?
                                 r->write_lsn : ledger_flush_lsn(r->ledger), ledger_flush_lsn(r->ledger),
                                 wall_us(), err, sizeof(err)) == 0) {
                r->sent_flush_lsn = ledger_flush_lsn(r->ledger);
                if (pgstream_finish(r->pg, 5000, err, sizeof(err)) < 0 && !r->failure)
                        log_warning("ending the replication stream: %s", err);
        }
}

static int build_add_tables(const struct relay_config *conf, char **ret_tables)
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

/* Check, after every (re)connect, that the slot is still the one the relay was streaming. */
static int check_slot(struct relay *r)
{
        struct pgstream_slot slot;
        char err[ERRLEN];

        if (pgstream_slot_info(r->pg, r->conf->slot, &slot, err, sizeof(err)) < 0) {
                fail(r, RELAY_EXIT_RETRY, "cannot read replication slot \"%s\": %s", r->conf->slot, err);
                return -EIO;
        }
        if (!slot.exists) {
                fail(r, RELAY_EXIT_ENVIRONMENT,
                     "replication slot \"%s\" is gone (dropped, or this server is a promoted standby "
                     "that never had it). outbox-relay does not recreate it: a new slot starts at the "
                     "current WAL and would skip every row committed since LSN %s. Decide how to "
                     "recover those rows, then start once with --create-slot",
                     r->conf->slot, lsn_format(ledger_flush_lsn(r->ledger), (char[LSN_STRLEN]){0}));
                return -ENOENT;
        }
        if (strcmp(slot.wal_status, "lost") == 0) {
                fail(r, RELAY_EXIT_ENVIRONMENT,
                     "replication slot \"%s\" was invalidated (wal_status lost, see "
                     "max_slot_wal_keep_size): the WAL of rows not yet published after LSN %s is gone. "
                     "Recover them by other means, then drop the slot and start once with --create-slot",
                     r->conf->slot, lsn_format(ledger_flush_lsn(r->ledger), (char[LSN_STRLEN]){0}));
                return -ENOENT;
        }
        if (strcmp(slot.plugin, "wal2json") != 0 || strcmp(slot.database, r->pre.dbname) != 0) {
                fail(r, RELAY_EXIT_ENVIRONMENT, "replication slot \"%s\" now uses plugin \"%s\" on "
                     "database \"%s\": it was replaced; choose the slot with --slot", r->conf->slot,
                     slot.plugin, slot.database);
                return -EINVAL;
        }
        if (slot.active_pid) {
                log_info("replication slot \"%s\" is in use by PID %d (another relay?): waiting as a "
                         "warm standby", r->conf->slot, slot.active_pid);
                return -EBUSY;
        }
        return 0;
}

/* One replication connection, from connect to end. Returns SESSION_*. */
static int session(struct relay *r, const char *add_tables)
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

        r->state = "connecting";
        ret = pgstream_connect(r->conf->conninfo, &r->pg, &r->sys, err, sizeof(err));
        if (ret < 0) {
                fail(r, RELAY_EXIT_RETRY, "cannot open the replication connection: %s", err);
                return SESSION_ENDED;
        }
        if (!r->system_id[0]) {
                snprintf(r->system_id, sizeof(r->system_id), "%s", r->sys.system_id);
        } else if (strcmp(r->system_id, r->sys.system_id) != 0) {
                fail(r, RELAY_EXIT_ENVIRONMENT,
                     "the server's system identifier changed from %s to %s: this is another cluster "
                     "(restored, re-initialised or a different server at the same address). Its slot "
                     "positions have nothing to do with what was published from LSN %s on. Stopping "
                     "so that an operator decides how to reconcile the outbox",
                     r->system_id, r->sys.system_id, lsn_format(ledger_flush_lsn(r->ledger), a));
                return SESSION_ENDED;
        }
        ret = check_slot(r);
        if (ret == -EBUSY) {
                r->state = "standby: the slot is held by another process";
                return SESSION_SLOT_BUSY;
        }
        if (ret < 0)
                return SESSION_ENDED;
        ret = pgstream_start(r->pg, &st, err, sizeof(err), state);
        if (ret < 0) {
                if (strcmp(state, "55006") == 0) {
                        log_info("replication slot \"%s\" is in use: %s; waiting as a warm standby",
                                 r->conf->slot, err);
                        r->state = "standby: the slot is held by another process";
                        return SESSION_SLOT_BUSY;
                }
                fail(r, strcmp(state, "42704") == 0 || strcmp(state, "42501") == 0 ||
                        strcmp(state, "55000") == 0 ? RELAY_EXIT_ENVIRONMENT : RELAY_EXIT_RETRY,
                     "cannot start replication from slot \"%s\": %s%s%s%s", r->conf->slot, err,
                     state[0] ? " (SQLSTATE " : "", state, state[0] ? ")" : "");
                return SESSION_ENDED;
        }
        r->state = STATE_STREAMING;
        log_info("streaming from slot \"%s\" (confirmed flush LSN %s) of system %s, database \"%s\"",
                 r->conf->slot, lsn_format(ledger_flush_lsn(r->ledger), a), r->sys.system_id,
                 r->sys.dbname);
        r->c.connects++;
        r->last_status_ms = mono_ms();
        stream(r);
        r->state = *r->stop ? "stopping" : "stream ended";
        end_session(r);
        return SESSION_ENDED;
}

/* Wait up to @ms unless a stop is requested, serving delivery reports meanwhile. */
static void pause_ms(struct relay *r, int64_t ms)
{
        int64_t deadline = mono_ms() + ms;

        while (!*r->stop) {
                struct pollfd pfd[3] = {
                        {r->stop_fd, POLLIN, 0},
                        {r->prod ? producer_fd(r->prod) : -1, POLLIN, 0},
                        {r->metrics ? metrics_fd(r->metrics) : -1, POLLIN, 0},
                };
                int64_t left = deadline - mono_ms();

                if (left <= 0)
                        break;
                poll(pfd, 3, http_timeout(r, (int)(left > 1000 ? 1000 : left)));
                check_reload(r, pfd[0].revents);
                if (r->prod)
                        producer_poll(r->prod);
                if (r->metrics)
                        metrics_serve(r->metrics);
                publish_metrics(r);
        }
}

/* Between sessions: keep acknowledged work, discard the rest (and a broken producer). */
static int recover(struct relay *r)
{
        char err[ERRLEN];
        int64_t deadline = mono_ms() + RECONNECT_DRAIN_MS;

        while (!r->producer_broken && ledger_outstanding(r->ledger) > 0 && mono_ms() < deadline &&
               !*r->stop) {
                struct pollfd pfd = {producer_fd(r->prod), POLLIN, 0};

                poll(&pfd, 1, 100);
                producer_poll(r->prod);
        }
        if (ledger_outstanding(r->ledger) > 0)
                r->producer_broken = true;
        if (r->producer_broken) {
                log_warning("discarding the Kafka producer with %" PRIu64 " messages unacknowledged: "
                            "they will be sent again", ledger_outstanding(r->ledger));
                r->prod = producer_free(r->prod);
                if (producer_new(r->conf, on_delivery, on_kafka_error, r, &r->prod, err, sizeof(err)) < 0) {
                        log_error("cannot create a new Kafka producer: %s", err);
                        return -EIO;
                }
                r->c.producer_restarts++;
        }
        ledger_reset(r->ledger);
        r->inflight_bytes = 0;
        r->producer_broken = false;
        r->failure = 0;
        r->skip_txn = r->operator_skip = r->operator_dead_letter = false;
        return 0;
}

int relay_run(const struct relay_config *conf, int stop_fd, volatile sig_atomic_t *stop,
              const struct relay_reload *reload)
{
        struct relay r = {.conf = conf, .stop = stop, .stop_fd = stop_fd, .reload = reload};
        const char *const *tcols;
        size_t ntcols;
        char err[ERRLEN], *add_tables = NULL, a[LSN_STRLEN];
        int64_t backoff = BACKOFF_MIN_MS;
        int ret, code;

        snprintf(r.who, sizeof(r.who), "user %s (uid %d)", operator_name(), (int)geteuid());
        srand((unsigned)(wall_us() ^ getpid()));
        ret = record_spec_new(conf->id_column, conf->key_column, conf->payload_column,
                              conf->type_column, conf->topic_template, &r.spec, err, sizeof(err));
        if (ret < 0) {
                log_error("%s", ret == -ENOMEM ? "out of memory" : err);
                return ret == -ENOMEM ? RELAY_EXIT_RETRY : RELAY_EXIT_USAGE;
        }
        record_spec_allow_null_payload(r.spec, conf->null_tombstone);
        if (conf->headers_column && !conf->no_headers_column &&
            record_spec_set_headers_column(r.spec, conf->headers_column) < 0) {
                log_error("out of memory");
                record_spec_free(r.spec);
                return RELAY_EXIT_RETRY;
        }
        record_spec_template_columns(r.spec, &tcols, &ntcols);
        /* The producer first: its settings are checked before a slot may be created. */
        r.dec = w2j_decoder_new();
        r.ledger = ledger_new(LSN_INVALID);
        r.topics = metrics_labels_new((unsigned)conf->metrics_max_topics);
        r.errors = metrics_labels_new(64);
        r.state = "starting";
        if (!r.dec || !r.ledger || !r.topics || !r.errors) {
                fail(&r, RELAY_EXIT_RETRY, "out of memory");
                goto out;
        }
        ret = producer_new(conf, on_delivery, on_kafka_error, &r, &r.prod, err, sizeof(err));
        if (ret < 0) {
                fail(&r, ret == -EINVAL ? RELAY_EXIT_USAGE : RELAY_EXIT_RETRY, "%s", err);
                goto out;
        }
        ret = preflight_run(conf, tcols, ntcols, &r.pre, err, sizeof(err));
        if (ret < 0) {
                fail(&r, ret == -ECONNREFUSED ? RELAY_EXIT_RETRY : RELAY_EXIT_ENVIRONMENT, "%s", err);
                goto out;
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
        if (conf->skip_transaction && conf->skip_transaction <= r.pre.confirmed_flush_lsn)
                log_warning("--skip-transaction=%s has no effect: the slot is already confirmed past "
                            "it; remove the option", lsn_format(conf->skip_transaction, a));
        else if (conf->skip_transaction)
                log_warning("will skip the transaction ending at LSN %s (--skip-transaction, by %s)",
                            lsn_format(conf->skip_transaction, a), r.who);
        ledger_free(r.ledger);
        r.ledger = ledger_new(r.pre.confirmed_flush_lsn);
        if (!r.ledger || build_add_tables(conf, &add_tables) < 0) {
                fail(&r, RELAY_EXIT_RETRY, "out of memory");
                goto out;
        }
        r.sent_flush_lsn = r.pre.confirmed_flush_lsn;
        if (conf->metrics_address) {
                ret = metrics_new(conf->metrics_address, conf->slot, &r.metrics, err, sizeof(err));
                if (ret < 0) {
                        fail(&r, RELAY_EXIT_USAGE, "%s", err);
                        goto out;
                }
        }
        if (producer_check_brokers(r.prod, BROKER_CHECK_MS, err, sizeof(err)) < 0) {
                fail(&r, RELAY_EXIT_RETRY, "cannot reach any Kafka broker of \"%s\" within %d s: %s; "
                     "check --brokers and that the brokers are up", conf->brokers,
                     BROKER_CHECK_MS / 1000, err);
                goto out;
        }
        for (;;) {
                int64_t started = mono_ms(), delay;

                code = session(&r, add_tables);
                r.pg = pgstream_free(r.pg);
                if (r.failure && r.failure != RELAY_EXIT_RETRY)
                        break;
                if (*stop && !r.failure)
                        break;
                if (*stop) {
                        r.failure = 0;  /* stopped while reconnecting: nothing else went wrong */
                        break;
                }
                if (recover(&r) < 0) {
                        r.failure = RELAY_EXIT_RETRY;
                        break;
                }
                if (mono_ms() - started > 60000)
                        backoff = BACKOFF_MIN_MS;
                if (code == SESSION_SLOT_BUSY) {
                        delay = r.status_interval_ms < SLOT_BUSY_MAX_MS ? r.status_interval_ms
                                                                        : SLOT_BUSY_MAX_MS;
                } else {
                        /* Full jitter (AWS architecture blog, "Exponential Backoff And Jitter"). */
                        delay = backoff / 2 + rand() % (backoff / 2 + 1);
                        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
                        log_info("reconnecting in %" PRId64 " ms", delay);
                        r.state = "reconnecting";
                }
                r.c.reconnects++;
                pause_ms(&r, delay);
                if (*stop)
                        break;
        }
        log_info("stopped: %" PRIu64 " messages handed to Kafka (resends included), %" PRIu64
                 " acknowledged, %" PRIu64 " dead-lettered, %" PRIu64 " transactions skipped by "
                 "request; acknowledged up to LSN "
                 "%s, last confirmed to the server %s", r.c.published, r.c.acked, r.c.dead_lettered,
                 r.c.skipped_transactions, lsn_format(ledger_flush_lsn(r.ledger), a),
                 lsn_format(r.sent_flush_lsn, (char[LSN_STRLEN]){0}));
out:
        producer_free(r.prod);
        pgstream_free(r.pg);
        metrics_free(r.metrics);
        metrics_labels_free(r.topics);
        metrics_labels_free(r.errors);
        ledger_free(r.ledger);
        w2j_decoder_free(r.dec);
        record_spec_free(r.spec);
        free(add_tables);
        return r.failure;
}
