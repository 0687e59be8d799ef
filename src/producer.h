/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Kafka side: one librdkafka idempotent producer (enable.idempotence=true,
 * acks=all, murmur2_random partitioner unless overridden), delivery reports
 * served on the caller's poll() through a pipe that librdkafka writes when its
 * main queue becomes non-empty (rd_kafka_queue_io_event_enable, librdkafka
 * rdkafka.h), the bytes in flight counted in at produce and out at the
 * delivery report, and the classification of Kafka's errors into what the
 * caller can do about them. Knows nothing of PostgreSQL, the ledger or the
 * relay's options: a message's opaque ticket is handed back in its report.
 */
#ifndef RELAY_PRODUCER_H
#define RELAY_PRODUCER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct producer;

struct producer_header {
        const char *name;   /* NUL-terminated */
        const char *value;  /* @len bytes, not necessarily NUL-terminated; NULL for a null header */
        size_t len;
};

/* One record to produce, or the one a delivery report is about. All borrowed. */
struct producer_msg {
        const char *topic;
        const char *key;          /* NULL: no key */
        size_t key_len;           /* bytes */
        const char *value;        /* NULL: a tombstone */
        size_t value_len;         /* bytes */
        int64_t timestamp_ms;     /* record timestamp, ms since the Unix epoch; 0: produce time */
        const struct producer_header *headers;
        size_t nheaders;
        uint64_t ticket;          /* the caller's, handed back in the delivery report */
        bool first_partition;     /* to partition 0, not where the partitioner puts the key */
};

/* What the caller can do about a Kafka error. */
enum producer_fault {
        PRODUCER_OK = 0,
        /*
         * The record's own: too large, its topic invalid, unknown or not
         * writable by this principal, an invalid timestamp or record, a broker
         * policy. No retry helps: the row is dead-lettered or stops the relay.
         */
        PRODUCER_FAULT_RECORD,
        /*
         * The cluster's or the connection's (timed out, brokers gone, an
         * idempotence sequence error that a new producer cures): discard the
         * producer and send again what is unconfirmed.
         */
        PRODUCER_FAULT_CLUSTER,
        /*
         * No retry can cure it: an erroneous producer state (e.g. a
         * transactional.id without transactions), an invalid argument, an
         * unknown fatal error, a missing cluster-wide permission, a fenced
         * producer. Stop and let an operator decide.
         */
        PRODUCER_FAULT_FATAL,
};

/* A Kafka error: its code (rd_kafka_resp_err_t), names and class. */
struct producer_error {
        int code;                  /* 0: none */
        enum producer_fault fault;
        char name[64];             /* e.g. "MSG_SIZE_TOO_LARGE" */
        char text[512];            /* librdkafka's reason */
};

/*
 * producer_classify() - the class of Kafka error @code (rd_kafka_resp_err_t)
 * in a delivery report or from producing. For RD_KAFKA_RESP_ERR__FATAL pass
 * the underlying error (rd_kafka_fatal_error()) as @fatal_code.
 */
enum producer_fault producer_classify(int code, int fatal_code);

/*
 * producer_fix() - what an operator changes on the Kafka side after error
 * @code, as the start of a sentence ("Grant WRITE on the topic ..."), or
 * NULL when there is nothing more specific than fixing the topic or its
 * limits.
 */
const char *producer_fix(int code);

/*
 * producer_unknown_topic() - is Kafka error @code (rd_kafka_resp_err_t) a
 * topic or partition that does not exist: the broker's
 * UNKNOWN_TOPIC_OR_PARTITION or librdkafka's local _UNKNOWN_TOPIC and
 * _UNKNOWN_PARTITION? Pure; no errors.
 */
bool producer_unknown_topic(int code);

/* Kafka's MESSAGE_TOO_LARGE (protocol error code 10): a record or its batch too large for the topic. */
#define PRODUCER_ERR_MSG_SIZE_TOO_LARGE 10
#define PRODUCER_ERR_STATE (-172) /* RD_KAFKA_RESP_ERR__STATE: not allowed in the producer's (transaction) state */
#define PRODUCER_ERR_INVALID_TXN_STATE 48 /* the coordinator's answer to ending a transaction it never began */
#define PRODUCER_ERR_UNKNOWN_TOPIC 3      /* Kafka's UNKNOWN_TOPIC_OR_PARTITION */
#define PRODUCER_ERR_PURGE_QUEUE (-152)   /* RD_KAFKA_RESP_ERR__PURGE_QUEUE: purged before it was sent */
#define PRODUCER_ERR_PURGE_INFLIGHT (-151) /* RD_KAFKA_RESP_ERR__PURGE_INFLIGHT: purged while in flight */

/* Everything a delivery report tells about one message, borrowed during the callback. */
struct producer_report {
        struct producer_msg msg;       /* headers: all of the message's on failure, none on success */
        struct producer_error error;   /* code 0 on success */
        size_t bytes;                  /* what the message counted in flight (producer_msg_bytes()) */
};

/*
 * A delivery report (librdkafka's dr_msg_cb): the only truth about a
 * message. It must not produce, nor call producer_poll(): record what
 * happened and act after producer_poll() returns. @locality: the thread
 * calling producer_poll().
 */
typedef void producer_dr_fn(void *ctx, const struct producer_report *report);

/* A change of the cluster's reachability, or an error event of librdkafka's. */
enum producer_event {
        PRODUCER_EVENT_BROKERS_DOWN,  /* every broker connection is down (all.brokers.down) */
        PRODUCER_EVENT_BROKERS_UP,    /* a broker answered again after BROKERS_DOWN */
        PRODUCER_EVENT_ERROR,         /* another error event; worth a warning once */
        PRODUCER_EVENT_FATAL,         /* the producer is unusable: @error says why and its class */
};

/*
 * An event. For PRODUCER_EVENT_FATAL, @error->code is the underlying error
 * and @error->fault its class (PRODUCER_FAULT_CLUSTER: a new producer cures
 * it). @locality: the thread calling producer_poll().
 */
typedef void producer_event_fn(void *ctx, enum producer_event event, const struct producer_error *error);

/* A topic's max.message.bytes: the largest record batch, in bytes, the broker accepts for it. */
struct producer_topic_limit {
        const char *topic;
        int64_t max_bytes;
};

/* How to build a producer. All borrowed during producer_new(). */
struct producer_options {
        const char *brokers;              /* bootstrap.servers */
        const char *const *props;         /* librdkafka name, value pairs, applied after our defaults */
        size_t nprops;                    /* pairs */
        int64_t queue_messages;           /* queue.buffering.max.messages unless a property sets it */
        bool statistics;                  /* statistics.interval.ms=5000 unless a property sets it */
        const char *transactional_id;     /* NULL: idempotent only; else a transactional producer */
        /*
         * With transactional_id: a second librdkafka producer,
         * transactional.id <id>.1, for producer_init_transactions() to fence
         * (the relay's id, which an older relay may have used as a pair; not
         * a probe's), and with transactional_pair to take Kafka transactions
         * in turn with the first (producer_commit_transaction()).
         */
        bool transactional_second;
        bool transactional_pair;
        /*
         * With transactional_pair: a second id the broker refuses to these
         * credentials (TRANSACTIONAL_ID_AUTHORIZATION_FAILED) leaves one
         * producer instead of failing producer_init_transactions().
         */
        bool transactional_pair_optional;
        /*
         * Topics whose max.message.bytes is known. The broker refuses a
         * whole record batch larger than its topic's limit, and librdkafka
         * fills batches up to producer_batch_bytes() whatever the topic: the
         * records of a topic whose limit is below that go in batches that fit
         * it. An idempotent producer sends them through a lane
         * (producer_fit_topic()), so the other topics keep their batches; a
         * transactional one cannot (a Kafka transaction is one producer's),
         * and every batch of it shrinks to the least such limit.
         */
        const struct producer_topic_limit *limits;
        size_t nlimits;
};

/*
 * producer_new() - create the producer. @dr and @on_event are called from
 * producer_poll() with @ctx. Returns 0 and *ret_producer (owned by the
 * caller; free with producer_free()), or -EINVAL with librdkafka's reason in
 * @err for a property it refuses or settings that do not go together
 * (rd_kafka_new), -EIO if the notification pipe cannot be made, -ENOMEM.
 */
int producer_new(const struct producer_options *opts, producer_dr_fn *dr, producer_event_fn *on_event,
                 void *ctx, struct producer **ret_producer, char *err, size_t errlen);

/*
 * producer_batch_bytes() - the largest record batch the producer's own
 * settings make, in bytes: the lesser of batch.size and message.max.bytes
 * (librdkafka closes a MessageSet at either, rdkafka_msgset_writer.c;
 * CONFIGURATION.md). A topic whose max.message.bytes is below it has its
 * batches refused unless producer_options.limits names it.
 */
int64_t producer_batch_bytes(const struct producer *p);

/*
 * producer_topic_batch_bytes() - the largest batch, in bytes, of several
 * records of @topic that @p makes: producer_batch_bytes(), its lane's
 * batch for a fitted topic, or for every topic of a transactional producer
 * the least limit of producer_options.limits below it. A record larger than
 * that goes alone in its batch.
 */
int64_t producer_topic_batch_bytes(const struct producer *p, const char *topic);

/* Lanes of a producer, at most: librdkafka producers for topics with a lower max.message.bytes. */
#define PRODUCER_LANES_MAX 8

/*
 * producer_fit_topic() - from now on, send @topic's records in batches of at
 * most @max_bytes (its max.message.bytes) when that is below
 * producer_batch_bytes(): through a lane, a librdkafka producer of the
 * producer's own with the same settings and a smaller batch.size (an
 * existing one whose batch fits and is at least half of @max_bytes, else a
 * new one), so that the other topics keep their batches; per-partition
 * order holds as long as the topic has no record in the producer yet, which
 * the caller makes sure of. Reports of every lane come through
 * producer_fd(). Returns 0 (nothing to do for a limit at or above the batch,
 * or a topic fitted already); -EBUSY for a transactional producer (fitted
 * only when made, producer_options.limits) or a topic on a lane whose batch
 * is larger; -ENOSPC when PRODUCER_LANES_MAX lanes exist and none fits;
 * -EINVAL when librdkafka refuses the lane (reason in @err); -ENOMEM.
 */
int producer_fit_topic(struct producer *p, const char *topic, int64_t max_bytes, char *err, size_t errlen);

/* Kafka's RecordBatch v2 header, bytes: baseOffset to recordCount (protocol, "Record Batch"). */
#define PRODUCER_BATCH_OVERHEAD 61

/*
 * producer_record_batch_bytes() - the bytes of a record batch holding only
 * @m, uncompressed: PRODUCER_BATCH_OVERHEAD and the record, its lengths as
 * zigzag varints (Kafka protocol, "Record Batch" and "Record"; librdkafka's
 * rd_kafka_msgset_writer_write_msg_v2). What the broker compares with the
 * topic's max.message.bytes when @m goes alone; compression can only make it
 * smaller. Pure.
 */
size_t producer_record_batch_bytes(const struct producer_msg *m);

/*
 * producer_free() - destroy the producer without waiting: messages not yet
 * delivered are dropped (their delivery reports, with errors, are not
 * served). NULL-safe; returns NULL.
 */
struct producer *producer_free(struct producer *p);

/*
 * producer_fd() - a descriptor that becomes readable when delivery reports or
 * events are waiting: poll() it for POLLIN, then call producer_poll().
 */
int producer_fd(const struct producer *p);

/*
 * producer_poll() - serve waiting delivery reports and events. Never blocks,
 * but for the first call after producer_hurry(), which holds up to 2 ms
 * (HURRY_MS) while librdkafka sends. Returns how many it served (not
 * counting that first call's flush).
 */
int producer_poll(struct producer *p);

/*
 * producer_hurry() - have the next producer_poll() send at once what the
 * producer of the open transaction holds back for linger.ms (librdkafka's
 * rd_kafka_flush(), which takes linger.ms as elapsed while it runs), and
 * make producer_fd() readable so that the next wait returns at once. For
 * the commit of a Kafka transaction, whose records were all produced: the
 * last batch, the checkpoint record's at least, need not wait out
 * linger.ms before the delivery reports the commit waits for. Only the
 * transactional producer's: without transactions it does nothing but wake
 * the wait (the idempotent lanes are never flushed).
 */
void producer_hurry(struct producer *p);

/*
 * producer_msg_bytes() - the bytes @m counts in flight: key, value, and each
 * header's name and value.
 */
size_t producer_msg_bytes(const struct producer_msg *m);

/*
 * producer_send() - hand @m to librdkafka (key, value and headers copied,
 * RD_KAFKA_MSG_F_COPY) and count producer_msg_bytes(@m) in flight until its
 * delivery report. Returns 0; -ENOBUFS when librdkafka's queue is full
 * (serve delivery reports, then retry); otherwise -EIO with @ret_error set
 * (code, name, text and class: PRODUCER_FAULT_RECORD for an unknown topic
 * or a message larger than message.max.bytes, PRODUCER_FAULT_FATAL for an
 * erroneous state or invalid argument, PRODUCER_FAULT_CLUSTER for a fatal
 * error that a new producer cures).
 */
int producer_send(struct producer *p, const struct producer_msg *m, struct producer_error *ret_error);

/* producer_inflight_bytes() - bytes handed to producer_send() whose delivery report is not yet served. */
uint64_t producer_inflight_bytes(const struct producer *p);

/*
 * producer_brokers_up() - how many brokers (not bootstrap entries) had an
 * open connection ("state": "UP") in librdkafka's last statistics event
 * (STATISTICS.md), at least 1 after an acknowledgement or a successful
 * producer_check_brokers(), 0 after all.brokers.down, or -1 before anything
 * is known. Statistics come every 5000 ms when opts->statistics was set and
 * no property chose statistics.interval.ms.
 */
int producer_brokers_up(const struct producer *p);

/*
 * producer_check_brokers() - ask the cluster for metadata, waiting up to
 * @timeout_ms. Returns 0 when a broker answered; -EACCES when the broker
 * connections failed their TLS handshake or authentication (or, over TLS
 * without a client certificate, were closed as a listener that wants one
 * closes them), with librdkafka's reason, the broker's error and the fix
 * ("; fix: ...") in @err; else -EHOSTUNREACH with librdkafka's reason and
 * the connections' last error, if any, in @err. The errors it serves from librdkafka's
 * queue on failure reach no producer_event_fn.
 */
int producer_check_brokers(struct producer *p, int timeout_ms, char *err, size_t errlen);

/*
 * producer_topic_max_bytes() - the topic's max.message.bytes (the largest
 * record batch the broker accepts for it), asked with DescribeConfigs and
 * waiting up to @timeout_ms. Blocks: once per topic. Returns 0 and sets
 * *ret_bytes; -ESRCH when the topic does not exist (yet); -EIO with the
 * reason in @err otherwise (no answer, not authorized: DESCRIBE_CONFIGS).
 */
int producer_topic_max_bytes(struct producer *p, const char *topic, int timeout_ms, int64_t *ret_bytes,
                             char *err, size_t errlen);

/*
 * producer_topic_max_bytes_ask() - the same question without waiting (the
 * request times out after @timeout_ms): the answer wakes producer_fd() and
 * is taken by producer_poll(), then by producer_topic_max_bytes_answer().
 * One question is open at a time: asking again forgets the earlier one
 * (its late answer is dropped). Returns 0.
 */
int producer_topic_max_bytes_ask(struct producer *p, const char *topic, int timeout_ms);

/*
 * producer_topic_max_bytes_answer() - the answer to the open
 * producer_topic_max_bytes_ask(), once: 0 with *ret_bytes set, -ESRCH or
 * -EIO with the reason in @err, as producer_topic_max_bytes(); -EAGAIN
 * while it has not come; -ENOENT when nothing is asked.
 */
int producer_topic_max_bytes_answer(struct producer *p, int64_t *ret_bytes, char *err, size_t errlen);

/*
 * producer_topic_max_bytes_answered() - the answer to the open
 * producer_topic_max_bytes_ask() has come (producer_poll() took it) and
 * producer_topic_max_bytes_answer() has not taken it yet. Takes nothing.
 */
bool producer_topic_max_bytes_answered(const struct producer *p);

/* producer_topic_max_bytes_forget() - stop waiting for the open question: its answer is dropped. */
void producer_topic_max_bytes_forget(struct producer *p);

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
 * The transactional producer (librdkafka's transactions API, KIP-98), when
 * producer_options.transactional_id is set: every record belongs to a Kafka
 * transaction, read_committed consumers see a transaction's records only
 * once it commits, and init_transactions fences every older producer with
 * the same id (its epoch is bumped; its late writes are refused).
 *
 * Each call returns 0; -EAGAIN for a retriable error (a timeout: call it
 * again, the operation goes on in the background); -ECANCELED when the
 * transaction must be aborted (producer_abort_transaction()) and its
 * records produced again; -EPERM for a fatal error (fenced by a newer
 * producer, not authorized): the producer is unusable; -EIO for anything
 * else. @ret_error gets the code, name and text.
 */

/*
 * producer_transaction_timeout_ms() - the transaction.timeout.ms the
 * producer asks its transaction coordinator for (librdkafka's default, or
 * what -X set), in ms: the coordinator aborts a transaction open longer.
 */
int64_t producer_transaction_timeout_ms(const struct producer *p);

/*
 * producer_fenced() - is @e the loss of the producer's epoch: librdkafka's
 * _FENCED, or Kafka's PRODUCER_FENCED or INVALID_PRODUCER_EPOCH? Both a
 * newer producer with the same transactional.id (init_transactions) and a
 * coordinator that aborted a transaction past its transaction.timeout.ms
 * (which bumps the epoch too) end so; librdkafka does not tell them apart.
 */
bool producer_fenced(const struct producer_error *e);

/*
 * producer_init_transactions() - register the transactional id and "<id>.1"
 * (Kafka's InitProducerId), which fences the older producers of each and
 * aborts their open transactions, both at once (the second on a thread of
 * its own, joined before it returns); blocks up to @timeout_ms.
 * With transactional_pair both then take transactions in turn, the first
 * id's next; without it "<id>.1" is only fenced (a relay of the same id
 * may have run with the pair) and its producer destroyed; without
 * transactional_second it is not touched. "<id>.1" refused
 * with TRANSACTIONAL_ID_AUTHORIZATION_FAILED is passed over without the
 * pair, and with transactional_pair_optional (producer_second_id_refused()
 * then says so): no producer of these credentials can hold it. Returns 0;
 * -EPERM, librdkafka's fatal error (fenced; an id these credentials may not
 * use); -EAGAIN, a retriable one (timeout, coordinator not available);
 * -ECANCELED or -EIO, any other: the error in @ret_error, and
 * producer_transactional_id() names the id that failed.
 */
int producer_init_transactions(struct producer *p, int timeout_ms, struct producer_error *ret_error);

/*
 * producer_pair_cheap() - whether the librdkafka the relay runs with (2.4.0
 * and later) makes the pair of transactional producers cost no more CPU
 * than one: --kafka-transactional-producers=auto takes the pair then.
 */
bool producer_pair_cheap(void);

/* producer_library_version() - the version of the librdkafka the relay runs with, e.g. "2.0.2". Static. */
const char *producer_library_version(void);

/*
 * producer_linger_ms() - the producer's linger.ms (queue.buffering.max.ms,
 * librdkafka's default or -X), rounded up to whole ms: how long a batch may
 * wait after its first record before it is sent. 0 if it cannot be read.
 */
int64_t producer_linger_ms(const struct producer *p);

/*
 * producer_paired() - whether two producers take the Kafka transactions in
 * turn: asked for (transactional_pair) and, once producer_init_transactions()
 * succeeded, not refused.
 */
bool producer_paired(const struct producer *p);

/*
 * producer_second_id_refused() - whether the last producer_init_transactions()
 * passed over "<id>.1" because the broker refused it to these credentials:
 * it fenced nothing there, and a pair (transactional_pair_optional) was
 * given up.
 */
bool producer_second_id_refused(const struct producer *p);

/*
 * producer_transactional_id() - the transactional.id whose transaction is
 * open or comes next, in @buf (@size bytes, "?" if unknown). Returns @buf.
 */
const char *producer_transactional_id(const struct producer *p, char *buf, size_t size);

/*
 * producer_transaction_error() - the error that failed the open transaction
 * (librdkafka's abortable state): its code, class and text in @ret_error,
 * e.g. TOPIC_AUTHORIZATION_FAILED when the coordinator refused a topic's
 * partition (AddPartitionsToTxn), which no delivery report names. Call it
 * only once the transaction is known to have failed (a produce refused with
 * _STATE, a purge the caller did not cause): in a healthy transaction it
 * would begin the commit. Blocks briefly (librdkafka's main thread answers).
 * Returns 0; -EPERM (a fatal error, in @ret_error); -EAGAIN when no error
 * was had.
 */
int producer_transaction_error(struct producer *p, struct producer_error *ret_error);

/* producer_begin_transaction() - start a transaction; never blocks. */
int producer_begin_transaction(struct producer *p, struct producer_error *ret_error);

/*
 * producer_commit_transaction() - flush and commit, blocking up to
 * @timeout_ms; on -EAGAIN call it again (it resumes). Serves delivery
 * reports of the transaction's messages on the calling thread. Once
 * committed, with transactional_pair, the next transaction (begin, send,
 * commit, abort, purge) is the other producer's.
 */
int producer_commit_transaction(struct producer *p, int timeout_ms, struct producer_error *ret_error);

/*
 * producer_stay() - with two producers in turn: while @stay, a commit keeps
 * the next transaction on the same producer instead of handing it to the
 * other (a backlog drains faster on one; the turns are for a live stream's
 * latency). Without a pair it changes nothing.
 */
void producer_stay(struct producer *p, bool stay);

/*
 * producer_purge_queued() - drop the messages librdkafka has not sent yet
 * (rd_kafka_purge, RD_KAFKA_PURGE_F_QUEUE, not waiting): their delivery
 * reports come with _PURGE_QUEUE at the next producer_poll(). For a Kafka
 * transaction that a record's failure made abortable: librdkafka sends
 * nothing more of it (rd_kafka_txn_may_send_msg), so its queued records
 * would otherwise wait for message.timeout.ms. May be called from a
 * delivery report.
 */
void producer_purge_queued(struct producer *p);

/* producer_abort_transaction() - abort, purging what is not delivered; blocks up to @timeout_ms. */
int producer_abort_transaction(struct producer *p, int timeout_ms, struct producer_error *ret_error);

/*
 * What producer_topic_config() and producer_topic_config_ask() read of a
 * topic's configuration (DescribeConfigs, KIP-133).
 */
struct producer_topic_config {
        int error;                   /* 0; else Kafka's code (UNKNOWN_TOPIC_OR_PART: no such topic, */
                                     /* TOPIC_AUTHORIZATION_FAILED: no DESCRIBE_CONFIGS) or librdkafka's */
        char error_text[256];
        char cleanup_policy[64];     /* e.g. "compact", "compact,delete" */
        int min_insync_replicas;     /* -1: not answered */
};

/*
 * producer_topic_config() - @topic's cleanup.policy and min.insync.replicas,
 * asked with DescribeConfigs and waiting up to @timeout_ms. Blocks. Returns
 * 0, or -EIO with the error in @ret (no such topic, not authorized, no
 * answer in time).
 */
int producer_topic_config(struct producer *p, const char *topic, int timeout_ms,
                          struct producer_topic_config *ret);

/*
 * producer_topic_config_ask() - the same question without waiting (the
 * request times out after @timeout_ms): the answer wakes producer_fd() and
 * is taken by producer_poll(), then by producer_topic_config_answer().
 * Returns 0, or -EBUSY while an earlier question is unanswered.
 */
int producer_topic_config_ask(struct producer *p, const char *topic, int timeout_ms);

/*
 * producer_topic_config_answer() - the answer to the last
 * producer_topic_config_ask() into @ret, once (@ret->error says whether the
 * topic was described). Returns 0; -EAGAIN while it has not come; -ENOENT
 * when nothing was asked.
 */
int producer_topic_config_answer(struct producer *p, struct producer_topic_config *ret);

/*
 * producer_topic_layout() - @topic's partition count, the fewest replicas of
 * any of its partitions and the count of brokers in the cluster, from one
 * metadata request for all topics (naming one can make the broker create
 * it), waiting up to @timeout_ms. Returns 0; -ENOENT when the cluster has no
 * such topic (*ret_brokers is set); -EHOSTUNREACH with librdkafka's reason
 * in @err.
 */
int producer_topic_layout(struct producer *p, const char *topic, int timeout_ms, int *ret_partitions,
                          int *ret_replicas, int *ret_brokers, char *err, size_t errlen);

/*
 * producer_create_topic() - CreateTopics for @topic with @partitions and
 * @replication replicas (-1: the broker's default, Kafka 2.4+), with topic
 * settings @config (@nconfig name, value pairs), waiting up to @timeout_ms.
 * Blocks.
 * Returns 0; -EEXIST if it exists; -EACCES when the principal may not create
 * it; -EINVAL or -EIO with the reason in @err.
 */
int producer_create_topic(struct producer *p, const char *topic, int partitions, int replication,
                          const char *const *config, size_t nconfig, int timeout_ms, char *err,
                          size_t errlen);

/*
 * producer_header_value() - the last header named @name of @m as a
 * NUL-terminated copy in @buf (@size bytes, truncated), or "" if none.
 * Returns @buf.
 */
const char *producer_header_value(const struct producer_msg *m, const char *name, char *buf, size_t size);

/*
 * producer_metrics_push_property() - "enable.metrics.push" (librdkafka's
 * CONFIGURATION.md) when the linked librdkafka has it (2.5.0 and later),
 * else NULL; a static string. Every librdkafka client of the relay (the
 * producers, the checkpoint reader, redrive's consumer) sets it to false
 * before the user's -X: with client metrics pushed (KIP-714),
 * rd_kafka_destroy() can wait a whole second for their end, at every start
 * and reconnect.
 */
const char *producer_metrics_push_property(void);

/*
 * producer_property() - the value of librdkafka property @name
 * (CONFIGURATION.md) that @p's producer was made with, our defaults and the
 * user's -X included, in @buf of @size bytes (truncated), "" when librdkafka
 * has no such property. Returns @buf.
 */
const char *producer_property(const struct producer *p, const char *name, char *buf, size_t size);

/*
 * producer_only_property() - true if librdkafka property @name (CONFIGURATION.md,
 * the properties marked P) configures only a producer: a consumer the relay
 * makes from the same -X properties (the checkpoint reader, redrive's topic
 * scan) leaves it out, since librdkafka warns about each.
 */
bool producer_only_property(const char *name);

#endif
