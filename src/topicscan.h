/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading a whole Kafka topic once, or twice, up to where it ended when the
 * scan began: every partition from the first offset whose record timestamp
 * is at or after a given time (ListOffsets by timestamp, librdkafka's
 * rd_kafka_offsets_for_times()) to its high watermark read at the start, so
 * that records written meanwhile are not read and a scan always ends. Uses
 * librdkafka's simple consumer (rd_kafka_consume_start()), which needs no
 * consumer group: nothing is committed, no group coordinator or group ACL is
 * involved, and isolation.level=read_committed hides records of open or
 * aborted Kafka transactions. `outbox-relay redrive --from-dead-letter`
 * reads the dead-letter topic with it. Knows librdkafka, nothing of
 * PostgreSQL, the relay's records or their headers' meaning.
 */
#ifndef RELAY_TOPICSCAN_H
#define RELAY_TOPICSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Headers of one record kept, at most; a record with more is reported as such. */
#define TOPICSCAN_MAX_HEADERS 128

/*
 * Bytes librdkafka may prefetch per partition (queued.max.messages.kbytes,
 * in KiB): what a scan holds besides the record handed out.
 */
#define TOPICSCAN_PREFETCH_KB "4096"

struct topicscan;

struct topicscan_header {
        const char *name;   /* NUL-terminated */
        const char *value;  /* @len bytes, not NUL-terminated; NULL for a null header */
        size_t len;
};

/* One record, borrowed until the next topicscan_next() or topicscan_free(). */
struct topicscan_record {
        int32_t partition;
        int64_t offset;
        int64_t timestamp_ms;       /* ms since the Unix epoch; -1 if the record has none */
        const char *key;            /* NULL: no key */
        size_t key_len;             /* bytes */
        const char *value;          /* NULL: a tombstone */
        size_t value_len;           /* bytes */
        const struct topicscan_header *headers;  /* in wire order */
        size_t nheaders;            /* at most TOPICSCAN_MAX_HEADERS */
        bool headers_cut;           /* the record had more than TOPICSCAN_MAX_HEADERS */
};

/* Where to read. All borrowed during topicscan_open(). */
struct topicscan_options {
        const char *brokers;              /* bootstrap.servers */
        const char *const *props;         /* librdkafka name, value pairs (security settings);
                                           * producer-only ones are left out */
        size_t nprops;                    /* pairs */
        const char *topic;
        int64_t since_ms;                 /* start at the first record stamped at or after it
                                           * (ms since the Unix epoch); 0: at the beginning */
        int timeout_ms;                   /* for each request, and for each wait for a record */
};

/*
 * topicscan_open() - find the topic's partitions, their start offsets (the
 * log start, or the first offset at or after @opts->since_ms) and their
 * current high watermarks, the end of the scan. Returns 0 and *ret_scan
 * (owned by the caller, topicscan_free()); -ENOENT when the topic does not
 * exist; -ETIMEDOUT or -EIO (brokers unreachable, not authorized) and
 * -EINVAL (a property librdkafka refuses), each with the reason in @err
 * (@errlen bytes); -ENOMEM.
 */
int topicscan_open(const struct topicscan_options *opts, struct topicscan **ret_scan, char *err,
                   size_t errlen);

/*
 * topicscan_next() - the next record of the scan, partition after
 * partition in offset order, into @ret_rec (borrowed until the next call).
 * Returns 1 with a record, 0 at the end of the scan, or -ETIMEDOUT (no
 * record within the timeout while offsets remained: brokers gone) or -EIO
 * (a fetch error, e.g. offsets removed by retention meanwhile) with the
 * reason in @err.
 */
int topicscan_next(struct topicscan *s, struct topicscan_record *ret_rec, char *err, size_t errlen);

/*
 * topicscan_rewind() - start the scan again at the same start offsets; it
 * ends at the same high watermarks. Records removed meanwhile by retention
 * make topicscan_next() fail with -EIO.
 */
void topicscan_rewind(struct topicscan *s);

/* topicscan_records() - offsets in the scan's range over all partitions: at most this many records. */
int64_t topicscan_records(const struct topicscan *s);

/* topicscan_free() - NULL-safe; returns NULL. */
struct topicscan *topicscan_free(struct topicscan *s);

#endif
