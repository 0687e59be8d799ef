// SPDX-License-Identifier: Apache-2.0
/*
 * librdkafka idempotent producer, delivery reports served through a pipe on
 * the relay's poll(). Knows nothing of PostgreSQL or the ledger.
 */
#include "producer.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <cjson/cJSON.h>
#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/*
 * A librdkafka producer's topic handles, by name. Each is made with
 * rd_kafka_topic_new() at the topic's first record, which asks the cluster
 * for the topic's metadata at once; a record produced by name
 * (RD_KAFKA_V_TOPIC) to a topic new to the producer waits instead for
 * librdkafka's next refresh of unknown topics, up to a second (librdkafka
 * 2.0.2 and 2.8 alike), and every new producer meets it: every reconnect,
 * every session of --exactly-once and each producer of its pair. A handle
 * also spares each record librdkafka's lookup of its topic by name under
 * the client's lock. Open addressing (FNV-1a, linear probing), at most half
 * full; past TOPIC_HANDLES_MAX topics records go by name.
 */
#define TOPIC_HANDLES_MAX 4096
struct topic_handles {
        struct topic_handle {
                char *name;
                rd_kafka_topic_t *rkt;
        } *v;
        size_t cap, n;           /* cap: 0 or a power of two */
};

struct producer {
        rd_kafka_t *rk;
        struct topic_handles rk_topics;
        rd_kafka_queue_t *mainq;
        /*
         * An idempotent producer's lanes (producer_fit_topic()): more
         * librdkafka producers with the first one's settings and a smaller
         * batch.size, each carrying the topics whose max.message.bytes is
         * below the first one's batch, and a route per such topic, sorted by
         * name. None for a transactional producer, whose batches all shrink
         * to all_bytes instead.
         */
        rd_kafka_conf_t *lane_conf; /* the settings of a new lane; NULL: transactional */
        struct lane {
                rd_kafka_t *rk;
                rd_kafka_queue_t *q;
                struct topic_handles topics;
                int64_t batch;      /* its batch.size, bytes */
        } lanes[PRODUCER_LANES_MAX];
        size_t nlanes;
        struct route {
                char *topic;
                struct lane *lane;
        } *routes;
        size_t nroutes, routes_cap;
        int64_t batch_bytes;     /* producer_batch_bytes() */
        int64_t all_bytes;       /* transactional: every batch at most this, bytes; 0: batch_bytes */
        rd_kafka_queue_t *adminq;  /* answers to producer_topic_config_ask() */
        /*
         * A transactional producer with producer_options.transactional_pair:
         * a second librdkafka producer (transactional.id <id>.1, no
         * statistics) and its main queue. The two take Kafka transactions in
         * turn; txn is the one whose transaction is open or comes next (rk
         * when there is no twin). Everything else (metadata, admin requests,
         * statistics) stays rk's.
         */
        rd_kafka_t *twin;
        rd_kafka_queue_t *twinq;
        struct topic_handles twin_topics;
        rd_kafka_t *txn;
        /*
         * What twin is for: false, the pair; true, only to fence "<id>.1" in
         * producer_init_transactions() (one producer: an older relay of the
         * id may have had the pair), destroyed there.
         */
        bool twin_fences_only;
        bool pair_optional;      /* producer_options.transactional_pair_optional */
        bool second_refused;     /* producer_second_id_refused() */
        bool stay;               /* producer_stay() */
        bool hurry;              /* producer_hurry(): the next producer_poll() flushes txn */
        int pipefd[2];
        producer_dr_fn *dr;
        producer_event_fn *on_event;
        void *ctx;
        int brokers_up;          /* see producer_brokers_up() */
        bool down;               /* all.brokers.down reported and not yet the way back */
        uint64_t inflight_bytes; /* producer_msg_bytes() of messages whose report is not served */
        /*
         * Why broker connections fail: the first TLS or authentication error
         * (the cause; a disconnect follows it), else the latest other one.
         */
        struct producer_error conn_error;
        bool quiet;              /* producer_check_brokers() serving errors: no events */
        bool config_asked;                      /* a producer_topic_config_ask() not yet answered */
        /* producer_topic_max_bytes_ask(): the question's number, 0 if none is open, and its answer. */
        uint64_t limit_seq;
        uint64_t limit_seq_next;
        bool limit_answered;
        int limit_ret;
        int64_t limit_bytes;
        char limit_err[256];
        bool config_answered;                   /* its answer, not yet taken */
        struct producer_topic_config config;
};

/*
 * Headers a failed message's report carries back (a resend or dead-letter
 * copies them): more than the relay ever sends, its own and up to 64 of a
 * row's headers column plus 3 dead-letter ones.
 */
#define MAX_REPORT_HEADERS 96

/*
 * producer_hurry(): how long the next producer_poll() holds librdkafka's
 * flush, ms. Long enough for a broker thread to wake and send what lingers
 * (well under a millisecond when the machine is not starved); it ends
 * sooner once every report is in.
 */
#define HURRY_MS 2

bool producer_unknown_topic(int code)
{
        return code == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART || code == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC ||
               code == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION;
}

enum producer_fault producer_classify(int code, int fatal_code)
{
        switch (code) {
        case RD_KAFKA_RESP_ERR_NO_ERROR:
                return PRODUCER_OK;
        case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
        case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
        case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
        case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
        case RD_KAFKA_RESP_ERR_INVALID_RECORD:
        case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
        case RD_KAFKA_RESP_ERR_POLICY_VIOLATION:
        case RD_KAFKA_RESP_ERR_INVALID_MSG:
        case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
        case RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT:
                return PRODUCER_FAULT_RECORD;
        case RD_KAFKA_RESP_ERR__FATAL:
                /* An idempotence sequence broken by the cluster: a new producer starts a new one. */
                switch (fatal_code) {
                case RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER:
                case RD_KAFKA_RESP_ERR_DUPLICATE_SEQUENCE_NUMBER:
                case RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID:
                case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH:
                case RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE:
                case RD_KAFKA_RESP_ERR__INCONSISTENT:
                        return PRODUCER_FAULT_CLUSTER;
                default:
                        return PRODUCER_FAULT_FATAL;
                }
        case RD_KAFKA_RESP_ERR__STATE:
        case RD_KAFKA_RESP_ERR__INVALID_ARG:
        case RD_KAFKA_RESP_ERR__FENCED:
        case RD_KAFKA_RESP_ERR_PRODUCER_FENCED:
        case RD_KAFKA_RESP_ERR__NOT_IMPLEMENTED:
        case RD_KAFKA_RESP_ERR__UNSUPPORTED_FEATURE:
        case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
        case RD_KAFKA_RESP_ERR_INVALID_REQUIRED_ACKS:
        case RD_KAFKA_RESP_ERR_UNSUPPORTED_VERSION:
                return PRODUCER_FAULT_FATAL;
        default:
                return PRODUCER_FAULT_CLUSTER;
        }
}

const char *producer_fix(int code)
{
        switch (code) {
        case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
                /* Kafka's ACLs: WRITE implies DESCRIBE, which the producer's metadata request needs. */
                return "Grant WRITE on the topic to the relay's Kafka principal (an ACL)";
        case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
                return "Grant IDEMPOTENT_WRITE on the cluster to the relay's Kafka principal (an ACL; "
                       "brokers before Kafka 3.0 need it for idempotent producers)";
        case RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP:
                return "Raise the topic's message.timestamp.before.max.ms and "
                       "message.timestamp.after.max.ms, or publish with --record-timestamp=produce";
        case RD_KAFKA_RESP_ERR__STATE:
                return "Check the -X settings: librdkafka's producer is in a state no retry leaves "
                       "(a transactional.id without transactions, for one)";
        case RD_KAFKA_RESP_ERR__SSL:
                return "Check -X ssl.ca.location: it must name the certificate of the CA that signed the "
                       "brokers' certificates (unset: the system's CAs), and --brokers must name the "
                       "brokers as their certificates do (ssl.endpoint.identification.algorithm=https); "
                       "with a client certificate (ssl.certificate.location, ssl.key.location) the "
                       "brokers must trust its CA. Do not turn the checks off";
        case RD_KAFKA_RESP_ERR__AUTHENTICATION:
        case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
                return "Check -X sasl.mechanism (the brokers': SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN), "
                       "sasl.username and the password (OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE) against "
                       "the brokers' users";
        default:
                return NULL;
        }
}

_Static_assert(PRODUCER_ERR_MSG_SIZE_TOO_LARGE == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
               "Kafka's MESSAGE_TOO_LARGE");

/*
 * @code, and for RD_KAFKA_RESP_ERR__FATAL its cause @fatal_code
 * (rd_kafka_fatal_error()), into @e. A fatal error is named by its cause,
 * which says what can be done about it (producer_fenced(), for one).
 */
static void set_error(struct producer_error *e, rd_kafka_resp_err_t code, int fatal_code,
                      const char *text)
{
        rd_kafka_resp_err_t named = code == RD_KAFKA_RESP_ERR__FATAL && fatal_code ?
                                    (rd_kafka_resp_err_t)fatal_code : code;

        e->code = named;
        e->fault = producer_classify(code, fatal_code);
        snprintf(e->name, sizeof(e->name), "%s", named ? rd_kafka_err2name(named) : "");
        snprintf(e->text, sizeof(e->text), "%s", text ? text : named ? rd_kafka_err2str(named) : "");
}

size_t producer_msg_bytes(const struct producer_msg *m)
{
        size_t n = (m->key ? m->key_len : 0) + (m->value ? m->value_len : 0);

        for (size_t i = 0; i < m->nheaders; i++)
                n += strlen(m->headers[i].name) + m->headers[i].len;
        return n;
}

/* Bytes of @v as a zigzag varint (Kafka protocol, "Record": lengths are signed varints). */
static size_t varint_bytes(int64_t v)
{
        uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
        size_t n = 1;

        while (z >= 0x80) {
                z >>= 7;
                n++;
        }
        return n;
}

size_t producer_record_batch_bytes(const struct producer_msg *m)
{
        /* attributes, then timestampDelta and offsetDelta, both 0 for a batch's first record */
        size_t body = 1 + 1 + 1;

        body += m->key ? varint_bytes((int64_t)m->key_len) + m->key_len : varint_bytes(-1);
        body += m->value ? varint_bytes((int64_t)m->value_len) + m->value_len : varint_bytes(-1);
        body += varint_bytes((int64_t)m->nheaders);
        for (size_t i = 0; i < m->nheaders; i++) {
                size_t name = strlen(m->headers[i].name);

                body += varint_bytes((int64_t)name) + name;
                body += m->headers[i].value ? varint_bytes((int64_t)m->headers[i].len) + m->headers[i].len :
                        varint_bytes(-1);
        }
        return PRODUCER_BATCH_OVERHEAD + varint_bytes((int64_t)body) + body;
}

const char *producer_header_value(const struct producer_msg *m, const char *name, char *buf, size_t size)
{
        buf[0] = '\0';
        for (size_t i = 0; i < m->nheaders; i++) {
                if (strcmp(m->headers[i].name, name) == 0 && m->headers[i].value) {
                        size_t n = m->headers[i].len < size - 1 ? m->headers[i].len : size - 1;

                        memcpy(buf, m->headers[i].value, n);
                        buf[n] = '\0';
                }
        }
        return buf;
}

static void brokers_back(struct producer *p)
{
        if (p->down) {
                p->down = false;
                p->on_event(p->ctx, PRODUCER_EVENT_BROKERS_UP, &(struct producer_error){0});
        }
}

/* @locality: thread calling rd_kafka_poll(), i.e. producer_poll(). */
static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
        struct producer *p = opaque;
        struct producer_header hdrs[MAX_REPORT_HEADERS];
        struct producer_report rep = {
                .msg = {
                        .topic = m->rkt ? rd_kafka_topic_name(m->rkt) : "",
                        .key = m->key,
                        .key_len = m->key_len,
                        .value = m->payload,
                        .value_len = m->len,
                        .ticket = (uint64_t)(uintptr_t)m->_private,
                },
        };
        rd_kafka_headers_t *kh = NULL;
        char fatal[512];
        int fatal_code = 0;

        if (rd_kafka_message_headers(m, &kh) == RD_KAFKA_RESP_ERR_NO_ERROR) {
                const char *name;
                const void *val;
                size_t len;

                for (size_t i = 0; rd_kafka_header_get_all(kh, i, &name, &val, &len) ==
                                   RD_KAFKA_RESP_ERR_NO_ERROR; i++) {
                        rep.bytes += strlen(name) + len;
                        if (m->err && rep.msg.nheaders < MAX_REPORT_HEADERS)
                                hdrs[rep.msg.nheaders++] = (struct producer_header){name, val, len};
                }
                if (m->err)
                        rep.msg.headers = hdrs;
        }
        rep.bytes += (m->key ? m->key_len : 0) + (m->payload ? m->len : 0);
        if (m->err == RD_KAFKA_RESP_ERR__FATAL)
                fatal_code = rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
        set_error(&rep.error, m->err, fatal_code, NULL);
        p->inflight_bytes -= rep.bytes < p->inflight_bytes ? rep.bytes : p->inflight_bytes;
        if (!m->err) {
                /* An acknowledgement needs a connected broker. */
                if (p->brokers_up <= 0)
                        p->brokers_up = 1;
                brokers_back(p);
        }
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
        if (up > 0)
                brokers_back(p);
        cJSON_Delete(root);
        return 0;  /* librdkafka frees json */
}

/* @locality: thread calling rd_kafka_poll(). */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
        struct producer *p = opaque;
        struct producer_error e;
        char fatal[512];
        int code;

        if (err == RD_KAFKA_RESP_ERR__FATAL) {
                code = rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
                set_error(&e, code, 0, fatal);
                e.fault = producer_classify(RD_KAFKA_RESP_ERR__FATAL, code);
                p->on_event(p->ctx, PRODUCER_EVENT_FATAL, &e);
                return;
        }
        set_error(&e, err, 0, reason);
        if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
                /* At once; the next statistics event or acknowledgement says when they are back. */
                p->brokers_up = 0;
                if (!p->down) {
                        p->down = true;
                        if (!p->quiet)
                                p->on_event(p->ctx, PRODUCER_EVENT_BROKERS_DOWN, &e);
                }
                return;
        }
        if ((p->conn_error.code != RD_KAFKA_RESP_ERR__SSL &&
             p->conn_error.code != RD_KAFKA_RESP_ERR__AUTHENTICATION) || p->conn_error.code == err)
                p->conn_error = e;
        if (p->quiet)
                return;
        /* A broker connection dropping or failing to resolve is the way to all.brokers.down. */
        if (err == RD_KAFKA_RESP_ERR__TRANSPORT || err == RD_KAFKA_RESP_ERR__RESOLVE)
                return;
        p->on_event(p->ctx, PRODUCER_EVENT_ERROR, &e);
}

/*
 * librdkafka's own log lines. What matters reaches the relay as an error
 * event or a delivery report, which it words once; the lines repeat them
 * (and normal retries such as "Coordinator load in progress"), so they are
 * debug output except for the emergencies and TXNERR: why librdkafka failed
 * a Kafka transaction, for the operator (the relay learns the error's code
 * from the transactions API, producer_transaction_error()). Nothing is
 * concluded from a line: its wording, and whether it is logged at all
 * (-X log_level), are not an interface.
 * @locality: any librdkafka thread; log_msg() writes whole lines.
 */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
        (void)rk;
        if (level <= 2 || (level <= 3 && strcmp(fac, "TXNERR") == 0))
                log_msg(LOG_LEVEL_WARNING, "kafka %s: %s", fac, buf);
        else
                log_debug("kafka %s: %s", fac, buf);
}

/*
 * The lines of a second producer the broker may refuse (only fencing
 * "<id>.1", or a pair under auto): a refusal there is expected, and the
 * relay says it once from the error's code (producer_second_id_refused()),
 * so librdkafka's FATAL and TXNERR lines about the authorization are debug
 * output rather than two alarms at every session.
 */
static void second_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
        if (strcasestr(buf, "authorization"))
                log_debug("kafka %s: %s", fac, buf);
        else
                log_cb(rk, level, fac, buf);
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

static bool user_prop(const struct producer_options *opts, const char *name)
{
        for (size_t i = 0; i < opts->nprops; i++)
                if (strcmp(opts->props[2 * i], name) == 0)
                        return true;
        return false;
}

/*
 * librdkafka 2.5.0 and later push client metrics to a broker that asks for
 * them (KIP-714, enable.metrics.push, on by default), and rd_kafka_destroy()
 * then waits up to 1 s for that to end, on a condition variable whose
 * signal can come before the wait begins (rd_kafka_telemetry_await_termination()
 * in rdkafka_telemetry.c, 2.8.0): the destroy of a producer the relay had
 * just made took a whole second, at every start of an exactly-once relay
 * (start()'s producer gives way to the transactional one) and at every
 * reconnect, and the checkpoint reader's at every read. Off unless -X
 * enable.metrics.push=true turns it on.
 */
#define METRICS_PUSH_VERSION 0x020500ff

const char *producer_metrics_push_property(void)
{
        return rd_kafka_version() >= METRICS_PUSH_VERSION ? "enable.metrics.push" : NULL;
}

/*
 * librdkafka's configuration of the producer: our defaults, then the user's
 * -X (checked by config), then what may not change. Returns 0 and
 * *ret_conf (owned by the caller), or -EINVAL with the reason in @err.
 */
static int make_conf(const struct producer_options *opts, struct producer *p, rd_kafka_conf_t **ret_conf,
                     char *err, size_t errlen)
{
        rd_kafka_conf_t *kc = rd_kafka_conf_new();
        const char *push = producer_metrics_push_property();
        char num[32];

        if (set(kc, "bootstrap.servers", opts->brokers, err, errlen) < 0 ||
            set(kc, "partitioner", "murmur2_random", err, errlen) < 0 ||
            set(kc, "linger.ms", "5", err, errlen) < 0 ||
            set(kc, "client.id", "outbox-relay", err, errlen) < 0)
                goto fail;
        snprintf(num, sizeof(num), "%lld", (long long)opts->queue_messages);
        if (opts->queue_messages > 0 && !user_prop(opts, "queue.buffering.max.messages") &&
            set(kc, "queue.buffering.max.messages", num, err, errlen) < 0)
                goto fail;
        if (push && set(kc, push, "false", err, errlen) < 0)
                goto fail;
        /* Broker states for /readyz, unless the user chose an interval. */
        if (opts->statistics && !user_prop(opts, "statistics.interval.ms") &&
            set(kc, "statistics.interval.ms", "5000", err, errlen) < 0)
                goto fail;
        for (size_t i = 0; i < opts->nprops; i++)
                if (set(kc, opts->props[2 * i], opts->props[2 * i + 1], err, errlen) < 0)
                        goto fail;
        /* Ours, never the user's: config.c refuses -X transactional.id. */
        if (opts->transactional_id && set(kc, "transactional.id", opts->transactional_id, err, errlen) < 0)
                goto fail;
        if (set(kc, "enable.idempotence", "true", err, errlen) < 0 ||
            set(kc, "acks", "all", err, errlen) < 0 ||
            set(kc, "delivery.report.only.error", "false", err, errlen) < 0)
                goto fail;
        rd_kafka_conf_set_dr_msg_cb(kc, dr_msg_cb);
        rd_kafka_conf_set_error_cb(kc, error_cb);
        rd_kafka_conf_set_stats_cb(kc, stats_cb);
        rd_kafka_conf_set_log_cb(kc, log_cb);
        rd_kafka_conf_set_opaque(kc, p);
        *ret_conf = kc;
        return 0;
fail:
        rd_kafka_conf_destroy(kc);
        return -EINVAL;
}

/* The integer value of librdkafka setting @name in @kc, or @dflt. */
static int64_t conf_int(const rd_kafka_conf_t *kc, const char *name, int64_t dflt)
{
        char v[32];
        size_t size = sizeof(v);

        if (rd_kafka_conf_get(kc, name, v, &size) != RD_KAFKA_CONF_OK)
                return dflt;
        return strtoll(v, NULL, 10);
}

static int cmp_route(const void *key, const void *elem)
{
        return strcmp(key, ((const struct route *)elem)->topic);
}

static struct route *find_route(const struct producer *p, const char *topic)
{
        return p->nroutes ? bsearch(topic, p->routes, p->nroutes, sizeof(*p->routes), cmp_route) : NULL;
}

/* A lane of batch.size @batch. Returns it, or NULL with the reason in @err. */
static struct lane *new_lane(struct producer *p, int64_t batch, char *err, size_t errlen)
{
        rd_kafka_conf_t *fc = rd_kafka_conf_dup(p->lane_conf);
        struct lane *l = &p->lanes[p->nlanes];
        char num[32], kerr[512];

        snprintf(num, sizeof(num), "%lld", (long long)batch);
        if (set(fc, "batch.size", num, err, errlen) < 0) {
                rd_kafka_conf_destroy(fc);
                return NULL;
        }
        l->rk = rd_kafka_new(RD_KAFKA_PRODUCER, fc, kerr, sizeof(kerr));
        if (!l->rk) {
                snprintf(err, errlen, "cannot create a Kafka producer with batch.size=%s: %s", num, kerr);
                rd_kafka_conf_destroy(fc);
                return NULL;
        }
        l->batch = batch;
        l->q = rd_kafka_queue_get_main(l->rk);
        rd_kafka_queue_io_event_enable(l->q, p->pipefd[1], "1", 1);
        p->nlanes++;
        return l;
}

int producer_fit_topic(struct producer *p, const char *topic, int64_t max_bytes, char *err, size_t errlen)
{
        struct lane *best = NULL;
        struct route *r;
        size_t at = 0;

        if (max_bytes <= 0 || max_bytes >= p->batch_bytes)
                return 0;
        if (!p->lane_conf) {
                snprintf(err, errlen, "a transactional producer fits its topics when it is made");
                return -EBUSY;
        }
        if ((r = find_route(p, topic)))
                return r->lane->batch <= max_bytes ? 0 : -EBUSY;
        /* The lane with the largest batch that fits; a new one rather than batches of less than half. */
        for (size_t i = 0; i < p->nlanes; i++)
                if (p->lanes[i].batch <= max_bytes && (!best || p->lanes[i].batch > best->batch))
                        best = &p->lanes[i];
        if ((!best || best->batch < max_bytes / 2) && p->nlanes < PRODUCER_LANES_MAX) {
                best = new_lane(p, max_bytes, err, errlen);
                if (!best)
                        return -EINVAL;
        }
        if (!best) {
                snprintf(err, errlen, "%d producers for topics with a lower max.message.bytes exist already",
                         PRODUCER_LANES_MAX);
                return -ENOSPC;
        }
        if (p->nroutes == p->routes_cap) {
                size_t cap = p->routes_cap ? p->routes_cap * 2 : 8;
                struct route *v = realloc(p->routes, cap * sizeof(*v));

                if (!v)
                        return -ENOMEM;
                p->routes = v;
                p->routes_cap = cap;
        }
        while (at < p->nroutes && strcmp(p->routes[at].topic, topic) < 0)
                at++;
        memmove(&p->routes[at + 1], &p->routes[at], (p->nroutes - at) * sizeof(*p->routes));
        p->routes[at] = (struct route){strdup(topic), best};
        if (!p->routes[at].topic) {
                memmove(&p->routes[at], &p->routes[at + 1], (p->nroutes - at) * sizeof(*p->routes));
                return -ENOMEM;
        }
        p->nroutes++;
        return 0;
}

/* A transactional producer's batch.size: p->all_bytes when set (producer_options.limits). -EINVAL. */
static int fit_all_batches(const struct producer *p, rd_kafka_conf_t *kc, char *err, size_t errlen)
{
        char num[32];

        snprintf(num, sizeof(num), "%lld", (long long)p->all_bytes);
        return p->all_bytes ? set(kc, "batch.size", num, err, errlen) : 0;
}

/*
 * The second transactional producer: @opts's settings with transactional.id
 * "<id>.1" and no statistics unless the user set an interval (the first
 * one's serve /readyz), its reports through the same pipe. Returns 0,
 * -EINVAL (the reason in @err), -ENOMEM.
 */
static int make_twin(const struct producer_options *opts, struct producer *p, char *err, size_t errlen)
{
        struct producer_options o = *opts;
        rd_kafka_conf_t *kc = NULL;
        char tid[512], kerr[512];
        int r;

        if ((size_t)snprintf(tid, sizeof(tid), "%s.1", opts->transactional_id) >= sizeof(tid)) {
                snprintf(err, errlen, "transactional.id \"%s\" too long", opts->transactional_id);
                return -EINVAL;
        }
        o.transactional_id = tid;
        o.statistics = false;
        r = make_conf(&o, p, &kc, err, errlen);
        if (r < 0)
                return r;
        if (!opts->transactional_pair || opts->transactional_pair_optional)
                rd_kafka_conf_set_log_cb(kc, second_log_cb);
        if (fit_all_batches(p, kc, err, errlen) < 0) {
                rd_kafka_conf_destroy(kc);
                return -EINVAL;
        }
        p->twin = rd_kafka_new(RD_KAFKA_PRODUCER, kc, kerr, sizeof(kerr));
        if (!p->twin) {
                rd_kafka_conf_destroy(kc);
                snprintf(err, errlen, "cannot create the second Kafka producer: %s", kerr);
                return -EINVAL;
        }
        p->twinq = rd_kafka_queue_get_main(p->twin);
        rd_kafka_queue_io_event_enable(p->twinq, p->pipefd[1], "1", 1);
        return 0;
}

int producer_new(const struct producer_options *opts, producer_dr_fn *dr, producer_event_fn *on_event,
                 void *ctx, struct producer **ret_producer, char *err, size_t errlen)
{
        struct producer *p = calloc(1, sizeof(*p));
        rd_kafka_conf_t *kc = NULL;
        char kerr[512];
        int r;

        if (!p)
                return -ENOMEM;
        p->pipefd[0] = p->pipefd[1] = -1;
        p->dr = dr;
        p->on_event = on_event;
        p->ctx = ctx;
        p->brokers_up = -1;
        r = make_conf(opts, p, &kc, err, errlen);
        if (r < 0)
                goto fail;
        r = -EINVAL;
        /* librdkafka closes a MessageSet at the lesser of the two (rdkafka_msgset_writer.c). */
        p->batch_bytes = conf_int(kc, "batch.size", 1000000);
        if (conf_int(kc, "message.max.bytes", 1000000) < p->batch_bytes)
                p->batch_bytes = conf_int(kc, "message.max.bytes", 1000000);
        if (opts->transactional_id) {
                /* One Kafka transaction is one producer's: every batch fits the least limit. */
                for (size_t i = 0; i < opts->nlimits; i++)
                        if (opts->limits[i].max_bytes > 0 && opts->limits[i].max_bytes < p->batch_bytes &&
                            (!p->all_bytes || opts->limits[i].max_bytes < p->all_bytes))
                                p->all_bytes = opts->limits[i].max_bytes;
                if (fit_all_batches(p, kc, err, errlen) < 0)
                        goto fail;
        } else {
                /* Lanes carry no statistics of their own: the first producer's serve /readyz. */
                p->lane_conf = rd_kafka_conf_dup(kc);
                if (!user_prop(opts, "statistics.interval.ms") &&
                    set(p->lane_conf, "statistics.interval.ms", "0", err, errlen) < 0)
                        goto fail;
        }
        p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, kerr, sizeof(kerr));
        if (!p->rk) {
                /* rd_kafka_new() checks the settings together (e.g. idempotence limits). */
                snprintf(err, errlen, "cannot create the Kafka producer: %s", kerr);
                goto fail;
        }
        kc = NULL;
        if (pipe2(p->pipefd, O_NONBLOCK | O_CLOEXEC) < 0) {
                snprintf(err, errlen, "pipe: %s", strerror(errno));
                r = -EIO;
                goto fail;
        }
        p->mainq = rd_kafka_queue_get_main(p->rk);
        rd_kafka_queue_io_event_enable(p->mainq, p->pipefd[1], "1", 1);
        p->txn = p->rk;
        if (opts->transactional_id && opts->transactional_second) {
                p->twin_fences_only = !opts->transactional_pair;
                p->pair_optional = opts->transactional_pair_optional;
                r = make_twin(opts, p, err, errlen);
                if (r < 0)
                        goto fail;
                r = -EINVAL;
        }
        p->adminq = rd_kafka_queue_new(p->rk);
        rd_kafka_queue_io_event_enable(p->adminq, p->pipefd[1], "1", 1);
        for (size_t i = 0; i < opts->nlimits && p->lane_conf; i++) {
                r = producer_fit_topic(p, opts->limits[i].topic, opts->limits[i].max_bytes, err, errlen);
                if (r < 0)
                        goto fail;
        }
        *ret_producer = p;
        return 0;
fail:
        if (kc)
                rd_kafka_conf_destroy(kc);
        producer_free(p);
        return r;
}

static size_t topic_hash(const char *name)
{
        uint64_t h = UINT64_C(14695981039346656037);

        for (const unsigned char *c = (const unsigned char *)name; *c; c++)
                h = (h ^ *c) * UINT64_C(1099511628211);
        return (size_t)h;
}

/* Put @name's @rkt into @t, which has a free slot. */
static void topic_put(struct topic_handles *t, char *name, rd_kafka_topic_t *rkt)
{
        size_t i = topic_hash(name) & (t->cap - 1);

        while (t->v[i].name)
                i = (i + 1) & (t->cap - 1);
        t->v[i] = (struct topic_handle){name, rkt};
        t->n++;
}

/* Room for one more in @t, at most half full. Returns 0 or -ENOMEM. */
static int topic_room(struct topic_handles *t)
{
        struct topic_handles bigger = {NULL, t->cap ? 2 * t->cap : 16, 0};

        if (2 * (t->n + 1) <= t->cap)
                return 0;
        bigger.v = calloc(bigger.cap, sizeof(bigger.v[0]));
        if (!bigger.v)
                return -ENOMEM;
        for (size_t i = 0; i < t->cap; i++)
                if (t->v[i].name)
                        topic_put(&bigger, t->v[i].name, t->v[i].rkt);
        free(t->v);
        *t = bigger;
        return 0;
}

/* @topic's handle in @t, or NULL when it has none yet. */
static rd_kafka_topic_t *topic_find(const struct topic_handles *t, const char *topic)
{
        if (!t->cap)
                return NULL;
        for (size_t i = topic_hash(topic) & (t->cap - 1); t->v[i].name; i = (i + 1) & (t->cap - 1))
                if (strcmp(t->v[i].name, topic) == 0)
                        return t->v[i].rkt;
        return NULL;
}

/*
 * The handle of @rk for @topic, made at its first record (struct
 * topic_handles), or NULL (too many topics, no memory, a name librdkafka
 * refuses: the record goes by name, and a bad name gets produce's error).
 */
static rd_kafka_topic_t *topic_of(rd_kafka_t *rk, struct topic_handles *t, const char *topic)
{
        rd_kafka_topic_t *rkt = topic_find(t, topic);
        char *name;

        if (rkt)
                return rkt;
        if (t->n >= TOPIC_HANDLES_MAX || topic_room(t) < 0 || !(name = strdup(topic)))
                return NULL;
        rkt = rd_kafka_topic_new(rk, topic, NULL);
        if (!rkt) {
                free(name);
                return NULL;
        }
        topic_put(t, name, rkt);
        return rkt;
}

/* Give back @t's handles; before their producer is destroyed. */
static void topic_handles_free(struct topic_handles *t)
{
        for (size_t i = 0; i < t->cap; i++)
                if (t->v[i].name) {
                        rd_kafka_topic_destroy(t->v[i].rkt);
                        free(t->v[i].name);
                }
        free(t->v);
        *t = (struct topic_handles){0};
}

/*
 * Purge what is undelivered and destroy @rk with its main queue @q and
 * topic handles @t (NULL-safe).
 */
static void destroy_rk(rd_kafka_t *rk, rd_kafka_queue_t *q, struct topic_handles *t)
{
        topic_handles_free(t);
        if (q) {
                rd_kafka_queue_io_event_enable(q, -1, NULL, 0);
                rd_kafka_queue_destroy(q);
        }
        if (rk) {
                /* Undelivered messages are dropped: the slot was never confirmed past them. */
                rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
                rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        }
}

struct producer *producer_free(struct producer *p)
{
        if (!p)
                return NULL;
        for (size_t i = 0; i < p->nlanes; i++)
                destroy_rk(p->lanes[i].rk, p->lanes[i].q, &p->lanes[i].topics);
        if (p->adminq) {
                rd_kafka_queue_io_event_enable(p->adminq, -1, NULL, 0);
                rd_kafka_queue_destroy(p->adminq);
        }
        destroy_rk(p->twin, p->twinq, &p->twin_topics);
        destroy_rk(p->rk, p->mainq, &p->rk_topics);
        if (p->lane_conf)
                rd_kafka_conf_destroy(p->lane_conf);
        for (size_t i = 0; i < p->nroutes; i++)
                free(p->routes[i].topic);
        free(p->routes);
        if (p->pipefd[0] >= 0)
                close(p->pipefd[0]);
        if (p->pipefd[1] >= 0)
                close(p->pipefd[1]);
        free(p);
        return NULL;
}

/* The librdkafka producer that carries @topic's records, and its topic handles in *ret_topics. */
static rd_kafka_t *lane_of(struct producer *p, const char *topic, struct topic_handles **ret_topics)
{
        struct route *r = p->nroutes ? find_route(p, topic) : NULL;

        if (r) {
                *ret_topics = &r->lane->topics;
                return r->lane->rk;
        }
        *ret_topics = p->txn == p->twin ? &p->twin_topics : &p->rk_topics;
        return p->txn;
}

int64_t producer_batch_bytes(const struct producer *p)
{
        return p->batch_bytes;
}

int64_t producer_topic_batch_bytes(const struct producer *p, const char *topic)
{
        const struct route *r = find_route(p, topic);

        if (p->all_bytes)
                return p->all_bytes;
        return r ? r->lane->batch : p->batch_bytes;
}

int producer_fd(const struct producer *p)
{
        return p->pipefd[0];
}

static void take_config_answer(struct producer *p, rd_kafka_event_t *ev);
static void take_limit_answer(struct producer *p, rd_kafka_event_t *ev);

int producer_poll(struct producer *p)
{
        rd_kafka_event_t *ev;
        char buf[256];

        while (read(p->pipefd[0], buf, sizeof(buf)) > 0)
                ;
        while ((ev = rd_kafka_queue_poll(p->adminq, 0)) != NULL) {
                if (rd_kafka_event_opaque(ev))
                        take_limit_answer(p, ev);
                else
                        take_config_answer(p, ev);
                rd_kafka_event_destroy(ev);
        }
        /*
         * producer_hurry(): rd_kafka_flush() serves the reports as
         * rd_kafka_poll() does, and while it runs librdkafka takes linger.ms
         * as elapsed (1.8.0 and later: rk_flushing in rdkafka_broker.c).
         * Whatever it leaves undelivered after HURRY_MS is reported later.
         */
        if (p->hurry) {
                p->hurry = false;
                if (p->txn)
                        (void)rd_kafka_flush(p->txn, HURRY_MS);
        }
        int n = rd_kafka_poll(p->rk, 0);

        if (p->twin)
                n += rd_kafka_poll(p->twin, 0);

        for (size_t i = 0; i < p->nlanes; i++)
                n += rd_kafka_poll(p->lanes[i].rk, 0);
        return n;
}

void producer_hurry(struct producer *p)
{
        p->hurry = true;
        /* The next wait returns at once and serves it (producer_fd()). */
        if (write(p->pipefd[1], "h", 1) < 0) {
                /* Full: a byte is there already, and the wait returns anyway. */
        }
}

_Static_assert(PRODUCER_ERR_STATE == RD_KAFKA_RESP_ERR__STATE, "PRODUCER_ERR_STATE is librdkafka's __STATE");
_Static_assert(PRODUCER_ERR_PURGE_QUEUE == RD_KAFKA_RESP_ERR__PURGE_QUEUE, "librdkafka's __PURGE_QUEUE");
_Static_assert(PRODUCER_ERR_PURGE_INFLIGHT == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT,
               "librdkafka's __PURGE_INFLIGHT");
_Static_assert(PRODUCER_ERR_UNKNOWN_TOPIC == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
               "PRODUCER_ERR_UNKNOWN_TOPIC is Kafka's UNKNOWN_TOPIC_OR_PARTITION");
_Static_assert(PRODUCER_ERR_INVALID_TXN_STATE == RD_KAFKA_RESP_ERR_INVALID_TXN_STATE,
               "PRODUCER_ERR_INVALID_TXN_STATE is Kafka's INVALID_TXN_STATE");

int producer_send(struct producer *p, const struct producer_msg *m, struct producer_error *ret_error)
{
        rd_kafka_headers_t *hdrs = rd_kafka_headers_new(m->nheaders);
        struct topic_handles *topics;
        rd_kafka_t *rk = lane_of(p, m->topic, &topics);
        rd_kafka_topic_t *rkt = topic_of(rk, topics, m->topic);
        rd_kafka_resp_err_t e;
        char fatal[512];

        for (size_t i = 0; i < m->nheaders; i++)
                rd_kafka_header_add(hdrs, m->headers[i].name, -1, m->headers[i].value,
                                    (ssize_t)m->headers[i].len);
        rd_kafka_vu_t vu[] = {
                rkt ? (rd_kafka_vu_t){.vtype = RD_KAFKA_VTYPE_RKT, .u.rkt = rkt} :
                      (rd_kafka_vu_t){.vtype = RD_KAFKA_VTYPE_TOPIC, .u.cstr = m->topic},
                {.vtype = RD_KAFKA_VTYPE_KEY, .u.mem = {(void *)m->key, m->key ? m->key_len : 0}},
                {.vtype = RD_KAFKA_VTYPE_VALUE, .u.mem = {(void *)m->value, m->value ? m->value_len : 0}},
                {.vtype = RD_KAFKA_VTYPE_PARTITION, .u.i32 = m->first_partition ? 0 : RD_KAFKA_PARTITION_UA},
                {.vtype = RD_KAFKA_VTYPE_MSGFLAGS, .u.i = RD_KAFKA_MSG_F_COPY},
                {.vtype = RD_KAFKA_VTYPE_TIMESTAMP, .u.i64 = m->timestamp_ms},
                {.vtype = RD_KAFKA_VTYPE_HEADERS, .u.headers = hdrs},
                {.vtype = RD_KAFKA_VTYPE_OPAQUE, .u.ptr = (void *)(uintptr_t)m->ticket},
        };
        rd_kafka_error_t *error = rd_kafka_produceva(rk, vu, sizeof(vu) / sizeof(vu[0]));

        e = error ? rd_kafka_error_code(error) : RD_KAFKA_RESP_ERR_NO_ERROR;
        rd_kafka_error_destroy(error);
        if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
                /* librdkafka owns hdrs now; its delivery report counts the bytes out. */
                p->inflight_bytes += producer_msg_bytes(m);
                return 0;
        }
        rd_kafka_headers_destroy(hdrs);
        if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
                return -ENOBUFS;
        if (e == RD_KAFKA_RESP_ERR__FATAL)
                set_error(ret_error, e, rd_kafka_fatal_error(rk, fatal, sizeof(fatal)), fatal);
        else
                set_error(ret_error, e, 0, NULL);
        return -EIO;
}

uint64_t producer_inflight_bytes(const struct producer *p)
{
        return p->inflight_bytes;
}

int producer_brokers_up(const struct producer *p)
{
        return p->brokers_up;
}

/*
 * librdkafka before 2.6.1 repeats the client nonce in its SCRAM
 * client-final-message; Kafka 4.0 and later check the nonce as RFC 5802 says
 * and refuse the login as "invalid credentials" (librdkafka issue 4895, fixed
 * in 2.6.1). Debian 12 ships librdkafka 2.0.2.
 */
#define SCRAM_FIXED_VERSION 0x020601ff
/*
 * librdkafka 2.4.0: an idle producer's main thread no longer spins reading
 * the clock before each timer (its pull request 4671); before it, each
 * producer of the pair costs CPU of its own.
 */
#define PAIR_CHEAP_VERSION 0x020400ff

/* The value of librdkafka property @name of @p, "" when unset. */
static const char *conf_value(struct producer *p, const char *name, char *buf, size_t size)
{
        size_t n = size;

        if (rd_kafka_conf_get(rd_kafka_conf(p->rk), name, buf, &n) != RD_KAFKA_CONF_OK)
                buf[0] = '\0';
        return buf;
}

const char *producer_property(const struct producer *p, const char *name, char *buf, size_t size)
{
        return conf_value((struct producer *)p, name, buf, size);
}

/* TLS to the brokers without a client certificate of the relay's. */
static bool tls_without_client_cert(struct producer *p)
{
        static const char *const certs[] = {"ssl.certificate.location", "ssl.certificate.pem",
                                            "ssl.keystore.location"};
        char v[512];

        if (!strcasestr(conf_value(p, "security.protocol", v, sizeof(v)), "ssl"))
                return false;
        for (size_t i = 0; i < sizeof(certs) / sizeof(certs[0]); i++)
                if (conf_value(p, certs[i], v, sizeof(v))[0])
                        return false;
        return true;
}

static bool old_scram(struct producer *p)
{
        char mech[64];

        return rd_kafka_version() < SCRAM_FIXED_VERSION &&
               strncmp(conf_value(p, "sasl.mechanisms", mech, sizeof(mech)), "SCRAM", 5) == 0;
}

int producer_check_brokers(struct producer *p, int timeout_ms, char *err, size_t errlen)
{
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e = rd_kafka_metadata(p->rk, 0, NULL, &md, timeout_ms);
        const struct producer_error *ce = &p->conn_error;
        int n;

        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
                /* The connections' errors wait on the main queue: serve them, without events. */
                p->quiet = true;
                rd_kafka_poll(p->rk, 0);
                p->quiet = false;
                n = snprintf(err, errlen, "%s", rd_kafka_err2str(e));
                if (ce->code && n >= 0 && (size_t)n < errlen)
                        n += snprintf(err + n, errlen - (size_t)n, " (the last broker error: %s: %s)",
                                      ce->name, ce->text);
                if ((ce->code == RD_KAFKA_RESP_ERR__SSL || ce->code == RD_KAFKA_RESP_ERR__AUTHENTICATION) &&
                    n >= 0 && (size_t)n < errlen) {
                        n += snprintf(err + n, errlen - (size_t)n, "; fix: %s", producer_fix(ce->code));
                        if (ce->code == RD_KAFKA_RESP_ERR__AUTHENTICATION && old_scram(p) && n >= 0 &&
                            (size_t)n < errlen)
                                snprintf(err + n, errlen - (size_t)n, ". If the password is right and the "
                                         "brokers run Kafka 4.0 or later: librdkafka %s, which the relay "
                                         "runs with, cannot log in to them with SCRAM (fixed in librdkafka "
                                         "2.6.1, its issue 4895); run the relay with librdkafka 2.6.1 or "
                                         "later, or log in with a client certificate "
                                         "(security.protocol=SSL) or PLAIN over SASL_SSL",
                                         rd_kafka_version_str());
                        return -EACCES;
                }
                if (ce->code == RD_KAFKA_RESP_ERR__TRANSPORT && tls_without_client_cert(p) && n >= 0 &&
                    (size_t)n < errlen) {
                        /* After the handshake: the broker's refusal arrives as a failed receive. */
                        snprintf(err + n, errlen - (size_t)n, "; fix: if the brokers' listener wants a "
                                 "client certificate (mutual TLS: OpenSSL then reports \"bad certificate\" "
                                 "or \"certificate required\"), give -X ssl.certificate.location and "
                                 "ssl.key.location, a certificate signed by a CA the brokers trust; else "
                                 "check --brokers and that the brokers are up");
                        return -EACCES;
                }
                return -EHOSTUNREACH;
        }
        rd_kafka_metadata_destroy(md);
        /* A broker answered: the cluster is reachable now. */
        if (p->brokers_up < 1)
                p->brokers_up = 1;
        return 0;
}

static int config_value(rd_kafka_event_t *ev, const char *key, char *buf, size_t size, char *err,
                        size_t errlen);

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
        int r = -EIO;

        rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, NULL, 0);
        rd_kafka_DescribeConfigs(p->rk, &res, 1, opts, q);
        ev = rd_kafka_queue_poll(q, timeout_ms + 1000);
        snprintf(err, errlen, "no answer to DescribeConfigs within %d ms", timeout_ms);
        if (ev)
                r = config_value(ev, key, buf, size, err, errlen);
        if (ev)
                rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        rd_kafka_AdminOptions_destroy(opts);
        rd_kafka_ConfigResource_destroy(res);
        return r;
}

/*
 * The value of @key in one DescribeConfigs answer @ev into @buf. Returns 0,
 * -ENOENT when the resource has no @key, -ESRCH when it is a topic that does
 * not exist, -EIO with the reason in @err.
 */
static int config_value(rd_kafka_event_t *ev, const char *key, char *buf, size_t size, char *err,
                        size_t errlen)
{
        const rd_kafka_DescribeConfigs_result_t *result;
        const rd_kafka_ConfigResource_t **rs;
        size_t nrs = 0;
        int r = -EIO;

        snprintf(err, errlen, "no answer for the resource");
        if (rd_kafka_event_error(ev)) {
                snprintf(err, errlen, "%s", rd_kafka_event_error_string(ev));
        } else if ((result = rd_kafka_event_DescribeConfigs_result(ev)) &&
                   (rs = rd_kafka_DescribeConfigs_result_resources(result, &nrs)) && nrs == 1) {
                const rd_kafka_ConfigEntry_t **entries;
                size_t n = 0;

                if (rd_kafka_ConfigResource_error(rs[0])) {
                        snprintf(err, errlen, "%s", rd_kafka_ConfigResource_error_string(rs[0]) ?
                                 rd_kafka_ConfigResource_error_string(rs[0]) :
                                 rd_kafka_err2str(rd_kafka_ConfigResource_error(rs[0])));
                        if (rd_kafka_ConfigResource_error(rs[0]) == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
                                r = -ESRCH;
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
        return r;
}

/* describe_config()'s or config_value()'s @r for max.message.bytes @v, as producer_topic_max_bytes(). */
static int max_bytes_result(int r, const char *v, int64_t *ret_bytes, char *err, size_t errlen)
{
        if (r == -ENOENT) {
                snprintf(err, errlen, "the topic's configuration has no max.message.bytes");
                return -EIO;
        }
        if (r == 0)
                *ret_bytes = strtoll(v, NULL, 10);
        return r;
}

int producer_topic_max_bytes(struct producer *p, const char *topic, int timeout_ms, int64_t *ret_bytes,
                             char *err, size_t errlen)
{
        char v[32];
        int r = describe_config(p, RD_KAFKA_RESOURCE_TOPIC, topic, "max.message.bytes", timeout_ms, v,
                                sizeof(v), err, errlen);

        return max_bytes_result(r, v, ret_bytes, err, errlen);
}

int producer_topic_max_bytes_ask(struct producer *p, const char *topic, int timeout_ms)
{
        rd_kafka_ConfigResource_t *res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
        rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(p->rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);

        /* Odd: never NULL, the opaque of producer_topic_config_ask()'s answers. */
        p->limit_seq = (++p->limit_seq_next << 1) | 1;
        p->limit_answered = false;
        rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, NULL, 0);
        rd_kafka_AdminOptions_set_opaque(opts, (void *)(uintptr_t)p->limit_seq);
        rd_kafka_DescribeConfigs(p->rk, &res, 1, opts, p->adminq);
        rd_kafka_AdminOptions_destroy(opts);
        rd_kafka_ConfigResource_destroy(res);
        return 0;
}

/* An answer to producer_topic_max_bytes_ask(): kept if it is the open question's, else dropped. */
static void take_limit_answer(struct producer *p, rd_kafka_event_t *ev)
{
        char v[32] = "";

        if (!p->limit_seq || (uintptr_t)rd_kafka_event_opaque(ev) != p->limit_seq)
                return;
        p->limit_ret = max_bytes_result(config_value(ev, "max.message.bytes", v, sizeof(v), p->limit_err,
                                                     sizeof(p->limit_err)),
                                        v, &p->limit_bytes, p->limit_err, sizeof(p->limit_err));
        p->limit_seq = 0;
        p->limit_answered = true;
}

int producer_topic_max_bytes_answer(struct producer *p, int64_t *ret_bytes, char *err, size_t errlen)
{
        if (!p->limit_answered)
                return p->limit_seq ? -EAGAIN : -ENOENT;
        p->limit_answered = false;
        if (p->limit_ret == 0)
                *ret_bytes = p->limit_bytes;
        else
                snprintf(err, errlen, "%s", p->limit_err);
        return p->limit_ret;
}

bool producer_topic_max_bytes_answered(const struct producer *p)
{
        return p->limit_answered;
}

void producer_topic_max_bytes_forget(struct producer *p)
{
        p->limit_seq = 0;
        p->limit_answered = false;
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

int producer_topic_layout(struct producer *p, const char *topic, int timeout_ms, int *ret_partitions,
                          int *ret_replicas, int *ret_brokers, char *err, size_t errlen)
{
        const struct rd_kafka_metadata *md = NULL;
        /* All topics: naming one could make the broker auto-create it. */
        rd_kafka_resp_err_t e = rd_kafka_metadata(p->rk, 1, NULL, &md, timeout_ms);
        int r = -ENOENT;

        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
                snprintf(err, errlen, "%s", rd_kafka_err2str(e));
                return -EHOSTUNREACH;
        }
        for (int t = 0; t < md->topic_cnt && r == -ENOENT; t++) {
                const rd_kafka_metadata_topic_t *mt = &md->topics[t];

                if (strcmp(mt->topic, topic) != 0 || mt->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
                        continue;
                *ret_partitions = mt->partition_cnt;
                *ret_replicas = -1;
                for (int i = 0; i < mt->partition_cnt; i++)
                        if (*ret_replicas < 0 || mt->partitions[i].replica_cnt < *ret_replicas)
                                *ret_replicas = mt->partitions[i].replica_cnt;
                r = 0;
        }
        *ret_brokers = md->broker_cnt;
        rd_kafka_metadata_destroy(md);
        return r;
}

/* The topic settings producer_topic_config_ask() reads, from one DescribeConfigs answer. */
static void parse_topic_config(rd_kafka_event_t *ev, struct producer_topic_config *c)
{
        const rd_kafka_DescribeConfigs_result_t *result = rd_kafka_event_DescribeConfigs_result(ev);
        const rd_kafka_ConfigResource_t **rs;
        const rd_kafka_ConfigEntry_t **entries;
        size_t nrs = 0, n = 0;

        *c = (struct producer_topic_config){.min_insync_replicas = -1};
        if (rd_kafka_event_error(ev) || !result ||
            !(rs = rd_kafka_DescribeConfigs_result_resources(result, &nrs)) || nrs != 1) {
                c->error = rd_kafka_event_error(ev) ? rd_kafka_event_error(ev) : RD_KAFKA_RESP_ERR__BAD_MSG;
                snprintf(c->error_text, sizeof(c->error_text), "%s", rd_kafka_event_error(ev) ?
                         rd_kafka_event_error_string(ev) : "no answer for the topic");
                return;
        }
        if (rd_kafka_ConfigResource_error(rs[0])) {
                c->error = rd_kafka_ConfigResource_error(rs[0]);
                snprintf(c->error_text, sizeof(c->error_text), "%s",
                         rd_kafka_ConfigResource_error_string(rs[0]) ?
                         rd_kafka_ConfigResource_error_string(rs[0]) : rd_kafka_err2str(c->error));
                return;
        }
        entries = rd_kafka_ConfigResource_configs(rs[0], &n);
        for (size_t i = 0; i < n; i++) {
                const char *name = rd_kafka_ConfigEntry_name(entries[i]);
                const char *v = rd_kafka_ConfigEntry_value(entries[i]);

                if (!v)
                        continue;
                if (strcmp(name, "cleanup.policy") == 0)
                        snprintf(c->cleanup_policy, sizeof(c->cleanup_policy), "%s", v);
                else if (strcmp(name, "min.insync.replicas") == 0)
                        c->min_insync_replicas = atoi(v);
        }
}

static void ask_topic_config(struct producer *p, const char *topic, int timeout_ms, rd_kafka_queue_t *q)
{
        rd_kafka_ConfigResource_t *res = rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, topic);
        rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(p->rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);

        rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, NULL, 0);
        rd_kafka_DescribeConfigs(p->rk, &res, 1, opts, q);
        rd_kafka_AdminOptions_destroy(opts);
        rd_kafka_ConfigResource_destroy(res);
}

int producer_topic_config(struct producer *p, const char *topic, int timeout_ms,
                          struct producer_topic_config *ret)
{
        rd_kafka_queue_t *q = rd_kafka_queue_new(p->rk);
        rd_kafka_event_t *ev;

        ask_topic_config(p, topic, timeout_ms, q);
        ev = rd_kafka_queue_poll(q, timeout_ms + 1000);
        if (ev) {
                parse_topic_config(ev, ret);
                rd_kafka_event_destroy(ev);
        } else {
                *ret = (struct producer_topic_config){.error = RD_KAFKA_RESP_ERR__TIMED_OUT,
                                                      .min_insync_replicas = -1};
                snprintf(ret->error_text, sizeof(ret->error_text), "no answer to DescribeConfigs within "
                         "%d ms", timeout_ms);
        }
        rd_kafka_queue_destroy(q);
        return ret->error ? -EIO : 0;
}

int producer_topic_config_ask(struct producer *p, const char *topic, int timeout_ms)
{
        if (p->config_asked)
                return -EBUSY;
        ask_topic_config(p, topic, timeout_ms, p->adminq);
        p->config_asked = true;
        return 0;
}

static void take_config_answer(struct producer *p, rd_kafka_event_t *ev)
{
        if (rd_kafka_event_type(ev) != RD_KAFKA_EVENT_DESCRIBECONFIGS_RESULT)
                return;
        parse_topic_config(ev, &p->config);
        p->config_asked = false;
        p->config_answered = true;
}

int producer_topic_config_answer(struct producer *p, struct producer_topic_config *ret)
{
        if (!p->config_answered)
                return p->config_asked ? -EAGAIN : -ENOENT;
        *ret = p->config;
        p->config_answered = false;
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

int producer_create_topic(struct producer *p, const char *topic, int partitions, int replication,
                          const char *const *config, size_t nconfig, int timeout_ms, char *err,
                          size_t errlen)
{
        char kerr[512];
        rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, replication, kerr, sizeof(kerr));
        rd_kafka_AdminOptions_t *opts;
        rd_kafka_queue_t *q;
        rd_kafka_event_t *ev;
        const rd_kafka_CreateTopics_result_t *res;
        const rd_kafka_topic_result_t **trs;
        size_t ntrs = 0;
        int r = -EIO;

        if (!nt) {
                snprintf(err, errlen, "%s", kerr);
                return -EINVAL;
        }
        for (size_t i = 0; i < nconfig; i++)
                rd_kafka_NewTopic_set_config(nt, config[2 * i], config[2 * i + 1]);
        opts = rd_kafka_AdminOptions_new(p->rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
        rd_kafka_AdminOptions_set_request_timeout(opts, timeout_ms, NULL, 0);
        rd_kafka_AdminOptions_set_operation_timeout(opts, timeout_ms, NULL, 0);
        q = rd_kafka_queue_new(p->rk);
        rd_kafka_CreateTopics(p->rk, &nt, 1, opts, q);
        ev = rd_kafka_queue_poll(q, timeout_ms + 1000);
        snprintf(err, errlen, "no answer to CreateTopics within %d ms", timeout_ms);
        if (ev && rd_kafka_event_error(ev)) {
                snprintf(err, errlen, "%s", rd_kafka_event_error_string(ev));
        } else if (ev && (res = rd_kafka_event_CreateTopics_result(ev)) &&
                   (trs = rd_kafka_CreateTopics_result_topics(res, &ntrs)) && ntrs == 1) {
                rd_kafka_resp_err_t e = rd_kafka_topic_result_error(trs[0]);

                snprintf(err, errlen, "%s", rd_kafka_topic_result_error_string(trs[0]) ?
                         rd_kafka_topic_result_error_string(trs[0]) : rd_kafka_err2str(e));
                r = e == RD_KAFKA_RESP_ERR_NO_ERROR ? 0 :
                    e == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS ? -EEXIST :
                    e == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
                    e == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED ? -EACCES : -EIO;
        }
        if (ev)
                rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        rd_kafka_AdminOptions_destroy(opts);
        rd_kafka_NewTopic_destroy(nt);
        return r;
}

/* How long producer_transaction_error() waits for librdkafka's main thread, at most. */
#define TXN_ERROR_MS 1000

/* Translate a transactions API error object (destroyed here). */
static int txn_result(rd_kafka_error_t *e, struct producer_error *ret_error)
{
        int r;

        if (!e)
                return 0;
        set_error(ret_error, rd_kafka_error_code(e), 0, rd_kafka_error_string(e));
        if (rd_kafka_error_is_fatal(e)) {
                ret_error->fault = PRODUCER_FAULT_FATAL;
                r = -EPERM;
        } else if (rd_kafka_error_txn_requires_abort(e)) {
                r = -ECANCELED;
        } else if (rd_kafka_error_is_retriable(e)) {
                r = -EAGAIN;
        } else {
                r = -EIO;
        }
        rd_kafka_error_destroy(e);
        return r;
}

int64_t producer_transaction_timeout_ms(const struct producer *p)
{
        char v[32];
        size_t size = sizeof(v);

        if (rd_kafka_conf_get(rd_kafka_conf(p->rk), "transaction.timeout.ms", v, &size) != RD_KAFKA_CONF_OK)
                return 60000;  /* librdkafka's default (CONFIGURATION.md) */
        return strtoll(v, NULL, 10);
}

bool producer_fenced(const struct producer_error *e)
{
        return e->code == RD_KAFKA_RESP_ERR__FENCED || e->code == RD_KAFKA_RESP_ERR_PRODUCER_FENCED ||
               e->code == RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH;
}

/* Destroy the second producer: from now on the first takes every transaction. */
static void drop_twin(struct producer *p)
{
        destroy_rk(p->twin, p->twinq, &p->twin_topics);
        p->twin = NULL;
        p->twinq = NULL;
        p->txn = p->rk;
}

/* The second id's init_transactions(), on a thread of its own beside the first's. */
struct twin_init {
        rd_kafka_t *rk;
        int timeout_ms;
        rd_kafka_error_t *error;
};

static void *twin_init_run(void *arg)
{
        struct twin_init *t = arg;

        t->error = rd_kafka_init_transactions(t->rk, t->timeout_ms);
        return NULL;
}

int producer_init_transactions(struct producer *p, int timeout_ms, struct producer_error *ret_error)
{
        /*
         * Both ids, before any transaction: each fences the older producers
         * of its own. At once: each waits for its coordinator and
         * InitProducerId, often a second or more at a start, so one after the
         * other the second would delay every session's first row as much again.
         * Different librdkafka instances: nothing shared between the threads.
         */
        struct twin_init twin = {p->twin, timeout_ms, NULL};
        pthread_t thread;
        bool threaded = p->twin && pthread_create(&thread, NULL, twin_init_run, &twin) == 0;
        int r = txn_result(rd_kafka_init_transactions(p->rk, timeout_ms), ret_error);

        if (p->twin && !threaded)
                twin_init_run(&twin);
        else if (threaded)
                pthread_join(thread, NULL);
        p->txn = p->rk;
        p->second_refused = false;
        if (r < 0 || !p->twin) {
                if (twin.error)
                        rd_kafka_error_destroy(twin.error);
                return r;
        }
        p->txn = p->twin;
        r = txn_result(twin.error, ret_error);
        if (r < 0 && ret_error->code == RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED &&
            (p->twin_fences_only || p->pair_optional)) {
                /*
                 * The broker does not let these credentials use "<id>.1", so
                 * no producer of theirs holds it: nothing to fence, and the
                 * first producer takes the transactions alone.
                 */
                p->second_refused = true;
                drop_twin(p);
                return 0;
        }
        if (r == 0 && p->twin_fences_only)
                drop_twin(p);
        else if (r == 0)
                p->txn = p->rk;
        return r;
}

bool producer_pair_cheap(void)
{
        return rd_kafka_version() >= PAIR_CHEAP_VERSION;
}

const char *producer_library_version(void)
{
        return rd_kafka_version_str();
}

int64_t producer_linger_ms(const struct producer *p)
{
        char buf[64];
        size_t size = sizeof(buf);
        double v;

        /* rd_kafka_conf(): the handle's own, every default and -X in it; linger.ms is an alias. */
        if (rd_kafka_conf_get(rd_kafka_conf(p->txn), "queue.buffering.max.ms", buf, &size) != RD_KAFKA_CONF_OK)
                return 0;
        v = strtod(buf, NULL);
        return v > 0 ? (int64_t)v + (v > (double)(int64_t)v) : 0;
}

bool producer_paired(const struct producer *p)
{
        return p->twin != NULL;
}

bool producer_second_id_refused(const struct producer *p)
{
        return p->second_refused;
}

const char *producer_transactional_id(const struct producer *p, char *buf, size_t size)
{
        if (rd_kafka_conf_get(rd_kafka_conf(p->txn), "transactional.id", buf, &size) != RD_KAFKA_CONF_OK)
                snprintf(buf, size, "?");
        return buf;
}

int producer_begin_transaction(struct producer *p, struct producer_error *ret_error)
{
        return txn_result(rd_kafka_begin_transaction(p->txn), ret_error);
}

int producer_transaction_error(struct producer *p, struct producer_error *ret_error)
{
        /*
         * In librdkafka's abortable state every call of the transactions API
         * but the abort returns the transaction's error (rd_kafka_txn_require_
         * states() in rdkafka_txnmgr.c): commit_transaction() does before it
         * flushes or sends anything.
         */
        int r = txn_result(rd_kafka_commit_transaction(p->txn, TXN_ERROR_MS), ret_error);

        return r == -ECANCELED ? 0 : r == -EPERM ? -EPERM : -EAGAIN;
}

int producer_commit_transaction(struct producer *p, int timeout_ms, struct producer_error *ret_error)
{
        int r = txn_result(rd_kafka_commit_transaction(p->txn, timeout_ms), ret_error);

        /*
         * Committed: the next transaction is the other producer's. Its own
         * last one ended a whole transaction ago, so its coordinator has
         * written that one's markers, where this producer's next
         * AddPartitionsToTxn would be answered CONCURRENT_TRANSACTIONS until
         * they are, and retried by librdkafka only after 20 ms
         * (rdkafka_txnmgr.c).
         */
        if (r == 0 && p->twin && !p->stay)
                p->txn = p->txn == p->rk ? p->twin : p->rk;
        return r;
}

void producer_stay(struct producer *p, bool stay)
{
        p->stay = stay;
}

void producer_purge_queued(struct producer *p)
{
        rd_kafka_purge(p->txn, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_NON_BLOCKING);
        for (size_t i = 0; i < p->nlanes; i++)
                rd_kafka_purge(p->lanes[i].rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_NON_BLOCKING);
}

int producer_abort_transaction(struct producer *p, int timeout_ms, struct producer_error *ret_error)
{
        return txn_result(rd_kafka_abort_transaction(p->txn, timeout_ms), ret_error);
}

bool producer_only_property(const char *name)
{
        static const char *const names[] = {
                "acks", "request.required.acks", "linger.ms", "queue.buffering.max.ms",
                "queue.buffering.max.messages", "queue.buffering.max.kbytes", "batch.size",
                "batch.num.messages", "compression.type", "compression.codec", "partitioner",
                "message.timeout.ms", "delivery.timeout.ms", "retries", "message.send.max.retries",
                "enable.idempotence", "delivery.report.only.error", "sticky.partitioning.linger.ms",
                "enable.gapless.guarantee", "transaction.timeout.ms", "transactional.id",
        };

        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strcmp(name, names[i]) == 0)
                        return true;
        return false;
}
