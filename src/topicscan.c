// SPDX-License-Identifier: Apache-2.0
/*
 * A bounded scan of a Kafka topic with librdkafka's simple consumer. See
 * topicscan.h. Knows librdkafka only.
 */
#include "topicscan.h"

#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "producer.h"

struct part {
        int32_t id;
        int64_t start;  /* first offset to read */
        int64_t end;    /* high watermark at open: one past the last offset to read */
};

struct topicscan {
        rd_kafka_t *rk;
        rd_kafka_topic_t *rkt;
        char *topic;
        struct part *parts;
        size_t nparts;
        int timeout_ms;
        size_t cur;                 /* partition being read */
        bool started;               /* rd_kafka_consume_start() done for parts[cur] */
        rd_kafka_message_t *msg;    /* the record last handed out */
        struct topicscan_header headers[TOPICSCAN_MAX_HEADERS];
};

static int set(rd_kafka_conf_t *kc, const char *name, const char *value, char *err, size_t errlen)
{
        char kerr[512];

        if (rd_kafka_conf_set(kc, name, value, kerr, sizeof(kerr)) != RD_KAFKA_CONF_OK) {
                snprintf(err, errlen, "librdkafka refused %s=%s for reading a topic: %s", name, value,
                         kerr);
                return -EINVAL;
        }
        return 0;
}

/* What the topic scan leaves out of -X: a producer's properties, and two only the relay's producer sets. */
static bool producer_only(const char *name)
{
        return producer_only_property(name) || strcmp(name, "allow.auto.create.topics") == 0 ||
               strcmp(name, "topic.metadata.propagation.max.ms") == 0;
}

/* librdkafka's log lines: what matters comes back as an error of a call. */
static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
        (void)rk;
        (void)level;
        (void)fac;
        (void)buf;
}

struct topicscan *topicscan_free(struct topicscan *s)
{
        if (!s)
                return NULL;
        if (s->msg)
                rd_kafka_message_destroy(s->msg);
        if (s->started)
                rd_kafka_consume_stop(s->rkt, s->parts[s->cur].id);
        if (s->rkt)
                rd_kafka_topic_destroy(s->rkt);
        /* No group: nothing to leave. */
        if (s->rk)
                rd_kafka_destroy_flags(s->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        free(s->parts);
        free(s->topic);
        free(s);
        return NULL;
}

static int kafka_errno(rd_kafka_resp_err_t e)
{
        return e == RD_KAFKA_RESP_ERR__TIMED_OUT || e == RD_KAFKA_RESP_ERR__TRANSPORT ||
               e == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN ? -ETIMEDOUT : -EIO;
}

/* The partitions of the topic and their offsets. */
static int find_range(struct topicscan *s, int64_t since_ms, char *err, size_t errlen)
{
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_topic_partition_list_t *times = NULL;
        rd_kafka_resp_err_t e;
        int r = 0;

        e = rd_kafka_metadata(s->rk, 0, s->rkt, &md, s->timeout_ms);
        if (e) {
                snprintf(err, errlen, "cannot read the metadata of topic \"%s\": %s", s->topic,
                         rd_kafka_err2str(e));
                return kafka_errno(e);
        }
        if (md->topic_cnt != 1 || md->topics[0].err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
            md->topics[0].err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC) {
                snprintf(err, errlen, "topic \"%s\" does not exist", s->topic);
                r = -ENOENT;
                goto out;
        }
        if (md->topics[0].err) {
                snprintf(err, errlen, "cannot read topic \"%s\": %s", s->topic,
                         rd_kafka_err2str(md->topics[0].err));
                r = -EIO;
                goto out;
        }
        s->nparts = (size_t)md->topics[0].partition_cnt;
        s->parts = calloc(s->nparts ? s->nparts : 1, sizeof(*s->parts));
        times = rd_kafka_topic_partition_list_new((int)s->nparts);
        if (!s->parts || !times) {
                r = -ENOMEM;
                goto out;
        }
        for (size_t i = 0; i < s->nparts; i++) {
                int64_t lo = 0, hi = 0;

                s->parts[i].id = md->topics[0].partitions[i].id;
                e = rd_kafka_query_watermark_offsets(s->rk, s->topic, s->parts[i].id, &lo, &hi,
                                                     s->timeout_ms);
                if (e) {
                        snprintf(err, errlen, "cannot read the offsets of partition %" PRId32
                                 " of topic \"%s\": %s", s->parts[i].id, s->topic,
                                 rd_kafka_err2str(e));
                        r = kafka_errno(e);
                        goto out;
                }
                s->parts[i].start = lo;
                s->parts[i].end = hi;
                rd_kafka_topic_partition_list_add(times, s->topic, s->parts[i].id)->offset = since_ms;
        }
        if (since_ms > 0 && s->nparts > 0) {
                e = rd_kafka_offsets_for_times(s->rk, times, s->timeout_ms);
                if (e) {
                        snprintf(err, errlen, "cannot find the offsets of time %" PRId64 " ms in "
                                 "topic \"%s\": %s", since_ms, s->topic, rd_kafka_err2str(e));
                        r = kafka_errno(e);
                        goto out;
                }
                for (size_t i = 0; i < s->nparts; i++) {
                        const rd_kafka_topic_partition_t *t = &times->elems[i];

                        if (t->err) {
                                snprintf(err, errlen, "cannot find the offset of time %" PRId64
                                         " ms in partition %" PRId32 " of topic \"%s\": %s", since_ms,
                                         t->partition, s->topic, rd_kafka_err2str(t->err));
                                r = kafka_errno(t->err);
                                goto out;
                        }
                        /* -1 (OFFSET_END): no record at or after the time. */
                        if (t->offset < 0 || t->offset > s->parts[i].end)
                                s->parts[i].start = s->parts[i].end;
                        else if (t->offset > s->parts[i].start)
                                s->parts[i].start = t->offset;
                }
        }
out:
        if (times)
                rd_kafka_topic_partition_list_destroy(times);
        rd_kafka_metadata_destroy(md);
        return r;
}

int topicscan_open(const struct topicscan_options *opts, struct topicscan **ret_scan, char *err,
                   size_t errlen)
{
        struct topicscan *s = calloc(1, sizeof(*s));
        rd_kafka_conf_t *kc;
        const char *push;
        char kerr[512];
        int r;

        if (!s)
                return -ENOMEM;
        s->timeout_ms = opts->timeout_ms;
        s->topic = strdup(opts->topic);
        kc = rd_kafka_conf_new();
        if (!s->topic || !kc) {
                if (kc)
                        rd_kafka_conf_destroy(kc);
                topicscan_free(s);
                return -ENOMEM;
        }
        r = set(kc, "bootstrap.servers", opts->brokers, err, errlen);
        push = producer_metrics_push_property();
        if (r == 0 && push)
                r = set(kc, push, "false", err, errlen);
        for (size_t i = 0; r == 0 && i < opts->nprops; i++)
                if (!producer_only(opts->props[2 * i]))
                        r = set(kc, opts->props[2 * i], opts->props[2 * i + 1], err, errlen);
        /*
         * No group.id, no commits; stop at the end of a partition; an offset
         * removed by retention is an error, not a silent jump; bounded prefetch.
         */
        if (r == 0)
                r = set(kc, "enable.auto.commit", "false", err, errlen);
        if (r == 0)
                r = set(kc, "enable.partition.eof", "true", err, errlen);
        if (r == 0)
                r = set(kc, "isolation.level", "read_committed", err, errlen);
        if (r == 0)
                r = set(kc, "auto.offset.reset", "error", err, errlen);
        if (r == 0)
                r = set(kc, "queued.max.messages.kbytes", TOPICSCAN_PREFETCH_KB, err, errlen);
        if (r == 0)
                r = set(kc, "client.id", "outbox-relay-redrive", err, errlen);
        if (r < 0) {
                rd_kafka_conf_destroy(kc);
                topicscan_free(s);
                return r;
        }
        rd_kafka_conf_set_log_cb(kc, quiet_log);
        s->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, kerr, sizeof(kerr));
        if (!s->rk) {
                snprintf(err, errlen, "cannot create a Kafka consumer: %s", kerr);
                rd_kafka_conf_destroy(kc);
                topicscan_free(s);
                return -EINVAL;
        }
        s->rkt = rd_kafka_topic_new(s->rk, s->topic, NULL);
        if (!s->rkt) {
                snprintf(err, errlen, "cannot read topic \"%s\": %s", s->topic,
                         rd_kafka_err2str(rd_kafka_last_error()));
                topicscan_free(s);
                return -EIO;
        }
        r = find_range(s, opts->since_ms, err, errlen);
        if (r < 0) {
                if (r == -ENOMEM)
                        snprintf(err, errlen, "out of memory");
                topicscan_free(s);
                return r;
        }
        *ret_scan = s;
        return 0;
}

void topicscan_rewind(struct topicscan *s)
{
        if (s->msg)
                s->msg = (rd_kafka_message_destroy(s->msg), NULL);
        if (s->started)
                rd_kafka_consume_stop(s->rkt, s->parts[s->cur].id);
        s->started = false;
        s->cur = 0;
}

int64_t topicscan_records(const struct topicscan *s)
{
        int64_t n = 0;

        for (size_t i = 0; i < s->nparts; i++)
                n += s->parts[i].end - s->parts[i].start;
        return n;
}

/* Done with parts[cur]: on to the next partition. */
static void next_partition(struct topicscan *s)
{
        if (s->started)
                rd_kafka_consume_stop(s->rkt, s->parts[s->cur].id);
        s->started = false;
        s->cur++;
}

/* Hand out @m as @ret; keeps @m until the next call. */
static void hand_out(struct topicscan *s, rd_kafka_message_t *m, struct topicscan_record *ret)
{
        rd_kafka_headers_t *hdrs = NULL;
        rd_kafka_timestamp_type_t tstype;
        size_t n = 0;

        *ret = (struct topicscan_record){
                .partition = m->partition,
                .offset = m->offset,
                .timestamp_ms = rd_kafka_message_timestamp(m, &tstype),
                .key = m->key,
                .key_len = m->key ? m->key_len : 0,
                .value = m->payload,
                .value_len = m->payload ? m->len : 0,
                .headers = s->headers,
        };
        if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                const char *name;
                const void *val;
                size_t len;

                for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &val, &len) ==
                                   RD_KAFKA_RESP_ERR_NO_ERROR; i++) {
                        if (n == TOPICSCAN_MAX_HEADERS) {
                                ret->headers_cut = true;
                                break;
                        }
                        s->headers[n++] = (struct topicscan_header){name, val, val ? len : 0};
                }
        }
        ret->nheaders = n;
        s->msg = m;
}

int topicscan_next(struct topicscan *s, struct topicscan_record *ret_rec, char *err, size_t errlen)
{
        if (s->msg)
                s->msg = (rd_kafka_message_destroy(s->msg), NULL);
        while (s->cur < s->nparts) {
                struct part *p = &s->parts[s->cur];
                rd_kafka_message_t *m;

                if (p->start >= p->end) {
                        next_partition(s);
                        continue;
                }
                if (!s->started) {
                        if (rd_kafka_consume_start(s->rkt, p->id, p->start) < 0) {
                                snprintf(err, errlen, "cannot read partition %" PRId32 " of topic "
                                         "\"%s\": %s", p->id, s->topic,
                                         rd_kafka_err2str(rd_kafka_last_error()));
                                return -EIO;
                        }
                        s->started = true;
                }
                m = rd_kafka_consume(s->rkt, p->id, s->timeout_ms);
                if (!m) {
                        snprintf(err, errlen, "no record of partition %" PRId32 " of topic \"%s\" "
                                 "within %d ms (offsets up to %" PRId64 " remain to be read): %s",
                                 p->id, s->topic, s->timeout_ms, p->end,
                                 rd_kafka_err2str(rd_kafka_last_error()));
                        return -ETIMEDOUT;
                }
                if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                        rd_kafka_message_destroy(m);
                        next_partition(s);
                        continue;
                }
                if (m->err) {
                        snprintf(err, errlen, "cannot read partition %" PRId32 " of topic \"%s\" "
                                 "at offset %" PRId64 ": %s", p->id, s->topic, m->offset,
                                 rd_kafka_message_errstr(m));
                        rd_kafka_message_destroy(m);
                        return -EIO;
                }
                /* Written after the scan began: not part of it. */
                if (m->offset >= p->end) {
                        rd_kafka_message_destroy(m);
                        next_partition(s);
                        continue;
                }
                if (m->offset == p->end - 1)
                        next_partition(s);
                hand_out(s, m, ret_rec);
                return 1;
        }
        return 0;
}
