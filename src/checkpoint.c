// SPDX-License-Identifier: Apache-2.0
/*
 * Checkpoint records: their JSON value and reading the newest of a key. See
 * checkpoint.h. Knows librdkafka and cJSON, nothing of PostgreSQL.
 */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lsn.h"
#include "monoclock.h"
#include "producer.h"

#define WINDOW_FIRST 256   /* records read from the end first; the window doubles each time */

uint64_t checkpoint_fnv(uint64_t h, const void *p, size_t n)
{
        for (const unsigned char *b = p; n--; b++) {
                h ^= *b;
                h *= UINT64_C(0x100000001b3);
        }
        return h;
}

void checkpoint_digest(const char *text, char buf[17])
{
        snprintf(buf, 17, "%016" PRIx64, checkpoint_fnv(CHECKPOINT_FNV_START, text, strlen(text)));
}

int checkpoint_key(const char *system_id, const char *dbname, const char *slot, char *buf, size_t size)
{
        int n = snprintf(buf, size, "%s/%s/%s", system_id, dbname, slot);

        return n < 0 || (size_t)n >= size ? -ENOSPC : n;
}

int checkpoint_format(const struct checkpoint *c, char *buf, size_t size)
{
        cJSON *o = cJSON_CreateObject();
        char a[LSN_STRLEN], b[LSN_STRLEN], num[32], *text;
        int n;

        if (!o)
                return -ENOMEM;
        cJSON_AddNumberToObject(o, "version", 1);
        cJSON_AddStringToObject(o, "lsn", lsn_format(c->lsn, a));
        cJSON_AddStringToObject(o, "txn_end_lsn", lsn_format(c->txn_end_lsn, b));
        /* An integer as its text: cJSON numbers are doubles. */
        snprintf(num, sizeof(num), "%" PRIu64, c->txn_rows);
        cJSON_AddRawToObject(o, "txn_rows", num);
        cJSON_AddNumberToObject(o, "timeline", c->timeline);
        cJSON_AddStringToObject(o, "digest", c->digest);
        cJSON_AddStringToObject(o, "mapping", c->mapping);
        cJSON_AddStringToObject(o, "mode", c->mode);
        cJSON_AddStringToObject(o, "writer", c->writer);
        cJSON_AddStringToObject(o, "time", c->time);
        if (c->publication[0])
                cJSON_AddStringToObject(o, "publication", c->publication);
        text = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!text)
                return -ENOMEM;
        n = snprintf(buf, size, "%s", text);
        cJSON_free(text);
        return n < 0 || (size_t)n >= size ? -ENOSPC : n;
}

static void copy_string(const cJSON *o, const char *name, char *buf, size_t size)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

        snprintf(buf, size, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

static int get_lsn(const cJSON *o, const char *name, uint64_t *ret)
{
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

        if (!cJSON_IsString(v))
                return -EBADMSG;
        return lsn_parse(v->valuestring, strlen(v->valuestring), ret) < 0 ? -EBADMSG : 0;
}

int checkpoint_parse(const char *value, size_t len, struct checkpoint *ret)
{
        cJSON *o = cJSON_ParseWithLength(value, len);
        struct checkpoint c = {0};
        const cJSON *rows, *tli;
        int r = -EBADMSG;

        if (!cJSON_IsObject(o) || get_lsn(o, "lsn", &c.lsn) < 0)
                goto out;
        if (get_lsn(o, "txn_end_lsn", &c.txn_end_lsn) < 0)
                c.txn_end_lsn = LSN_INVALID;
        rows = cJSON_GetObjectItemCaseSensitive(o, "txn_rows");
        if (cJSON_IsNumber(rows) && rows->valuedouble >= 0)
                c.txn_rows = (uint64_t)rows->valuedouble;
        tli = cJSON_GetObjectItemCaseSensitive(o, "timeline");
        if (cJSON_IsNumber(tli) && tli->valuedouble >= 1 && tli->valuedouble <= UINT32_MAX)
                c.timeline = (uint32_t)tli->valuedouble;
        copy_string(o, "digest", c.digest, sizeof(c.digest));
        copy_string(o, "mapping", c.mapping, sizeof(c.mapping));
        copy_string(o, "mode", c.mode, sizeof(c.mode));
        copy_string(o, "writer", c.writer, sizeof(c.writer));
        copy_string(o, "time", c.time, sizeof(c.time));
        copy_string(o, "publication", c.publication, sizeof(c.publication));
        *ret = c;
        r = 0;
out:
        cJSON_Delete(o);
        return r;
}

int checkpoint_timeline_end(const char *history, size_t len, uint32_t tli, uint64_t *ret_lsn)
{
        const char *p = history, *end = history ? history + len : NULL;

        while (p && p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                const char *eol = nl ? nl : end;
                char line[128], lsn[64];
                unsigned long parent;
                uint64_t at;

                snprintf(line, sizeof(line), "%.*s", (int)(eol - p < 127 ? eol - p : 127), p);
                p = eol + 1;
                if (sscanf(line, "%lu %63s", &parent, lsn) != 2 || line[0] == '#')
                        continue;
                if (parent == tli && lsn_parse(lsn, strlen(lsn), &at) == 0) {
                        *ret_lsn = at;
                        return 0;
                }
        }
        return -ENOENT;
}

static int set(rd_kafka_conf_t *kc, const char *name, const char *value, char *err, size_t errlen)
{
        char kerr[512];

        if (rd_kafka_conf_set(kc, name, value, kerr, sizeof(kerr)) != RD_KAFKA_CONF_OK) {
                snprintf(err, errlen, "librdkafka refused %s=%s for the checkpoint reader: %s", name,
                         value, kerr);
                return -EINVAL;
        }
        return 0;
}

/* librdkafka's log lines of the short-lived reader are not worth the relay's log. */
static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
        (void)rk;
        (void)level;
        (void)fac;
        (void)buf;
}


/*
 * Kafka's ACLs refuse the relay's principal: ListOffsets without DESCRIBE,
 * Fetch without READ on the topic. No retry changes that.
 */
static bool refused(rd_kafka_resp_err_t e)
{
        return e == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED;
}

#define LEADER_RETRY_MS 100  /* between ListOffsets asked again while a partition's leader moves */

/*
 * ListOffsets errors of a partition whose leader is being elected or moves
 * (Kafka's protocol: retriable, cured once the client knows the new
 * leader); librdkafka refreshes its metadata on them.
 */
static bool leader_moving(rd_kafka_resp_err_t e)
{
        switch (e) {
        case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
        case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
        case RD_KAFKA_RESP_ERR_REPLICA_NOT_AVAILABLE:
        case RD_KAFKA_RESP_ERR_OFFSET_NOT_AVAILABLE:
        case RD_KAFKA_RESP_ERR_FENCED_LEADER_EPOCH:
        case RD_KAFKA_RESP_ERR_UNKNOWN_LEADER_EPOCH:
                return true;
        default:
                return false;
        }
}

/*
 * Read [@from, @to) of partition 0 with the simple (legacy) consumer, which
 * needs no consumer group, and remember the newest record of @key in @ret.
 * Returns 1 if one was found, 0 if not, negative on failure.
 */
static int read_window(rd_kafka_t *rk, rd_kafka_topic_t *rkt, const char *topic, const char *key,
                       int64_t from, int64_t to, int64_t deadline, struct checkpoint *ret, char *err,
                       size_t errlen)
{
        size_t klen = strlen(key);
        int found = 0;
        int r = 0;

        (void)rk;
        if (rd_kafka_consume_start(rkt, 0, from) < 0) {
                snprintf(err, errlen, "cannot read partition 0 of \"%s\": %s", topic,
                         rd_kafka_err2str(rd_kafka_last_error()));
                return -EIO;
        }
        for (;;) {
                int64_t left = deadline - monoclock_ms();
                rd_kafka_message_t *m;

                if (left <= 0) {
                        snprintf(err, errlen, "no end of the checkpoint topic \"%s\" in time (offsets "
                                 "%" PRId64 " to %" PRId64 ")", topic, from, to);
                        r = -ETIMEDOUT;
                        break;
                }
                m = rd_kafka_consume(rkt, 0, (int)(left > 200 ? 200 : left));
                if (!m)
                        continue;
                if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                        rd_kafka_message_destroy(m);
                        break;
                }
                if (m->err) {
                        snprintf(err, errlen, "cannot read the checkpoint topic \"%s\": %s", topic,
                                 rd_kafka_message_errstr(m));
                        r = refused(m->err) ? -EACCES : -EIO;
                        rd_kafka_message_destroy(m);
                        break;
                }
                if (m->key_len == klen && memcmp(m->key, key, klen) == 0 && m->offset < to) {
                        struct checkpoint c;

                        if (!m->payload || checkpoint_parse(m->payload, m->len, &c) < 0) {
                                snprintf(err, errlen, "the checkpoint record of \"%s\" at offset %" PRId64
                                         " of \"%s\" is not a checkpoint: %.*s", key, m->offset, topic,
                                         m->payload ? (int)(m->len > 200 ? 200 : m->len) : 6,
                                         m->payload ? (const char *)m->payload : "(null)");
                                found = -EBADMSG;
                        } else {
                                *ret = c;
                                found = 1;
                        }
                }
                if (m->offset >= to - 1) {
                        rd_kafka_message_destroy(m);
                        break;
                }
                rd_kafka_message_destroy(m);
        }
        rd_kafka_consume_stop(rkt, 0);
        return r < 0 ? r : found;
}

/*
 * The end of what is decided in partition 0: an offset at or past the high
 * watermark that the first fetch saw, below which every Kafka transaction
 * has committed or aborted. A read_committed consumer stops at the last
 * stable offset (LSO), the first offset of the oldest transaction still
 * open there: a transaction of another producer left open (another
 * --exactly-once relay stopped or frozen in a commit) hides every record
 * written after it, a newer checkpoint of this key too, until it ends. So
 * reading up to the LSO is not reading to the end: wait until the LSO has
 * reached what the high watermark was when the read began. @lso is the LSO
 * that ListOffsets gave. Returns 0 and *ret_end, -ETIMEDOUT (the reason in
 * @err), -EIO.
 */
static int decided_end(rd_kafka_t *rk, rd_kafka_topic_t *rkt, const char *topic, int64_t lso,
                       int64_t deadline, int64_t *ret_end, char *err, size_t errlen)
{
        int64_t hwm = -1, lo, hi, eof = -1;
        int r = 0;

        if (rd_kafka_consume_start(rkt, 0, lso) < 0) {
                snprintf(err, errlen, "cannot read partition 0 of \"%s\": %s", topic,
                         rd_kafka_err2str(rd_kafka_last_error()));
                return -EIO;
        }
        for (;;) {
                int64_t left = deadline - monoclock_ms();
                rd_kafka_message_t *m;

                if (left <= 0) {
                        snprintf(err, errlen, "the last stable offset of the checkpoint topic \"%s\" "
                                 "stays at %" PRId64 ", behind its end at %" PRId64 ": a Kafka "
                                 "transaction of another producer is open there (another "
                                 "--exactly-once relay stopped or frozen in a commit?) and can hide a "
                                 "newer checkpoint of this slot; not deciding until it ends (at the "
                                 "latest after that producer's transaction.timeout.ms). A relay with a "
                                 "--checkpoint-topic of its own never waits on another", topic,
                                 eof >= 0 ? eof : lso, hwm);
                        r = -ETIMEDOUT;
                        break;
                }
                m = rd_kafka_consume(rkt, 0, (int)(left > 200 ? 200 : left));
                if (m && m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                        snprintf(err, errlen, "cannot read the checkpoint topic \"%s\": %s", topic,
                                 rd_kafka_message_errstr(m));
                        r = refused(m->err) ? -EACCES : -EIO;
                        rd_kafka_message_destroy(m);
                        break;
                }
                if (m && m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
                        eof = m->offset;
                if (m)
                        rd_kafka_message_destroy(m);
                /* The high watermark the first fetch answered: what exists now, decided or not. */
                if (hwm < 0 && rd_kafka_get_watermark_offsets(rk, topic, 0, &lo, &hi) ==
                               RD_KAFKA_RESP_ERR_NO_ERROR && hi >= 0)
                        hwm = hi;
                if (hwm >= 0 && eof >= hwm) {
                        *ret_end = eof;
                        break;
                }
        }
        rd_kafka_consume_stop(rkt, 0);
        return r;
}

int checkpoint_read(const struct checkpoint_source *src, const char *key, int timeout_ms,
                    struct checkpoint *ret, bool *ret_found, bool *ret_no_topic, char *err,
                    size_t errlen)
{
        int64_t deadline = monoclock_ms() + timeout_ms, lo = 0, hi = 0, to, from, window = WINDOW_FIRST;
        rd_kafka_conf_t *kc = rd_kafka_conf_new();
        const char *push = producer_metrics_push_property();
        rd_kafka_resp_err_t e;
        rd_kafka_topic_t *rkt;
        char kerr[512];
        rd_kafka_t *rk;
        int r;

        *ret_found = false;
        *ret_no_topic = false;
        /*
         * A fetch at the partition's end waits fetch.wait.max.ms (librdkafka's
         * default 500 ms) for data before the broker answers, and the read ends
         * at the end twice (the decided end, then the newest window): a second
         * of every start and reconnect. The end is what the reader waits for.
         */
        if (set(kc, "bootstrap.servers", src->brokers, err, errlen) < 0 ||
            set(kc, "fetch.wait.max.ms", "10", err, errlen) < 0 ||
            (push && set(kc, push, "false", err, errlen) < 0))
                goto fail_conf;
        for (size_t i = 0; i < src->nprops; i++)
                if (!producer_only_property(src->props[2 * i]) &&
                    set(kc, src->props[2 * i], src->props[2 * i + 1], err, errlen) < 0)
                        goto fail_conf;
        /* The simple consumer: no group.id, no group coordinator (nor its ACL) involved. */
        if (set(kc, "enable.auto.commit", "false", err, errlen) < 0 ||
            set(kc, "enable.partition.eof", "true", err, errlen) < 0 ||
            set(kc, "isolation.level", "read_committed", err, errlen) < 0 ||
            set(kc, "client.id", "outbox-relay-checkpoint-reader", err, errlen) < 0)
                goto fail_conf;
        rd_kafka_conf_set_log_cb(kc, quiet_log);
        rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, kerr, sizeof(kerr));
        if (!rk) {
                snprintf(err, errlen, "cannot create the checkpoint reader: %s", kerr);
                rd_kafka_conf_destroy(kc);
                return -EIO;
        }
        /*
         * A partition between leaders answers ListOffsets with an error that
         * a moment cures: a checkpoint topic just created (its leader not yet
         * elected or known to the broker asked), a leader moving. Asked again
         * until the deadline, as librdkafka's own fetcher would.
         */
        for (;;) {
                int64_t left = deadline - monoclock_ms();

                e = rd_kafka_query_watermark_offsets(rk, src->topic, 0, &lo, &hi,
                                                     left > 0 ? (int)left : 1);
                if (!leader_moving(e) || deadline - monoclock_ms() <= LEADER_RETRY_MS)
                        break;
                usleep(LEADER_RETRY_MS * 1000);
        }
        if (producer_unknown_topic(e)) {
                *ret_no_topic = true;
                r = 0;
                goto out;
        }
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
                snprintf(err, errlen, "cannot read the offsets of the checkpoint topic \"%s\": %s",
                         src->topic, rd_kafka_err2str(e));
                r = e == RD_KAFKA_RESP_ERR__TIMED_OUT ? -ETIMEDOUT : refused(e) ? -EACCES : -EIO;
                goto out;
        }
        rkt = rd_kafka_topic_new(rk, src->topic, NULL);
        if (!rkt) {
                snprintf(err, errlen, "cannot read the checkpoint topic \"%s\": %s", src->topic,
                         rd_kafka_err2str(rd_kafka_last_error()));
                r = -EIO;
                goto out;
        }
        r = decided_end(rk, rkt, src->topic, hi, deadline, &to, err, errlen);
        /* Newest first: a window at the end, then ever larger ones before it. */
        for (from = to; r == 0 && to > lo; to = from, window *= 2) {
                from = to - window > lo ? to - window : lo;
                r = read_window(rk, rkt, src->topic, key, from, to, deadline, ret, err, errlen);
        }
        rd_kafka_topic_destroy(rkt);
        if (r == 1) {
                *ret_found = true;
                r = 0;
        }
out:
        /* No group: nothing to leave. */
        rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
        return r;
fail_conf:
        rd_kafka_conf_destroy(kc);
        return -EIO;
}

static int min_int(int a, int b)
{
        return a < b ? a : b;
}

const char *checkpoint_topic_create_command(const char *topic, int brokers, char *buf, size_t size)
{
        int replicas = min_int(CHECKPOINT_TOPIC_REPLICAS, brokers > 0 ? brokers : 1);

        snprintf(buf, size, "kafka-topics.sh --create --topic %s --partitions 1 --replication-factor %d "
                 "--config cleanup.policy=compact --config min.insync.replicas=%d", topic, replicas,
                 min_int(CHECKPOINT_TOPIC_MIN_ISR, replicas));
        return buf;
}

enum checkpoint_topic_verdict checkpoint_topic_judge(const char *topic, const struct checkpoint_topic *t,
                                                     char *why, size_t size)
{
        int want_replicas = min_int(CHECKPOINT_TOPIC_REPLICAS, t->brokers > 0 ? t->brokers : 1);
        char create[512];

        checkpoint_topic_create_command(topic, t->brokers, create, sizeof(create));
        if (t->partitions == 0 || t->config.error == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) {
                snprintf(why, size, "the checkpoint topic \"%s\" does not exist", topic);
                return CHECKPOINT_TOPIC_UNTRUSTED;
        }
        if (t->partitions != 1) {
                snprintf(why, size, "the checkpoint topic \"%s\" has %d partitions: the relay reads and "
                         "writes partition 0 only, and relays of earlier releases wrote each key to a "
                         "partition of its own, so the newest checkpoint of a slot can be in another. "
                         "Give every relay that shares it a topic of one partition (%s) with "
                         "--checkpoint-topic; outbox-relay(7), \"The checkpoint record\"", topic, t->partitions,
                         create);
                return CHECKPOINT_TOPIC_UNTRUSTED;
        }
        if (!t->config.error && strcmp(t->config.cleanup_policy, "compact") != 0) {
                snprintf(why, size, "the checkpoint topic \"%s\" has cleanup.policy=%s: %s deletes old "
                         "segments, and with them the newest checkpoint of a slot that has been quiet "
                         "long enough; only compact keeps each key's newest record for good. Fix: "
                         "kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config "
                         "cleanup.policy=compact", topic, t->config.cleanup_policy,
                         strstr(t->config.cleanup_policy, "delete") ? "retention" : "that policy", topic);
                return CHECKPOINT_TOPIC_UNTRUSTED;
        }
        if (t->config.error) {
                snprintf(why, size, "cannot read the settings of the checkpoint topic \"%s\" (%s), so "
                         "its cleanup.policy and min.insync.replicas are not verified; grant the relay's "
                         "Kafka principal DESCRIBE_CONFIGS on it", topic, t->config.error_text);
                return CHECKPOINT_TOPIC_WEAK;
        }
        if (t->replicas < want_replicas) {
                snprintf(why, size, "the checkpoint topic \"%s\" has %d replica%s in a cluster of %d "
                         "brokers: the newest checkpoint can be lost with a broker; give it %d "
                         "(kafka-reassign-partitions.sh)", topic, t->replicas, t->replicas == 1 ? "" : "s",
                         t->brokers, want_replicas);
                return CHECKPOINT_TOPIC_WEAK;
        }
        if (t->config.min_insync_replicas >= 0 &&
            t->config.min_insync_replicas < min_int(CHECKPOINT_TOPIC_MIN_ISR, t->replicas)) {
                snprintf(why, size, "the checkpoint topic \"%s\" has min.insync.replicas=%d with %d "
                         "replicas: a checkpoint acknowledged by one broker only can be lost with it; "
                         "fix: kafka-configs.sh --alter --entity-type topics --entity-name %s "
                         "--add-config min.insync.replicas=%d", topic, t->config.min_insync_replicas,
                         t->replicas, topic, min_int(CHECKPOINT_TOPIC_MIN_ISR, t->replicas));
                return CHECKPOINT_TOPIC_WEAK;
        }
        return CHECKPOINT_TOPIC_OK;
}

int checkpoint_topic_describe(struct producer *p, const char *topic, int timeout_ms,
                              struct checkpoint_topic *ret, char *err, size_t errlen)
{
        int r;

        *ret = (struct checkpoint_topic){.config.min_insync_replicas = -1};
        r = producer_topic_layout(p, topic, timeout_ms, &ret->partitions, &ret->replicas, &ret->brokers,
                                  err, errlen);
        if (r == -ENOENT) {
                ret->partitions = 0;
                return 0;
        }
        if (r < 0)
                return r;
        producer_topic_config(p, topic, timeout_ms, &ret->config);
        return 0;
}

int checkpoint_topic_create(struct producer *p, const char *topic, int brokers, int timeout_ms, char *err,
                            size_t errlen)
{
        int replicas = min_int(CHECKPOINT_TOPIC_REPLICAS, brokers > 0 ? brokers : 1);
        char isr[16];
        const char *config[] = {
                "cleanup.policy", "compact",
                "min.insync.replicas", isr,
                /* Roll segments hourly so that compaction keeps the topic small. */
                "segment.ms", "3600000",
                "min.compaction.lag.ms", "0",
        };

        snprintf(isr, sizeof(isr), "%d", min_int(CHECKPOINT_TOPIC_MIN_ISR, replicas));
        return producer_create_topic(p, topic, 1, replicas, config, sizeof(config) / sizeof(config[0]) / 2,
                                     timeout_ms, err, errlen);
}
