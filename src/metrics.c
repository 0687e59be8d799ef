// SPDX-License-Identifier: Apache-2.0
/*
 * /metrics and /healthz over libmicrohttpd in external-poll (epoll) mode.
 * See metrics.h. Knows nothing of PostgreSQL or Kafka.
 */
#include "metrics.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct metrics {
        struct MHD_Daemon *daemon;
        struct metrics_snapshot snap;
        char slot[64];
        char body[8192];
};

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
               "wal2json records not published (updates, deletes, truncates, messages).", "%llu",
               (unsigned long long)s->c.ignored);
        METRIC("counter", "stream_starts_total", "Replication streams started.", "%llu",
               (unsigned long long)s->c.connects);
        METRIC("counter", "reconnects_total", "Reconnects after a lost stream.", "%llu",
               (unsigned long long)s->c.reconnects);
        METRIC("counter", "producer_restarts_total", "Kafka producers discarded and recreated.", "%llu",
               (unsigned long long)s->c.producer_restarts);
        METRIC("counter", "status_updates_total", "Standby status updates sent.", "%llu",
               (unsigned long long)s->c.status_updates);
        METRIC("gauge", "confirmed_flush_lsn", "LSN confirmed to the server, in bytes.", "%llu",
               (unsigned long long)s->flush_lsn);
        METRIC("gauge", "received_lsn", "LSN of the newest change received, in bytes.", "%llu",
               (unsigned long long)s->write_lsn);
        METRIC("gauge", "slot_lag_bytes",
               "Server WAL end minus the confirmed LSN: WAL the slot retains for the relay.", "%llu",
               (unsigned long long)lag);
        METRIC("gauge", "outstanding_messages", "Messages waiting for a delivery report.", "%llu",
               (unsigned long long)s->outstanding);
        METRIC("gauge", "inflight_bytes", "Key and value bytes waiting for a delivery report.", "%llu",
               (unsigned long long)s->inflight_bytes);
        METRIC("gauge", "oldest_unpublished_seconds",
               "Age of the oldest transaction with unacknowledged messages.", "%.3f",
               s->oldest_unacked_ms / 1000.0);
        METRIC("gauge", "streaming", "1 while a replication stream is open.", "%d", s->streaming ? 1 : 0);
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
                n = snprintf(m->body, sizeof(m->body), "method not allowed\n");
                status = MHD_HTTP_METHOD_NOT_ALLOWED;
        } else if (strcmp(url, "/metrics") == 0) {
                n = metrics_format(&m->snap, m->slot, m->body, sizeof(m->body));
                if (n < 0)
                        n = 0;
                type = "text/plain; version=0.0.4; charset=utf-8";
        } else if (strcmp(url, "/healthz") == 0) {
                status = m->snap.streaming ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE;
                n = snprintf(m->body, sizeof(m->body), "%s\n", m->snap.streaming ? "ok" : "not streaming");
        } else {
                n = snprintf(m->body, sizeof(m->body), "not found: try /metrics or /healthz\n");
                status = MHD_HTTP_NOT_FOUND;
        }
        resp = MHD_create_response_from_buffer((size_t)n, m->body, MHD_RESPMEM_MUST_COPY);
        if (!resp)
                return MHD_NO;
        MHD_add_response_header(resp, "Content-Type", type);
        ret = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return ret;
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
                snprintf(err, errlen, "invalid --metrics-address \"%s\": expected HOST:PORT, e.g. "
                         "127.0.0.1:9187, [::1]:9187 or :9187", address);
                return -EINVAL;
        }
        m = calloc(1, sizeof(*m));
        if (!m)
                return -ENOMEM;
        snprintf(m->slot, sizeof(m->slot), "%s", slot);
        m->daemon = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG | flags, 0, NULL, NULL, answer, m,
                                     MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)10,
                                     MHD_OPTION_CONNECTION_LIMIT, (unsigned int)16,
                                     MHD_OPTION_END);
        if (!m->daemon) {
                snprintf(err, errlen, "cannot serve metrics on \"%s\": %s", address,
                         errno ? strerror(errno) : "libmicrohttpd refused");
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

void metrics_serve(struct metrics *m)
{
        MHD_run(m->daemon);
}

void metrics_update(struct metrics *m, const struct metrics_snapshot *s)
{
        m->snap = *s;
}
