/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The checkpoint record: outside any one relay process, the highest LSN a
 * relay of a slot was about to confirm, written (and acknowledged by Kafka)
 * before the slot is confirmed past it. A slot confirmed beyond its
 * checkpoint was moved by someone else (pg_logical_slot_get_changes,
 * pg_replication_slot_advance, pg_recvlogical, a relay configured
 * differently): the rows in between were never published here. The record
 * also names the relay's table set and row mapping, so that a relay
 * configured differently does not share the slot, and, for exactly-once,
 * how many rows of a transaction split over several Kafka transactions are
 * already in Kafka.
 *
 * Records live in partition 0 of a compacted Kafka topic of one partition, keyed
 * "<system identifier>/<database>/<slot>"; the value is a JSON object:
 *
 *   {"version":1,"lsn":"0/1551468","txn_end_lsn":"0/0","txn_rows":0,"timeline":1,
 *    "digest":"8a3f...","mapping":"tables=public.outbox; id=work_id; ...",
 *    "mode":"at-least-once","writer":"host pid 123, outbox-relay 0.2.0",
 *    "time":"2026-12-01T05:38:29.123456Z","publication":"oid=16412 xmin=790 rels=16413"}
 *
 * "publication" (pgoutput only; "" or absent otherwise and from writers of
 * 0.2.0 and before): the publication the writer streamed through, as the
 * side connection checks it, so that one changed while no relay ran is
 * noticed at the next start.
 *
 * This module formats and parses that value and reads the newest record of
 * a key with its own librdkafka consumer (isolation.level read_committed);
 * writing goes through the relay's producer. Knows librdkafka and cJSON,
 * nothing of PostgreSQL or the relay.
 */
#ifndef RELAY_CHECKPOINT_H
#define RELAY_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "producer.h"

#define CHECKPOINT_MAPPING_MAX 4096   /* bytes of the mapping text, terminator included */
#define CHECKPOINT_PUBLICATION_MAX 512 /* bytes of the publication state, terminator included */
#define CHECKPOINT_VALUE_MAX (CHECKPOINT_MAPPING_MAX * 2 + 2048) /* bytes of a formatted value */

struct checkpoint {
        uint64_t lsn;          /* LSN: every transaction ending at or before it is published */
        uint64_t txn_end_lsn;  /* exactly-once: a transaction beyond @lsn partly published, or 0 */
        uint64_t txn_rows;     /* rows of that transaction already published */
        /*
         * The server's timeline (IDENTIFY_SYSTEM) when written, or 0 (a writer
         * before it was recorded): an LSN names a WAL position only together
         * with the timeline history it lies on.
         */
        uint32_t timeline;
        char digest[17];       /* checkpoint_digest() of @mapping, 16 hex digits */
        char mapping[CHECKPOINT_MAPPING_MAX];
        char mode[16];         /* "at-least-once" or "exactly-once" */
        char writer[160];      /* who wrote it: host, PID, version */
        char time[40];         /* when, RFC 3339 */
        /*
         * pgoutput: "oid=<pg_publication.oid> xmin=<its xmin> rels=<each
         * table's pg_publication_rel.oid, in the configured order>" (the
         * list replaced by "rels#<checkpoint_digest()>" where it is too long);
         * "" with wal2json or from an earlier writer.
         */
        char publication[CHECKPOINT_PUBLICATION_MAX];
};

/* checkpoint_digest() - FNV-1a 64 of @text (identity, not security), as 16 hex digits into @buf[17]. */
void checkpoint_digest(const char *text, char buf[17]);

#define CHECKPOINT_FNV_START UINT64_C(0xcbf29ce484222325)  /* FNV-1a 64's offset basis */

/*
 * checkpoint_fnv() - FNV-1a 64 of @h (CHECKPOINT_FNV_START, or an earlier
 * call's result) continued over @n bytes at @p: a text hashed in pieces
 * equals checkpoint_digest() of the whole. Pure.
 */
uint64_t checkpoint_fnv(uint64_t h, const void *p, size_t n);

/*
 * checkpoint_key() - "<system_id>/<dbname>/<slot>" into @buf (@size bytes).
 * Returns the length, or -ENOSPC if it does not fit.
 */
int checkpoint_key(const char *system_id, const char *dbname, const char *slot, char *buf, size_t size);

/*
 * checkpoint_format() - @c as the JSON value above into @buf (@size bytes,
 * CHECKPOINT_VALUE_MAX suffice). Returns the length, -ENOSPC, -ENOMEM.
 */
int checkpoint_format(const struct checkpoint *c, char *buf, size_t size);

/*
 * checkpoint_parse() - the JSON value of @len bytes into @ret. Unknown
 * members are ignored (a newer writer may add some). Returns 0, or -EBADMSG
 * for a value that is not such an object (missing or malformed "lsn").
 */
int checkpoint_parse(const char *value, size_t len, struct checkpoint *ret);

/*
 * checkpoint_timeline_end() - where timeline @tli ends in the history
 * @history (@len bytes) of the server's current timeline: the content of
 * its timeline history file, as TIMELINE_HISTORY returns it (PostgreSQL's
 * timeline.c: one line per earlier timeline, "<parent TLI>\t<switch
 * LSN>\t<reason>", '#' comments). WAL of @tli before that LSN is the
 * current timeline's too; past it the current timeline has WAL of its own.
 * Returns 0 with the LSN in *ret_lsn, or -ENOENT when @tli is not an
 * earlier timeline of that history (or @history is NULL). Pure.
 */
int checkpoint_timeline_end(const char *history, size_t len, uint32_t tli, uint64_t *ret_lsn);

/* Where checkpoint records are read from. All borrowed. */
struct checkpoint_source {
        const char *brokers;
        const char *const *props;   /* librdkafka name, value pairs (security settings) */
        size_t nprops;
        const char *topic;
};

/*
 * checkpoint_read() - the newest record of @key in partition 0 of the
 * source's topic, read with isolation.level=read_committed (records of an
 * open or aborted Kafka transaction are not seen), newest offsets first in
 * growing windows, waiting up to @timeout_ms in all; a partition whose
 * leader is being elected or moves (a topic just created) is asked again
 * every 100 ms within that time. Returns 0 with
 * *ret_found and @ret set when found; 0 with *ret_found false when the topic
 * holds none (or does not exist: *ret_no_topic true); -ETIMEDOUT,
 * -EBADMSG (the newest record of @key is not a checkpoint value: its text in
 * @err), -EACCES (Kafka's ACLs refuse the principal READ or DESCRIBE on the
 * topic: TOPIC_AUTHORIZATION_FAILED, which no retry changes), or -EIO with
 * librdkafka's reason in @err.
 */
int checkpoint_read(const struct checkpoint_source *src, const char *key, int timeout_ms,
                    struct checkpoint *ret, bool *ret_found, bool *ret_no_topic, char *err,
                    size_t errlen);

/*
 * The checkpoint topic. Its records are read and written in partition 0
 * only (the writer does not leave it to the partitioner), so it must have
 * one partition: relays of earlier releases wrote by key to the others. It
 * must be compacted and nothing else (retention would delete the newest
 * checkpoint of a quiet slot), and durable (an acknowledged checkpoint lost
 * with a broker repeats or hides rows).
 */
struct checkpoint_topic {
        int partitions;                      /* 0: the topic does not exist */
        int replicas;                        /* the fewest of any partition */
        int brokers;                         /* in the cluster */
        struct producer_topic_config config; /* config.error set: not described */
};

enum checkpoint_topic_verdict {
        CHECKPOINT_TOPIC_OK,
        CHECKPOINT_TOPIC_WEAK,       /* usable, but less durable than it should be, or not verifiable */
        CHECKPOINT_TOPIC_UNTRUSTED,  /* what it holds cannot be trusted (or it is gone): stop */
};

/* The settings the relay creates the topic with: replication 3 (fewer brokers: all), min.insync.replicas 2 (fewer: all). */
#define CHECKPOINT_TOPIC_REPLICAS 3
#define CHECKPOINT_TOPIC_MIN_ISR 2

/*
 * checkpoint_topic_judge() - the verdict on @topic as @t describes it,
 * with the reason and its fix in @why (@size bytes) unless OK. A topic that
 * does not exist (t->partitions 0, or config.error UNKNOWN_TOPIC_OR_PART)
 * is UNTRUSTED here: a caller that may create it asks first. Pure.
 */
enum checkpoint_topic_verdict checkpoint_topic_judge(const char *topic, const struct checkpoint_topic *t,
                                                     char *why, size_t size);

/*
 * checkpoint_topic_describe() - fill @ret for @topic through producer @p
 * (one metadata request, one DescribeConfigs), waiting up to @timeout_ms for
 * each. Returns 0 (ret->partitions 0 when there is no such topic), or
 * -EHOSTUNREACH with the reason in @err.
 */
int checkpoint_topic_describe(struct producer *p, const char *topic, int timeout_ms,
                              struct checkpoint_topic *ret, char *err, size_t errlen);

/*
 * checkpoint_topic_create() - CreateTopics for @topic as the relay makes it:
 * one partition, min(CHECKPOINT_TOPIC_REPLICAS, @brokers) replicas,
 * cleanup.policy=compact, min.insync.replicas min(CHECKPOINT_TOPIC_MIN_ISR,
 * replicas), hourly segments. Blocks up to @timeout_ms. Returns 0, -EEXIST,
 * -EACCES (no CREATE), or -EIO with the reason in @err.
 */
int checkpoint_topic_create(struct producer *p, const char *topic, int brokers, int timeout_ms, char *err,
                            size_t errlen);

/*
 * checkpoint_topic_create_command() - the kafka-topics.sh command that
 * makes @topic as checkpoint_topic_create() does, for @brokers brokers, into
 * @buf (@size bytes). Returns @buf.
 */
const char *checkpoint_topic_create_command(const char *topic, int brokers, char *buf, size_t size);

#endif
