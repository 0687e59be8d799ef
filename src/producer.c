// SPDX-License-Identifier: Apache-2.0
/*
 * librdkafka idempotent producer, delivery reports served through a pipe on
 * the relay's poll(). Knows nothing of PostgreSQL or the ledger.
 */
#include "producer.h"

#include <errno.h>
#include <fcntl.h>
#include <cjson/cJSON.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

struct producer {
        rd_kafka_t *rk;
        rd_kafka_queue_t *mainq;
        int pipefd[2];
        producer_dr_fn *dr;
        producer_error_fn *on_error;
        void *ctx;
        int brokers_up;         /* from the last statistics event; -1: none yet */
};

/*
 * Headers a failed message's report carries back (a resend or dead-letter
 * copies them): more than the relay ever sends, its 8 own and up to 64 of a
 * row's headers column plus 3 dead-letter ones.
 */
#define MAX_REPORT_HEADERS 96

const char *producer_header_value(const struct producer_report *report, const char *name, char *buf,
                                  size_t size)
{
        buf[0] = '\0';
        for (size_t i = 0; i < report->nheaders; i++) {
                if (strcmp(report->headers[i].name, name) == 0 && report->headers[i].value) {
                        size_t n = report->headers[i].len < size - 1 ? report->headers[i].len : size - 1;

                        memcpy(buf, report->headers[i].value, n);
                        buf[n] = '\0';
                }
        }
        return buf;
}

/* @locality: thread calling rd_kafka_poll(), i.e. producer_poll(). */
static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
        struct producer *p = opaque;
        struct producer_header hdrs[MAX_REPORT_HEADERS];
        struct producer_report rep = {
                .ticket = (uint64_t)(uintptr_t)m->_private,
                .err = m->err,
                .errname = m->err ? rd_kafka_err2name(m->err) : "",
                .errstr = m->err ? rd_kafka_err2str(m->err) : "",
                .topic = m->rkt ? rd_kafka_topic_name(m->rkt) : "",
                .key = m->key,
                .key_len = m->key_len,
                .value = m->payload,
                .value_len = m->len,
        };
        rd_kafka_headers_t *kh = NULL;

        (void)rk;
        if (rd_kafka_message_headers(m, &kh) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                const char *name;
                const void *val;
                size_t len;

                for (size_t i = 0; rd_kafka_header_get_all(kh, i, &name, &val, &len) ==
                                   RD_KAFKA_RESP_ERR_NO_ERROR; i++) {
                        rep.header_bytes += strlen(name) + len;
                        if (m->err && rep.nheaders < MAX_REPORT_HEADERS)
                                hdrs[rep.nheaders++] = (struct producer_header){name, val, len};
                }
                if (m->err)
                        rep.headers = hdrs;
        }
        if (!m->err && p->brokers_up == 0)
                p->brokers_up = 1;  /* an acknowledgement needs a connected broker */
        p->dr(p->ctx, &rep);
}

/*
 * Statistics (librdkafka's STATISTICS.md): count the brokers whose
 * connection is "UP", skipping bootstrap entries (nodeid -1).
 * @locality: thread calling rd_kafka_poll().
 */
static int stats_cb(rd_kafka_t *rk, char *json, size_t json_len, void *opaque)
{
        struct producer *p = opaque;
        cJSON *root = cJSON_ParseWithLength(json, json_len), *b;
        int up = 0;

        (void)rk;
        if (!root)
                return 0;
        cJSON_ArrayForEach(b, cJSON_GetObjectItemCaseSensitive(root, "brokers")) {
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "nodeid");
                const cJSON *state = cJSON_GetObjectItemCaseSensitive(b, "state");

                if (cJSON_IsNumber(id) && id->valuedouble >= 0 && cJSON_IsString(state) &&
                    strcmp(state->valuestring, "UP") == 0)
                        up++;
        }
        p->brokers_up = up;
        cJSON_Delete(root);
        return 0;  /* librdkafka frees json */
}

/* @locality: thread calling rd_kafka_poll(). */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
        struct producer *p = opaque;

        (void)rk;
        if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
                p->brokers_up = 0;  /* at once; the next statistics event says when they are back */
        p->on_error(p->ctx, err == RD_KAFKA_RESP_ERR__FATAL, err, reason);
}

/* @locality: any librdkafka thread; log_msg() writes whole lines. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
        (void)rk;
        /* librdkafka retries what it logs at LOG_ERR (a refused connection): a warning here. */
        if (level <= 4)
                log_msg(LOG_LEVEL_WARNING, "kafka %s: %s", fac, buf);
        else if (level <= 6)
                log_msg(LOG_LEVEL_INFO, "kafka %s: %s", fac, buf);
        else
                log_debug("kafka %s: %s", fac, buf);
}

static int set(rd_kafka_conf_t *kc, const char *name, const char *value, char *err, size_t errlen)
{
        char kerr[512];

        if (rd_kafka_conf_set(kc, name, value, kerr, sizeof(kerr)) != RD_KAFKA_CONF_OK) {
                snprintf(err, errlen, "librdkafka refused %s=%s: %s", name, value, kerr);
                return -EINVAL;
        }
        return 0;
}

static const char *user_prop(const struct relay_config *conf, const char *name)
{
        const char *v = NULL;

        for (size_t i = 0; i < conf->nprops; i++)
                if (strcmp(conf->props[i].name, name) == 0)
                        v = conf->props[i].value;
        return v;
}

int producer_new(const struct relay_config *conf, producer_dr_fn *dr, producer_error_fn *on_error,
                 void *ctx, struct producer **ret_producer, char *err, size_t errlen)
{
        struct producer *p = calloc(1, sizeof(*p));
        rd_kafka_conf_t *kc;
        char kerr[512], num[32];
        int r = -EINVAL;

        if (!p)
                return -ENOMEM;
        p->pipefd[0] = p->pipefd[1] = -1;
        p->dr = dr;
        p->on_error = on_error;
        p->ctx = ctx;
        p->brokers_up = -1;
        kc = rd_kafka_conf_new();
        /* Our defaults first, then the user's -X (checked by config), then what may not change. */
        if (set(kc, "bootstrap.servers", conf->brokers, err, errlen) < 0 ||
            set(kc, "partitioner", "murmur2_random", err, errlen) < 0 ||
            set(kc, "linger.ms", "5", err, errlen) < 0 ||
            set(kc, "client.id", "outbox-relay", err, errlen) < 0)
                goto fail_conf;
        /* Room for our in-flight bound so that QUEUE_FULL stays exceptional. */
        snprintf(num, sizeof(num), "%lld", (long long)conf->max_inflight_messages + 10000);
        if (!user_prop(conf, "queue.buffering.max.messages") &&
            set(kc, "queue.buffering.max.messages", num, err, errlen) < 0)
                goto fail_conf;
        /* Broker states for /readyz, unless the user chose an interval. */
        if (conf->metrics_address && !user_prop(conf, "statistics.interval.ms") &&
            set(kc, "statistics.interval.ms", "5000", err, errlen) < 0)
                goto fail_conf;
        for (size_t i = 0; i < conf->nprops; i++)
                if (set(kc, conf->props[i].name, conf->props[i].value, err, errlen) < 0)
                        goto fail_conf;
        if (set(kc, "enable.idempotence", "true", err, errlen) < 0 ||
            set(kc, "acks", "all", err, errlen) < 0 ||
            set(kc, "delivery.report.only.error", "false", err, errlen) < 0)
                goto fail_conf;
        rd_kafka_conf_set_dr_msg_cb(kc, dr_msg_cb);
        rd_kafka_conf_set_error_cb(kc, error_cb);
        rd_kafka_conf_set_stats_cb(kc, stats_cb);
        rd_kafka_conf_set_log_cb(kc, log_cb);
        rd_kafka_conf_set_opaque(kc, p);
        p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, kerr, sizeof(kerr));
        if (!p->rk) {
                /* rd_kafka_new() checks the settings together (e.g. idempotence limits). */
                snprintf(err, errlen, "cannot create the Kafka producer: %s", kerr);
                r = -EINVAL;
                goto fail_conf;
        }
        if (pipe2(p->pipefd, O_NONBLOCK | O_CLOEXEC) < 0) {
                snprintf(err, errlen, "pipe: %s", strerror(errno));
                r = -EIO;
                goto fail;
        }
        p->mainq = rd_kafka_queue_get_main(p->rk);
        rd_kafka_queue_io_event_enable(p->mainq, p->pipefd[1], "1", 1);
        *ret_producer = p;
        return 0;
fail_conf:
        rd_kafka_conf_destroy(kc);
fail:
        producer_free(p);
        return r;
}

struct producer *producer_free(struct producer *p)
{
        if (!p)
                return NULL;
        if (p->mainq) {
                rd_kafka_queue_io_event_enable(p->mainq, -1, NULL, 0);
                rd_kafka_queue_destroy(p->mainq);
        }
        if (p->rk) {
                /* Undelivered messages are dropped: the slot was never confirmed past them. */
                rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
                rd_kafka_destroy_flags(p->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        }
        if (p->pipefd[0] >= 0)
                close(p->pipefd[0]);
        if (p->pipefd[1] >= 0)
                close(p->pipefd[1]);
        free(p);
        return NULL;
}

int producer_fd(const struct producer *p)
{
        return p->pipefd[0];
}

int producer_poll(struct producer *p)
{
        char buf[256];

        while (read(p->pipefd[0], buf, sizeof(buf)) > 0)
                ;
        return rd_kafka_poll(p->rk, 0);
}

int producer_send(struct producer *p, const char *topic, const char *key, size_t key_len,
                  const char *value, size_t value_len, int64_t timestamp_ms,
                  const struct producer_header *headers, size_t nheaders, uint64_t ticket, char *err,
                  size_t errlen)
{
        rd_kafka_headers_t *hdrs = rd_kafka_headers_new(nheaders);
        rd_kafka_resp_err_t e;

        for (size_t i = 0; i < nheaders; i++)
                rd_kafka_header_add(hdrs, headers[i].name, -1, headers[i].value, (ssize_t)headers[i].len);
        e = rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(topic),
                              RD_KAFKA_V_KEY(key, key ? key_len : 0),
                              RD_KAFKA_V_VALUE((void *)value, value ? value_len : 0),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_TIMESTAMP(timestamp_ms),
                              RD_KAFKA_V_HEADERS(hdrs),
                              RD_KAFKA_V_OPAQUE((void *)(uintptr_t)ticket),
                              RD_KAFKA_V_END);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
                return 0;  /* librdkafka owns hdrs now */
        rd_kafka_headers_destroy(hdrs);
        snprintf(err, errlen, "%s", rd_kafka_err2str(e));
        switch (e) {
        case RD_KAFKA_RESP_ERR__QUEUE_FULL:
                return -ENOBUFS;
        case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
        case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
                return -ENOENT;
        case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
                return -EMSGSIZE;
        default:
                return -EIO;
        }
}

int producer_brokers_up(const struct producer *p)
{
        return p->brokers_up;
}

int producer_outq_len(struct producer *p)
{
        return rd_kafka_outq_len(p->rk);
}

int producer_check_brokers(struct producer *p, int timeout_ms, char *err, size_t errlen)
{
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e = rd_kafka_metadata(p->rk, 0, NULL, &md, timeout_ms);

        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
                snprintf(err, errlen, "%s", rd_kafka_err2str(e));
                return -EHOSTUNREACH;
        }
        rd_kafka_metadata_destroy(md);
        return 0;
}

/*
 * One DescribeConfigs request for resource @type @resname; copies the value
 * of @key into @buf. Returns 0, -ENOENT when the resource has no @key, -EIO
 * with the reason in @err.
 */
static int describe_config(struct producer *p, rd_kafka_ResourceType_t type, const char *resname,
                           const char *key, int timeout_ms, char *buf, size_t size, char *err,
                           size_t errlen)
{
        rd_kafka_ConfigResource_t *res = rd_kafka_ConfigResource_new(type, resname);
        rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(p->rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
        rd_kafka_queue_t *q = rd_kafka_queue_new(p->rk);
        rd_kafka_event_t *ev;
        const rd_kafka_DescribeConfigs_result_t *result;
        const rd_kafka_ConfigResource_t **rs;
        size_t nrs = 0;
        int r = -EIO;

        rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, NULL, 0);
        rd_kafka_DescribeConfigs(p->rk, &res, 1, opts, q);
        ev = rd_kafka_queue_poll(q, timeout_ms + 1000);
        snprintf(err, errlen, "no answer to DescribeConfigs within %d ms", timeout_ms);
        if (ev && rd_kafka_event_error(ev)) {
                snprintf(err, errlen, "%s", rd_kafka_event_error_string(ev));
        } else if (ev && (result = rd_kafka_event_DescribeConfigs_result(ev)) &&
                   (rs = rd_kafka_DescribeConfigs_result_resources(result, &nrs)) && nrs == 1) {
                const rd_kafka_ConfigEntry_t **entries;
                size_t n = 0;

                if (rd_kafka_ConfigResource_error(rs[0])) {
                        snprintf(err, errlen, "%s", rd_kafka_ConfigResource_error_string(rs[0]));
                } else {
                        r = -ENOENT;
                        entries = rd_kafka_ConfigResource_configs(rs[0], &n);
                        for (size_t i = 0; i < n; i++) {
                                const char *v = rd_kafka_ConfigEntry_value(entries[i]);

                                if (strcmp(rd_kafka_ConfigEntry_name(entries[i]), key) == 0 && v) {
                                        snprintf(buf, size, "%s", v);
                                        r = 0;
                                }
                        }
                }
        }
        if (ev)
                rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        rd_kafka_AdminOptions_destroy(opts);
        rd_kafka_ConfigResource_destroy(res);
        return r;
}

int producer_topic_max_bytes(struct producer *p, const char *topic, int timeout_ms, int64_t *ret_bytes,
                             char *err, size_t errlen)
{
        char v[32];
        int r = describe_config(p, RD_KAFKA_RESOURCE_TOPIC, topic, "max.message.bytes", timeout_ms, v,
                                sizeof(v), err, errlen);

        if (r == -ENOENT) {
                snprintf(err, errlen, "the topic's configuration has no max.message.bytes");
                return -EIO;
        }
        if (r == 0)
                *ret_bytes = strtoll(v, NULL, 10);
        return r;
}

int producer_topics_exist(struct producer *p, const char *const *topics, size_t n, int timeout_ms,
                          bool *ret_exists, int32_t *ret_broker_id, char *err, size_t errlen)
{
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e = rd_kafka_metadata(p->rk, 1, NULL, &md, timeout_ms);

        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
                snprintf(err, errlen, "%s", rd_kafka_err2str(e));
                return -EHOSTUNREACH;
        }
        for (size_t i = 0; i < n; i++) {
                ret_exists[i] = false;
                for (int t = 0; t < md->topic_cnt; t++)
                        if (strcmp(md->topics[t].topic, topics[i]) == 0 &&
                            md->topics[t].err != RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
                                ret_exists[i] = true;
        }
        *ret_broker_id = md->broker_cnt > 0 ? md->brokers[0].id : md->orig_broker_id;
        rd_kafka_metadata_destroy(md);
        return 0;
}

int producer_broker_config(struct producer *p, int32_t broker_id, const char *name, int timeout_ms,
                           char *ret_value, size_t size, char *err, size_t errlen)
{
        char id[16];

        snprintf(id, sizeof(id), "%d", (int)broker_id);
        return describe_config(p, RD_KAFKA_RESOURCE_BROKER, id, name, timeout_ms, ret_value, size, err,
                               errlen);
}

int producer_fatal_error(struct producer *p, char *buf, size_t size)
{
        return (int)rd_kafka_fatal_error(p->rk, buf, size);
}
