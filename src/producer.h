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

#include <stddef.h>
#include <stdint.h>

#include "config.h"

struct producer;

struct producer_header {
        const char *name;
        const char *value;
        size_t len;
};

/*
 * A delivery report (librdkafka's "dr_msg_cb"): @err is 0 on success, else
 * an rd_kafka_resp_err_t; @errstr describes it. @ticket is what was given to
 * producer_send(); @bytes the key and value bytes of the message.
 * @work_id/@lsn_text are the message's ce_id and ce_pglsn header values
 * (NUL-terminated copies valid during the call) for error messages.
 * @locality: the thread calling producer_poll().
 */
typedef void producer_dr_fn(void *ctx, uint64_t ticket, size_t bytes, int err, const char *errstr,
                            const char *topic, const char *work_id, const char *lsn_text);

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
 * property it refuses, -EIO if the producer cannot be created.
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
 * @timestamp_ms is the record timestamp (ms since the Unix epoch); headers
 * are copied. Returns 0, -ENOBUFS when librdkafka's queue is full (serve
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
 * producer_fatal_error() - after a fatal error event: the underlying error
 * code and its reason in @buf (rd_kafka_fatal_error). Returns 0 if none.
 */
int producer_fatal_error(struct producer *p, char *buf, size_t size);

#endif
