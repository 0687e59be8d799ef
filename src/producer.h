/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Kafka side: one librdkafka idempotent producer (enable.idempotence=true,
 * acks=all, murmur2_random partitioner unless overridden), records with
 * CloudEvents binary-mode headers, and delivery reports served on the
 * caller's poll() through a pipe that librdkafka writes when its main queue
 * becomes non-empty (rd_kafka_queue_io_event_enable, librdkafka rdkafka.h).
 * Knows nothing of PostgreSQL or the ledger: a message's opaque ticket is
 * handed back in the delivery report.
 */
#ifndef RELAY_PRODUCER_H
#define RELAY_PRODUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

struct producer;

struct producer_header {
        const char *name;
        const char *value;
        size_t len;
};

/* Everything a delivery report tells about one message, borrowed during the callback. */
struct producer_report {
        uint64_t ticket;       /* what was given to producer_send() */
        int err;               /* 0 on success, else an rd_kafka_resp_err_t */
        const char *errname;   /* e.g. "MSG_SIZE_TOO_LARGE"; "" on success */
        const char *errstr;    /* human-readable reason; "" on success */
        const char *topic;
        const char *key;       /* NULL for no key */
        size_t key_len;
        const char *value;     /* NULL for a tombstone */
        size_t value_len;
        const struct producer_header *headers;  /* on failure only; NULL on success */
        size_t nheaders;
        size_t header_bytes;   /* names and values of all the message's headers, always */
};

/*
 * A delivery report (librdkafka's dr_msg_cb): the only truth about a
 * message. @locality: the thread calling producer_poll().
 */
typedef void producer_dr_fn(void *ctx, const struct producer_report *report);

/*
 * producer_header_value() - the last header named @name in @report as a
 * NUL-terminated copy in @buf (@size bytes, truncated), or "" if none.
 */
const char *producer_header_value(const struct producer_report *report, const char *name, char *buf,
                                  size_t size);

/*
 * An error event from librdkafka: @fatal is nonzero for a fatal
 * idempotent-producer error (the producer must be discarded).
 * @locality: the thread calling producer_poll().
 */
typedef void producer_error_fn(void *ctx, int fatal, int err, const char *reason);

/*
 * producer_new() - create the producer for @conf (brokers, -X properties,
 * bounds). @dr and @on_error are called from producer_poll() with @ctx.
 * Returns 0 and *ret_producer (owned by the caller; free with
 * producer_free()), or -EINVAL with librdkafka's reason in @err for a
 * property it refuses or settings that do not go together (rd_kafka_new),
 * -EIO if the notification pipe cannot be made.
 */
int producer_new(const struct relay_config *conf, producer_dr_fn *dr, producer_error_fn *on_error,
                 void *ctx, struct producer **ret_producer, char *err, size_t errlen);

/*
 * producer_free() - destroy the producer without waiting: messages not yet
 * delivered are dropped (their delivery reports, with errors, are not
 * served). NULL-safe; returns NULL.
 */
struct producer *producer_free(struct producer *p);

/*
 * producer_fd() - a descriptor that becomes readable when delivery reports or
 * errors are waiting: poll() it for POLLIN, then call producer_poll().
 */
int producer_fd(const struct producer *p);

/* producer_poll() - serve waiting delivery reports and errors; never blocks. Returns how many. */
int producer_poll(struct producer *p);

/*
 * producer_send() - hand one record to librdkafka (copied, RD_KAFKA_MSG_F_COPY).
 * @key may be NULL (no key), @value NULL (a tombstone). @timestamp_ms is the
 * record timestamp (ms since the Unix epoch); headers are copied. Returns 0, -ENOBUFS when librdkafka's queue is full (serve
 * delivery reports, then retry), -ENOENT for an unknown topic, -EMSGSIZE for
 * a message larger than message.max.bytes, -EIO with the reason in @err for
 * any other refusal (including a fatal producer error).
 */
int producer_send(struct producer *p, const char *topic, const char *key, size_t key_len,
                  const char *value, size_t value_len, int64_t timestamp_ms,
                  const struct producer_header *headers, size_t nheaders, uint64_t ticket, char *err,
                  size_t errlen);

/* producer_outq_len() - messages and requests not yet delivered (rd_kafka_outq_len). */
int producer_outq_len(struct producer *p);

/*
 * producer_brokers_up() - how many brokers (not bootstrap entries) had an
 * open connection ("state": "UP") in librdkafka's last statistics event
 * (STATISTICS.md), or -1 before the first one. Statistics are on, every
 * 5000 ms, when conf->metrics_address is set and the user did not choose
 * statistics.interval.ms.
 */
int producer_brokers_up(const struct producer *p);

/*
 * producer_check_brokers() - ask the cluster for metadata, waiting up to
 * @timeout_ms. Returns 0 when a broker answered, or -EHOSTUNREACH with
 * librdkafka's reason in @err.
 */
int producer_check_brokers(struct producer *p, int timeout_ms, char *err, size_t errlen);

/*
 * producer_topic_max_bytes() - the topic's max.message.bytes (the largest
 * record batch the broker accepts for it), asked with DescribeConfigs and
 * waiting up to @timeout_ms. Blocks; meant for the rare error path. Returns
 * 0 and sets *ret_bytes, or -EIO with the reason in @err.
 */
int producer_topic_max_bytes(struct producer *p, const char *topic, int timeout_ms, int64_t *ret_bytes,
                             char *err, size_t errlen);

/*
 * producer_topics_exist() - which of the @n @topics the cluster has, from
 * one metadata request for all topics (naming a topic in a metadata request
 * can make the broker auto-create it), waiting up to @timeout_ms. Sets
 * @ret_exists[i] for each and *ret_broker_id to the ID of a broker that
 * answered. Returns 0, or -EHOSTUNREACH with librdkafka's reason in @err.
 */
int producer_topics_exist(struct producer *p, const char *const *topics, size_t n, int timeout_ms,
                          bool *ret_exists, int32_t *ret_broker_id, char *err, size_t errlen);

/*
 * producer_broker_config() - the value of broker setting @name (e.g.
 * "auto.create.topics.enable") of broker @broker_id, asked with
 * DescribeConfigs and waiting up to @timeout_ms. Returns 0 and the value in
 * @ret_value (@size bytes, truncated), -ENOENT if the broker has no such
 * setting, or -EIO with the reason in @err (no answer, not authorized).
 */
int producer_broker_config(struct producer *p, int32_t broker_id, const char *name, int timeout_ms,
                           char *ret_value, size_t size, char *err, size_t errlen);

/*
 * producer_fatal_error() - after a fatal error event: the underlying error
 * code and its reason in @buf (rd_kafka_fatal_error). Returns 0 if none.
 */
int producer_fatal_error(struct producer *p, char *buf, size_t size);

#endif
