// SPDX-License-Identifier: Apache-2.0
/*
 * What both redrive paths (redrive_table.c, redrive_dead_letter.c) and the
 * command (redrive.c) share: parsing --since and --until, the redrive
 * headers, quoting, the requested work IDs, and sending within the
 * in-flight bounds while serving delivery reports. It calls none of them.
 * See redrive_private.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "civil.h"
#include "cloudevents.h"
#include "log.h"
#include "redrive_private.h"

/* ---- Pure helpers ---- */

static bool digits(const char *p, int n, int *ret)
{
        int v = 0;

        for (int i = 0; i < n; i++) {
                if (p[i] < '0' || p[i] > '9')
                        return false;
                v = v * 10 + (p[i] - '0');
        }
        *ret = v;
        return true;
}

static int days_in_month(int y, int m)
{
        static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

        if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
                return 29;
        return days[m - 1];
}

int redrive_parse_time(const char *text, int64_t *ret_us)
{
        const char *p = text;
        int y, mo, d, h, mi, s = 0, oh = 0, om = 0, sign = 0;
        int64_t frac = 0, us;

        if (!digits(p, 4, &y) || p[4] != '-' || !digits(p + 5, 2, &mo) || p[7] != '-' ||
            !digits(p + 8, 2, &d) || (p[10] != 'T' && p[10] != 't' && p[10] != ' ') ||
            !digits(p + 11, 2, &h) || p[13] != ':' || !digits(p + 14, 2, &mi))
                return -EINVAL;
        p += 16;
        if (*p == ':') {
                if (!digits(p + 1, 2, &s))
                        return -EINVAL;
                p += 3;
                if (*p == '.') {
                        int n = 0;

                        for (p++; *p >= '0' && *p <= '9'; p++, n++)
                                if (n < 6)
                                        frac = frac * 10 + (*p - '0');
                        if (n == 0)
                                return -EINVAL;
                        for (; n < 6; n++)
                                frac *= 10;
                }
        }
        if (*p == 'Z' || *p == 'z') {
                p++;
        } else if (*p == '+' || *p == '-') {
                sign = *p == '+' ? 1 : -1;
                if (!digits(p + 1, 2, &oh))
                        return -EINVAL;
                p += 3;
                if (*p == ':') {
                        if (!digits(p + 1, 2, &om))
                                return -EINVAL;
                        p += 3;
                } else if (*p >= '0' && *p <= '9') {
                        if (!digits(p, 2, &om))
                                return -EINVAL;
                        p += 2;
                }
        } else {
                return -EINVAL;  /* a time without its offset means different things on different hosts */
        }
        if (*p || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 ||
            s > 59 || oh > 23 || om > 59)
                return -EINVAL;
        us = ((civil_days(y, mo, d) * 24 + h) * 60 + mi) * INT64_C(60000000) +
             s * INT64_C(1000000) + frac;
        *ret_us = us - (int64_t)sign * (oh * 60 + om) * INT64_C(60000000);
        return 0;
}

const char *redrive_usage_error(const struct relay_config *conf, bool redrive, char *buf, size_t size)
{
        int64_t since = 0, until = 0;
        const char *r = conf->reason;

        if (!redrive) {
                const char *given = conf->nwork_ids ? "--work-id" : conf->since ? "--since" :
                                    conf->until ? "--until" : conf->kind ? "--kind" :
                                    conf->reason ? "--reason" :
                                    conf->from_dead_letter ? "--from-dead-letter" :
                                    conf->error_code ? "--error-code" : NULL;

                if (!given)
                        return NULL;
                snprintf(buf, size, "%s applies only to `redrive`", given);
                return buf;
        }
        while (r && (*r == ' ' || *r == '\t'))
                r++;
        if (!r || !*r) {
                snprintf(buf, size, "redrive needs --reason=TEXT: why the records are published "
                         "again, sent with each of them (header outbox_relay_redrive_reason)");
                return buf;
        }
        if (strlen(conf->reason) > REDRIVE_REASON_MAX) {
                snprintf(buf, size, "--reason has %zu bytes; at most %d", strlen(conf->reason),
                         REDRIVE_REASON_MAX);
                return buf;
        }
        if (conf->error_code && !conf->from_dead_letter) {
                snprintf(buf, size, "--error-code selects dead letters: it needs --from-dead-letter (a "
                         "row of the outbox table has no error code)");
                return buf;
        }
        if (!conf->nwork_ids && !conf->since && !conf->error_code) {
                snprintf(buf, size, "redrive needs a selection: --work-id=ID (repeatable) or "
                         "--since=TIME [--until=TIME], optionally with --kind=KIND; with "
                         "--from-dead-letter also --error-code=CODE");
                return buf;
        }
        if (conf->nwork_ids > REDRIVE_MAX_WORK_IDS) {
                snprintf(buf, size, "%zu --work-id options; at most %d at a time", conf->nwork_ids,
                         REDRIVE_MAX_WORK_IDS);
                return buf;
        }
        if ((conf->since && redrive_parse_time(conf->since, &since) < 0) ||
            (conf->until && redrive_parse_time(conf->until, &until) < 0)) {
                snprintf(buf, size, "invalid --%s \"%s\": expected RFC 3339 with an offset, e.g. "
                         "2026-11-30T06:00:00Z or 2026-11-30 07:00:00+01:00",
                         conf->since && redrive_parse_time(conf->since, &since) < 0 ? "since" : "until",
                         conf->since && redrive_parse_time(conf->since, &since) < 0 ? conf->since :
                         conf->until);
                return buf;
        }
        if (conf->since && conf->until && until <= since) {
                snprintf(buf, size, "--until (%s) must be later than --since (%s)", conf->until,
                         conf->since);
                return buf;
        }
        return NULL;
}

size_t redrive_row_headers(const struct outbox_row *row, const char *source, const char *time_text,
                           const struct producer_header *extra, size_t nextra,
                           struct producer_header *h, size_t cap)
{
        size_t nh;

        if (cap < CE_HEADERS_MAX + row->nheaders + nextra)
                return 0;
        nh = ce_record_headers(row, source, time_text, NULL, NULL, h, cap - nextra);
        for (size_t i = 0; i < nextra; i++)
                h[nh++] = extra[i];
        return nh;
}

int redrive_dead_letter_headers(const struct producer_header *in, size_t nin,
                                const struct producer_header *extra, size_t nextra,
                                struct producer_header *h, size_t cap, const char **ret_topic,
                                size_t *ret_topic_len, char *err, size_t errlen)
{
        const struct producer_header *topic = NULL, *code = NULL;
        size_t nh = 0;

        for (size_t i = 0; i < nin; i++) {
                if (strcmp(in[i].name, "outbox_relay_topic") == 0)
                        topic = &in[i];
                else if (strcmp(in[i].name, "outbox_relay_error_code") == 0)
                        code = &in[i];
        }
        if (code && code->value && record_error_code_is_row_fault(code->value, code->len)) {
                snprintf(err, errlen, "it was dead-lettered for a fault of the row itself (%.*s): "
                         "the same record would fail again; fix the row and redrive it from the "
                         "table, or write the corrected intention under a new work ID",
                         (int)code->len, code->value);
                return -EPERM;
        }
        if (!topic || !topic->value || topic->len == 0) {
                snprintf(err, errlen, "it has no intended topic (outbox_relay_topic header)");
                return -ENOENT;
        }
        for (size_t i = 0; i < nin; i++) {
                if (strncasecmp(in[i].name, "outbox_relay_", 13) == 0)
                        continue;
                if (nh == cap)
                        return -E2BIG;
                h[nh++] = in[i];
        }
        if (nh + nextra > cap)
                return -E2BIG;
        for (size_t i = 0; i < nextra; i++)
                h[nh++] = extra[i];
        *ret_topic = topic->value;
        *ret_topic_len = topic->len;
        return (int)nh;
}

const char *redrive_quote(const char *s, size_t len, char *buf, size_t size)
{
        size_t o = 0;

        if (size < 8) {
                buf[0] = '\0';
                return buf;
        }
        buf[o++] = '"';
        for (size_t i = 0; i < len && o + 6 < size; i++) {
                unsigned char c = (unsigned char)s[i];

                if (c == '"' || c == '\\') {
                        buf[o++] = '\\';
                        buf[o++] = (char)c;
                } else if (c < 0x20 || c == 0x7f) {
                        o += (size_t)snprintf(buf + o, size - o, "\\x%02X", c);
                } else {
                        buf[o++] = (char)c;
                }
        }
        buf[o++] = '"';
        buf[o] = '\0';
        return buf;
}

const char *redrive_horizon_text(int64_t ms, char *buf, size_t size)
{
        int64_t s = ms / 1000;

        if (s % 86400 == 0)
                snprintf(buf, size, "%" PRId64 " day%s", s / 86400, s == 86400 ? "" : "s");
        else if (s % 3600 == 0)
                snprintf(buf, size, "%" PRId64 " hour%s", s / 3600, s == 3600 ? "" : "s");
        else
                snprintf(buf, size, "%" PRId64 " s", s);
        return buf;
}

/* ---- The selection ---- */

/* Index of @id (@len bytes, may hold no NUL) in the sorted rd->ids, or -1. */
static long find_id(const struct redrive *rd, const char *id, size_t len)
{
        size_t lo = 0, hi = rd->nids;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strncmp(rd->ids[mid], id, len);

                if (c == 0 && rd->ids[mid][len] != '\0')
                        c = 1;
                if (c == 0)
                        return (long)mid;
                if (c < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return -1;
}

bool redrive_wanted(const struct redrive *rd, const char *id, size_t len)
{
        return rd->nids == 0 || (!memchr(id, '\0', len) && find_id(rd, id, len) >= 0);
}

void redrive_mark_found(struct redrive *rd, const char *id, size_t len)
{
        long i = rd->nids && !memchr(id, '\0', len) ? find_id(rd, id, len) : -1;

        if (i >= 0)
                rd->found[i] = true;
}

/* ---- Kafka ---- */

int64_t redrive_wall_us(void)
{
        struct timeval tv;

        gettimeofday(&tv, NULL);
        return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

static void release(struct redrive *rd, size_t i)
{
        struct redrive_pending *p = &rd->slots[i];

        free(p->work_id);
        free(p->topic);
        free(p->from);
        *p = (struct redrive_pending){.next_free = rd->free_head};
        rd->free_head = i;
}

/* A delivery report: the only truth about a record. @locality: the thread calling producer_poll(). */
static void on_report(void *ctx, const struct producer_report *rep)
{
        struct redrive *rd = ctx;
        const struct producer_error *e = &rep->error;
        size_t i = (size_t)rep->msg.ticket;
        struct redrive_pending *p = i < rd->nslots ? &rd->slots[i] : NULL;
        char id[600];

        if (!p || !p->work_id)
                return;  /* not ours: cannot happen */
        redrive_quote(p->work_id, strlen(p->work_id), id, sizeof(id));
        rd->outstanding--;
        if (!e->code) {
                rd->res.acknowledged++;
                fprintf(rd->out, "acknowledged work ID %s from %s on topic \"%s\"\n", id, p->from,
                        p->topic);
        } else if (e->fault == PRODUCER_FAULT_RECORD) {
                rd->res.refused++;
                log_error("Kafka refused work ID %s from %s for topic \"%s\": %s (%s)%s%s", id,
                          p->from, p->topic, e->text, e->name, producer_fix(e->code) ? "; " : "",
                          producer_fix(e->code) ? producer_fix(e->code) : "");
        } else {
                rd->res.failed++;
                rd->kafka_failed = true;
                log_error("work ID %s from %s for topic \"%s\" was not acknowledged: %s (%s)", id,
                          p->from, p->topic, e->text, e->name);
        }
        release(rd, i);
}

static void on_event(void *ctx, enum producer_event event, const struct producer_error *error)
{
        struct redrive *rd = ctx;

        if (event == PRODUCER_EVENT_FATAL) {
                rd->kafka_failed = true;
                log_error("the Kafka producer failed: %s (%s)", error->text, error->name);
        } else if (event == PRODUCER_EVENT_BROKERS_DOWN) {
                log_warning("every Kafka broker is unreachable: %s; waiting for them up to "
                            "message.timeout.ms", error->text);
        }
}

/* Wait up to @timeout_ms for delivery reports and serve them. */
static void wait_kafka(struct redrive *rd, int timeout_ms)
{
        struct pollfd pfd = {producer_fd(rd->prod), POLLIN, 0};

        if (poll(&pfd, 1, timeout_ms) < 0 && errno != EINTR)
                log_warning("poll: %s", strerror(errno));
        producer_poll(rd->prod);
}

int redrive_kafka_start(struct redrive *rd, char *err, size_t errlen)
{
        const struct relay_config *conf = rd->conf;
        struct producer_options opts;
        int r;

        rd->props = calloc(2 * conf->nprops + 5, sizeof(*rd->props));
        /* Never more in flight than one redrive may select. */
        rd->nslots = (size_t)(conf->max_inflight_messages < conf->max_records ?
                              conf->max_inflight_messages : conf->max_records);
        rd->slots = calloc(rd->nslots, sizeof(*rd->slots));
        if (!rd->props || !rd->slots)
                return -ENOMEM;
        for (size_t i = 0; i < rd->nslots; i++)
                rd->slots[i].next_free = i + 1;
        rd->free_head = 0;
        for (size_t i = 0; i < conf->nprops; i++) {
                rd->props[2 * i] = conf->props[i].name;
                rd->props[2 * i + 1] = conf->props[i].value;
        }
        /*
         * Last, so they win over -X: each record in a batch of its own, so
         * that a refusal (a batch too large for the topic) is always the
         * record's own and never one of a record that only shared its batch.
         */
        rd->props[2 * conf->nprops] = "batch.num.messages";
        rd->props[2 * conf->nprops + 1] = "1";
        rd->props[2 * conf->nprops + 2] = "linger.ms";
        rd->props[2 * conf->nprops + 3] = "0";
        opts = (struct producer_options){
                .brokers = conf->brokers,
                .props = rd->props,
                .nprops = conf->nprops + 2,
                .queue_messages = conf->max_inflight_messages + 10000,
                .statistics = false,
        };
        r = producer_new(&opts, on_report, on_event, rd, &rd->prod, err, errlen);
        if (r < 0)
                return r == -EINVAL ? -EINVAL : r == -ENOMEM ? -ENOMEM : -ECONNREFUSED;
        if (producer_check_brokers(rd->prod, REDRIVE_KAFKA_TIMEOUT_MS, err, errlen) < 0) {
                char why[REDRIVE_ERRLEN];

                snprintf(why, sizeof(why), "%s", err);
                snprintf(err, errlen, "cannot reach any Kafka broker of \"%s\" within %d s: %s; "
                         "nothing was published", conf->brokers, REDRIVE_KAFKA_TIMEOUT_MS / 1000, why);
                return -ECONNREFUSED;
        }
        return 0;
}

int redrive_send(struct redrive *rd, struct producer_msg *m, const char *work_id, size_t id_len,
                 const char *from)
{
        const struct relay_config *conf = rd->conf;
        size_t bytes = producer_msg_bytes(m), i;
        struct producer_error e;
        char id[600];
        int r;

        /* Within the relay's bounds: a free slot, and room for the bytes (or nothing in flight). */
        while (!rd->kafka_failed &&
               (rd->free_head == rd->nslots ||
                (rd->outstanding > 0 &&
                 producer_inflight_bytes(rd->prod) + bytes > (uint64_t)conf->max_inflight_bytes)))
                wait_kafka(rd, 1000);
        if (rd->kafka_failed)
                return -EIO;
        i = rd->free_head;
        rd->slots[i].work_id = strndup(work_id, id_len);
        rd->slots[i].topic = strdup(m->topic);
        rd->slots[i].from = strdup(from);
        if (!rd->slots[i].work_id || !rd->slots[i].topic || !rd->slots[i].from) {
                free(rd->slots[i].work_id);
                free(rd->slots[i].topic);
                free(rd->slots[i].from);
                rd->slots[i].work_id = rd->slots[i].topic = rd->slots[i].from = NULL;
                log_error("out of memory");
                rd->kafka_failed = true;
                return -EIO;
        }
        rd->free_head = rd->slots[i].next_free;
        m->ticket = i;
        while ((r = producer_send(rd->prod, m, &e)) == -ENOBUFS && !rd->kafka_failed)
                wait_kafka(rd, 100);  /* librdkafka's queue is full: serve reports, then retry */
        redrive_quote(work_id, id_len, id, sizeof(id));
        if (r == 0) {
                rd->outstanding++;
                return 0;
        }
        release(rd, i);
        if (r == -EIO && e.fault == PRODUCER_FAULT_RECORD) {
                rd->res.refused++;
                log_error("Kafka refused work ID %s from %s for topic \"%s\": %s (%s)", id, from,
                          m->topic, e.text, e.name);
                return 0;
        }
        rd->kafka_failed = true;
        if (r == -EIO)
                log_error("cannot hand work ID %s to Kafka for topic \"%s\": %s (%s)", id, m->topic,
                          e.text, e.name);
        return -EIO;
}

void redrive_drain(struct redrive *rd)
{
        int64_t give_up = 0;

        while (rd->prod && rd->outstanding > 0) {
                if (rd->kafka_failed && !give_up)
                        give_up = redrive_wall_us() + REDRIVE_KAFKA_TIMEOUT_MS * INT64_C(1000);
                if (give_up && redrive_wall_us() > give_up)
                        break;
                wait_kafka(rd, 1000);
        }
        /* librdkafka drops what is left (no reports): those were not acknowledged. */
        rd->res.failed += rd->outstanding;
        rd->outstanding = 0;
}
