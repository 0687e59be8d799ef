// SPDX-License-Identifier: Apache-2.0
/*
 * /metrics and /healthz over libmicrohttpd in external-poll (epoll) mode.
 * See metrics.h. Knows nothing of PostgreSQL or Kafka.
 */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "monoclock.h"

/*
 * Connections at once, and how long each may take for its one request
 * (responses say "Connection: close"), in ms: libmicrohttpd's own timeout
 * is an idle timeout, which a client sending a byte now and then never
 * meets, so without a deadline CONN_MAX such clients would hold /healthz
 * off for as long as they like.
 */
#define CONN_MAX 16
#define CONN_DEADLINE_MS 10000

struct conn_slot {
        int fd;                 /* -1: free */
        bool cut;               /* shut down, waiting for libmicrohttpd to close it */
        int64_t started_ms;     /* monotonic */
};

struct metrics {
        struct MHD_Daemon *daemon;
        struct conn_slot conns[CONN_MAX + 1];
        struct metrics_snapshot snap;
        char slot[64];
        char *body;             /* grows to fit /metrics, up to BODY_MAX */
        size_t body_size;
};

#define BODY_MAX (4u << 20)     /* bytes; 1024 topics and error names fit many times over */

struct label_entry {
        char name[METRICS_LABEL_MAX + 1];
        uint64_t value;
};

struct metrics_labels {
        unsigned cap, n, last;  /* last: index of the latest hit, for runs of one label */
        uint64_t other;
        struct label_entry e[];
};

const double metrics_latency_bounds[METRICS_LATENCY_BUCKETS] = {
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300,
};

struct metrics_labels *metrics_labels_new(unsigned cap)
{
        struct metrics_labels *f;

        if (cap == 0 || cap > METRICS_LABELS_CAP_MAX)
                return NULL;
        f = calloc(1, sizeof(*f) + cap * sizeof(f->e[0]));
        if (f)
                f->cap = cap;
        return f;
}

struct metrics_labels *metrics_labels_free(struct metrics_labels *f)
{
        free(f);
        return NULL;
}

void metrics_labels_add(struct metrics_labels *f, const char *label, uint64_t n)
{
        size_t len = strlen(label);

        if (f->n > 0 && strcmp(f->e[f->last].name, label) == 0) {
                f->e[f->last].value += n;
                return;
        }
        for (unsigned i = 0; i < f->n; i++) {
                if (strcmp(f->e[i].name, label) == 0) {
                        f->e[i].value += n;
                        f->last = i;
                        return;
                }
        }
        if (f->n == f->cap || len > METRICS_LABEL_MAX || strcmp(label, METRICS_OTHER) == 0) {
                f->other += n;
                return;
        }
        memcpy(f->e[f->n].name, label, len + 1);
        f->e[f->n].value = n;
        f->last = f->n++;
}

uint64_t metrics_labels_total(const struct metrics_labels *f)
{
        uint64_t n = f->other;

        for (unsigned i = 0; i < f->n; i++)
                n += f->e[i].value;
        return n;
}

uint64_t metrics_labels_get(const struct metrics_labels *f, const char *label)
{
        if (strcmp(label, METRICS_OTHER) == 0)
                return f->other;
        for (unsigned i = 0; i < f->n; i++)
                if (strcmp(f->e[i].name, label) == 0)
                        return f->e[i].value;
        return 0;
}

void metrics_histogram_observe(struct metrics_histogram *h, double seconds)
{
        if (!(seconds > 0))
                seconds = 0;
        for (int i = 0; i < METRICS_LATENCY_BUCKETS; i++) {
                if (seconds <= metrics_latency_bounds[i]) {
                        h->buckets[i]++;
                        break;
                }
        }
        h->count++;
        h->sum += seconds;
}

static int add(char *buf, size_t size, size_t *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static int add(char *buf, size_t size, size_t *o, const char *fmt, ...)
{
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(buf + *o, size - *o, fmt, ap);
        va_end(ap);
        if (n < 0 || (size_t)n >= size - *o)
                return -ENOSPC;
        *o += (size_t)n;
        return 0;
}

#define METRIC(type, name, help, fmt, val)                                                          \
        do {                                                                                        \
                if (add(buf, size, &o, "# HELP outbox_relay_" name " " help "\n# TYPE outbox_relay_" \
                        name " " type "\noutbox_relay_" name "{slot=\"%s\"} " fmt "\n", slot, val) < 0) \
                        return -ENOSPC;                                                             \
        } while (0)

/* A label value as the exposition format wants it: \\, \" and \n escaped. */
static int add_label_value(char *buf, size_t size, size_t *o, const char *v)
{
        for (; *v; v++) {
                const char *esc = *v == '\\' ? "\\\\" : *v == '"' ? "\\\"" : *v == '\n' ? "\\n" : NULL;

                if (esc ? add(buf, size, o, "%s", esc) < 0 : add(buf, size, o, "%c", *v) < 0)
                        return -ENOSPC;
        }
        return 0;
}

static int add_labelled(char *buf, size_t size, size_t *o, const char *slot, const char *name,
                        const char *label, const char *help, const struct metrics_labels *f)
{
        if (add(buf, size, o, "# HELP outbox_relay_%s %s\n# TYPE outbox_relay_%s counter\n", name, help,
                name) < 0)
                return -ENOSPC;
        for (unsigned i = 0; f && i <= f->n; i++) {
                const char *v = i < f->n ? f->e[i].name : METRICS_OTHER;
                uint64_t n = i < f->n ? f->e[i].value : f->other;

                if (i == f->n && n == 0)
                        break;
                if (add(buf, size, o, "outbox_relay_%s{slot=\"%s\",%s=\"", name, slot, label) < 0 ||
                    add_label_value(buf, size, o, v) < 0 ||
                    add(buf, size, o, "\"} %llu\n", (unsigned long long)n) < 0)
                        return -ENOSPC;
        }
        return 0;
}

static int add_histogram(char *buf, size_t size, size_t *o, const char *slot, const char *name,
                         const char *help, const struct metrics_histogram *h)
{
        static const struct metrics_histogram none;
        uint64_t cum = 0;

        if (!h)
                h = &none;
        if (add(buf, size, o, "# HELP outbox_relay_%s %s\n# TYPE outbox_relay_%s histogram\n", name, help,
                name) < 0)
                return -ENOSPC;
        for (int i = 0; i < METRICS_LATENCY_BUCKETS; i++) {
                cum += h->buckets[i];
                if (add(buf, size, o, "outbox_relay_%s_bucket{slot=\"%s\",le=\"%g\"} %llu\n", name, slot,
                        metrics_latency_bounds[i], (unsigned long long)cum) < 0)
                        return -ENOSPC;
        }
        if (add(buf, size, o, "outbox_relay_%s_bucket{slot=\"%s\",le=\"+Inf\"} %llu\n"
                "outbox_relay_%s_sum{slot=\"%s\"} %.6f\noutbox_relay_%s_count{slot=\"%s\"} %llu\n", name, slot,
                (unsigned long long)h->count, name, slot, h->sum, name, slot,
                (unsigned long long)h->count) < 0)
                return -ENOSPC;
        return 0;
}

bool metrics_ready(const struct metrics_snapshot *s, char *why, size_t size)
{
        if (!s->streaming) {
                snprintf(why, size, "not streaming (%s)", s->state ? s->state : "starting");
                return false;
        }
        if (s->brokers_up == 0) {
                snprintf(why, size, "no Kafka broker connected");
                return false;
        }
        if (s->brokers_up < 0) {
                snprintf(why, size, "Kafka broker state not known yet");
                return false;
        }
        if (s->blocked) {
                snprintf(why, size, "%s", s->blocked);
                return false;
        }
        if (s->ready_timeout_ms > 0 && s->since_progress_ms > s->ready_timeout_ms) {
                snprintf(why, size, "stuck: no acknowledgement or confirmation for %lld s with %llu "
                         "messages outstanding (ready timeout %lld s)",
                         (long long)(s->since_progress_ms / 1000), (unsigned long long)s->outstanding,
                         (long long)(s->ready_timeout_ms / 1000));
                return false;
        }
        snprintf(why, size, "ready");
        return true;
}

int metrics_format(const struct metrics_snapshot *s, const char *slot, char *buf, size_t size)
{
        size_t o = 0;
        uint64_t lag = s->server_lsn > s->flush_lsn ? s->server_lsn - s->flush_lsn : 0;

        METRIC("counter", "published_total", "Messages handed to Kafka.", "%llu",
               (unsigned long long)s->c.published);
        METRIC("counter", "acknowledged_total", "Messages Kafka acknowledged.", "%llu",
               (unsigned long long)s->c.acked);
        METRIC("counter", "dead_lettered_total", "Rows sent to the dead-letter topic.", "%llu",
               (unsigned long long)s->c.dead_lettered);
        METRIC("counter", "row_errors_total", "Rows that could not be published and stopped the relay.",
               "%llu", (unsigned long long)s->c.row_errors);
        METRIC("counter", "skipped_transactions_total", "Transactions skipped by --skip-transaction.",
               "%llu", (unsigned long long)s->c.skipped_transactions);
        METRIC("counter", "skipped_rows_total", "Outbox rows skipped by --skip-transaction.", "%llu",
               (unsigned long long)s->c.skipped_rows);
        METRIC("counter", "ignored_records_total",
               "Decoded records not published (updates, deletes, truncates, messages).", "%llu",
               (unsigned long long)s->c.ignored);
        METRIC("counter", "nontransactional_messages_total",
               "Non-transactional logical messages with the --message-prefix, never published.", "%llu",
               (unsigned long long)s->c.nontx_messages);
        METRIC("counter", "stream_starts_total", "Replication streams started.", "%llu",
               (unsigned long long)s->c.connects);
        METRIC("counter", "reconnects_total", "Reconnects after a lost stream (a standby's looks at "
               "the slot are not counted).", "%llu", (unsigned long long)s->c.reconnects);
        METRIC("counter", "standby_checks_total", "Looks at the slot while another process held it "
               "(warm standby).", "%llu", (unsigned long long)s->c.standby_checks);
        METRIC("counter", "refused_batches_total", "Record batches the broker refused as larger than "
               "their topic's max.message.bytes while the record alone fits it (counted once per topic "
               "and producer): the relay then sends that topic in batches that fit.", "%llu",
               (unsigned long long)s->c.refused_batches);
        METRIC("counter", "producer_restarts_total", "Kafka producers discarded and recreated.", "%llu",
               (unsigned long long)s->c.producer_restarts);
        METRIC("counter", "kafka_queue_full_total", "Records librdkafka refused because its queue was "
               "full (-X queue.buffering.max.messages or .kbytes): each row waited for delivery reports "
               "and was offered again. Rising steadily: those bounds are below --max-inflight-messages "
               "or --max-inflight-bytes.", "%llu", (unsigned long long)s->c.queue_full);
        METRIC("counter", "status_updates_total", "Standby status updates sent.", "%llu",
               (unsigned long long)s->c.status_updates);
        METRIC("gauge", "confirmed_flush_lsn", "LSN confirmed to the server, in bytes.", "%llu",
               (unsigned long long)s->flush_lsn);
        METRIC("gauge", "received_lsn", "LSN of the newest change received, in bytes.", "%llu",
               (unsigned long long)s->write_lsn);
        METRIC("gauge", "checkpoint_lsn",
               "LSN of the newest checkpoint record Kafka acknowledged, in bytes.", "%llu",
               (unsigned long long)s->checkpoint_lsn);
        METRIC("gauge", "slot_lag_bytes",
               "Server WAL end minus the confirmed LSN: WAL the slot retains for the relay.", "%llu",
               (unsigned long long)lag);
        METRIC("gauge", "outstanding_messages", "Messages waiting for a delivery report.", "%llu",
               (unsigned long long)s->outstanding);
        METRIC("gauge", "inflight_bytes", "Key, value and header bytes waiting for a delivery report.", "%llu",
               (unsigned long long)s->inflight_bytes);
        METRIC("gauge", "oldest_unpublished_seconds",
               "Age of the oldest transaction with unacknowledged messages.", "%.3f",
               s->oldest_unacked_ms / 1000.0);
        METRIC("gauge", "streaming", "1 while a replication stream is open.", "%d", s->streaming ? 1 : 0);
        if (add(buf, size, &o, "# HELP outbox_relay_role The relay's role, 1 for the current one: "
                "active (streams from the slot or tries to), standby (another process holds the "
                "slot).\n# TYPE outbox_relay_role gauge\n"
                "outbox_relay_role{slot=\"%s\",role=\"active\"} %d\n"
                "outbox_relay_role{slot=\"%s\",role=\"standby\"} %d\n", slot, s->standby ? 0 : 1, slot,
                s->standby ? 1 : 0) < 0)
                return -ENOSPC;
        METRIC("gauge", "server_wal_end_lsn", "Newest WAL end the server reported, in bytes.", "%llu",
               (unsigned long long)s->server_lsn);
        METRIC("gauge", "seconds_since_last_confirm",
               "Seconds since the confirmed LSN last advanced or caught up with what was read "
               "(-1: never).", "%.3f", s->since_confirm_ms < 0 ? -1.0 : s->since_confirm_ms / 1000.0);
        METRIC("gauge", "kafka_brokers_up", "Kafka brokers with an open connection (-1: not known yet).",
               "%d", s->brokers_up);
        {
                char why[256];

                METRIC("gauge", "ready", "1 while /readyz answers 200.", "%d",
                       metrics_ready(s, why, sizeof(why)) ? 1 : 0);
        }
        if (add_labelled(buf, size, &o, slot, "rows_published_total", "topic",
                         "Rows Kafka acknowledged, by topic (topics past the cap are counted as "
                         "\"" METRICS_OTHER "\").", s->published_by_topic) < 0 ||
            add_labelled(buf, size, &o, slot, "delivery_errors_total", "code",
                         "Failed delivery reports, by Kafka error name.", s->errors_by_code) < 0 ||
            add_histogram(buf, size, &o, slot, "commit_to_ack_seconds", "Time from a transaction's "
                          "commit (server clock) to Kafka's acknowledgement of each of its messages.",
                          s->latency) < 0)
                return -ENOSPC;
        if (s->exactly_once) {
                METRIC("counter", "kafka_transactions_committed_total",
                       "Kafka transactions committed (--exactly-once).", "%llu",
                       (unsigned long long)s->txn_committed);
                METRIC("counter", "kafka_transactions_aborted_total",
                       "Kafka transactions aborted; their records are produced again.", "%llu",
                       (unsigned long long)s->txn_aborted);
                METRIC("counter", "kafka_transaction_records_total",
                       "Records in committed Kafka transactions; divided by the committed count, the "
                       "records per transaction.", "%llu", (unsigned long long)s->txn_records);
                if (add_histogram(buf, size, &o, slot, "kafka_transaction_commit_seconds",
                                  "Time to commit a Kafka transaction, its checkpoint record included.",
                                  s->txn_commit_latency) < 0)
                        return -ENOSPC;
        }
        return (int)o;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **con_cls)
{
        struct metrics *m = cls;
        struct MHD_Response *resp;
        unsigned int status = MHD_HTTP_OK;
        const char *type = "text/plain; charset=utf-8";
        enum MHD_Result ret;
        int n;

        (void)version;
        (void)upload_data;
        (void)upload_data_size;
        (void)con_cls;
        if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
                n = snprintf(m->body, m->body_size, "method not allowed\n");
                status = MHD_HTTP_METHOD_NOT_ALLOWED;
        } else if (strcmp(url, "/metrics") == 0) {
                while ((n = metrics_format(&m->snap, m->slot, m->body, m->body_size)) == -ENOSPC &&
                       m->body_size < BODY_MAX) {
                        char *bigger = realloc(m->body, m->body_size * 2);

                        if (!bigger)
                                break;
                        m->body = bigger;
                        m->body_size *= 2;
                }
                if (n < 0) {
                        n = snprintf(m->body, m->body_size, "cannot format metrics\n");
                        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
                } else {
                        type = "text/plain; version=0.0.4; charset=utf-8";
                }
        } else if (strcmp(url, "/healthz") == 0) {
                /* Answered from the relay's own loop: that it answers is the news. */
                n = snprintf(m->body, m->body_size, "ok\n");
        } else if (strcmp(url, "/readyz") == 0) {
                char why[256];

                if (!metrics_ready(&m->snap, why, sizeof(why)))
                        status = MHD_HTTP_SERVICE_UNAVAILABLE;
                n = snprintf(m->body, m->body_size, "%s\n", why);
        } else {
                n = snprintf(m->body, m->body_size, "not found: try /metrics, /healthz or /readyz\n");
                status = MHD_HTTP_NOT_FOUND;
        }
        resp = MHD_create_response_from_buffer((size_t)n, m->body, MHD_RESPMEM_MUST_COPY);
        if (!resp)
                return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", type);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
        ret = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return ret;
}

/* libmicrohttpd's connection notifications: note when each connection came. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
        struct metrics *m = cls;
        struct conn_slot *c = *socket_context;

        if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
                if (c)
                        c->fd = -1;
                return;
        }
        for (c = m->conns; c < m->conns + CONN_MAX + 1; c++) {
                if (c->fd < 0) {
                        const union MHD_ConnectionInfo *info =
                                MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

                        if (!info)
                                return;
                        *c = (struct conn_slot){info->connect_fd, false, monoclock_ms()};
                        *socket_context = c;
                        return;
                }
        }
}

static int parse_address(const char *address, struct sockaddr_storage *ss, int *ret_flags)
{
        const char *colon = strrchr(address, ':');
        char host[128];
        size_t hl;
        long port;
        char *end;

        if (!colon)
                return -EINVAL;
        port = strtol(colon + 1, &end, 10);
        if (*end || port < 0 || port > 65535 || end == colon + 1)
                return -EINVAL;
        hl = (size_t)(colon - address);
        if (hl >= sizeof(host))
                return -EINVAL;
        memcpy(host, address, hl);
        host[hl] = '\0';
        memset(ss, 0, sizeof(*ss));
        if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

                host[hl - 1] = '\0';
                s6->sin6_family = AF_INET6;
                s6->sin6_port = htons((uint16_t)port);
                if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
                        return -EINVAL;
                *ret_flags = MHD_USE_IPv6;
                return 0;
        }
        {
                struct sockaddr_in *s4 = (struct sockaddr_in *)ss;

                s4->sin_family = AF_INET;
                s4->sin_port = htons((uint16_t)port);
                if (hl == 0)
                        s4->sin_addr.s_addr = htonl(INADDR_ANY);
                else if (strcmp(host, "localhost") == 0)
                        s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                else if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
                        return -EINVAL;
                *ret_flags = 0;
        }
        return 0;
}

int metrics_new(const char *address, const char *slot, struct metrics **ret_m, char *err, size_t errlen)
{
        struct sockaddr_storage ss;
        struct metrics *m;
        int flags = 0;

        if (parse_address(address, &ss, &flags) < 0) {
                snprintf(err, errlen, "invalid --http address \"%s\": expected HOST:PORT, e.g. "
                         "127.0.0.1:9187, [::1]:9187 or :9187", address);
                return -EINVAL;
        }
        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        for (int i = 0; i < CONN_MAX + 1; i++)
                m->conns[i].fd = -1;
        m->body_size = 16384;
        m->body = malloc(m->body_size);
        if (!m->body) {
                free(m);
                return -ENOMEM;
        }
        snprintf(m->slot, sizeof(m->slot), "%s", slot);
        m->daemon = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG | flags, 0, NULL, NULL, answer, m,
                                     MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)10,
                                     MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONN_MAX,
                                     MHD_OPTION_NOTIFY_CONNECTION, on_connection, m,
                                     MHD_OPTION_END);
        if (!m->daemon) {
                snprintf(err, errlen, "cannot serve metrics on \"%s\": %s", address,
                         errno ? strerror(errno) : "libmicrohttpd refused");
                free(m->body);
                free(m);
                return errno == EADDRINUSE ? -EADDRINUSE : -EIO;
        }
        *ret_m = m;
        return 0;
}

struct metrics *metrics_free(struct metrics *m)
{
        if (m) {
                MHD_stop_daemon(m->daemon);
                free(m->body);
                free(m);
        }
        return NULL;
}

int metrics_fd(const struct metrics *m)
{
        const union MHD_DaemonInfo *info =
                MHD_get_daemon_info((struct MHD_Daemon *)m->daemon, MHD_DAEMON_INFO_EPOLL_FD);

        return info ? info->epoll_fd : -1;
}

int metrics_timeout_ms(const struct metrics *m)
{
        MHD_UNSIGNED_LONG_LONG t;
        int64_t now = monoclock_ms(), left = -1;

        if (MHD_get_timeout(m->daemon, &t) == MHD_YES)
                left = t > INT_MAX ? INT_MAX : (int64_t)t;
        for (int i = 0; i < CONN_MAX + 1; i++) {
                const struct conn_slot *c = &m->conns[i];
                int64_t d = c->started_ms + CONN_DEADLINE_MS - now;

                if (c->fd >= 0 && !c->cut && (left < 0 || d < left))
                        left = d < 0 ? 0 : d;
        }
        return (int)left;
}

void metrics_serve(struct metrics *m)
{
        int64_t now = monoclock_ms();

        /* Past its deadline: shut the socket, libmicrohttpd sees the end and closes it. */
        for (int i = 0; i < CONN_MAX + 1; i++) {
                struct conn_slot *c = &m->conns[i];

                if (c->fd >= 0 && !c->cut && now - c->started_ms >= CONN_DEADLINE_MS) {
                        shutdown(c->fd, SHUT_RDWR);
                        c->cut = true;
                }
        }
        MHD_run(m->daemon);
}

void metrics_update(struct metrics *m, const struct metrics_snapshot *s)
{
        m->snap = *s;
}
