// SPDX-License-Identifier: Apache-2.0
/*
 * The delivery-report policy of relay_ack.c and the producer's error
 * classification, against librdkafka's mock cluster (rdkafka_mock.h) with
 * broker errors injected: a record's own error is dead-lettered or stops
 * the relay (exit 4), a batch refused as too large for its topic is not the
 * row's fault unless its record alone exceeds the topic's limit (the relay
 * streams again with batches that fit, under --exactly-once too), a cluster
 * error discards the producer (exit 1), a
 * fatal one stops (exit 3), a failed dead-letter publish stops (exit 4), and
 * the in-flight bytes the producer counts return to zero. Under
 * --exactly-once, a Kafka transaction that librdkafka fails by itself (a
 * request of the transaction refused, its records purged, no record's
 * report naming it) is aborted at once and streamed again, never taken for a
 * stop. No PostgreSQL, no real broker: milliseconds.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit_check.h"
#include "log.h"
#include "relay_parts.h"

#define TOPIC "orders"
#define DEAD "dead"
#define KAFKA_API_PRODUCE 0  /* Kafka protocol ApiKey of ProduceRequest */
#define KAFKA_API_ADD_PARTITIONS_TO_TXN 24
#define KAFKA_API_END_TXN 26

static volatile sig_atomic_t stop_flag;

struct world {
        rd_kafka_t *mock_rk;
        rd_kafka_mock_cluster_t *mc;
        struct relay_config conf;
        struct relay r;
        int pipefd[2];
        const char *props[10];
};

/* linger.ms of the next world's producer, NULL for the relay's own (5). */
static const char *world_linger_ms;

static void world_open_eos(struct world *w, const char *on_error, const char *timeout_ms, bool eos)
{
        char err[512], *argv[16];
        int argc = 0;
        rd_kafka_conf_t *kc = rd_kafka_conf_new();

        memset(w, 0, sizeof(*w));
        /* A handle of its own just to own the mock cluster. */
        w->mock_rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, err, sizeof(err));
        w->mc = rd_kafka_mock_cluster_new(w->mock_rk, 1);
        rd_kafka_mock_topic_create(w->mc, TOPIC, 1, 1);
        rd_kafka_mock_topic_create(w->mc, DEAD, 1, 1);
        rd_kafka_mock_topic_create(w->mc, "outbox-relay.checkpoints", 1, 1);
        argv[argc++] = "test";
        argv[argc++] = "-b";
        argv[argc++] = (char *)rd_kafka_mock_cluster_bootstraps(w->mc);
        argv[argc++] = (char *)on_error;
        argv[argc++] = "--dead-letter-topic=" DEAD;
        if (eos)
                argv[argc++] = "--exactly-once";
        argv[argc] = NULL;
        CHECK(config_parse(argc, argv, &w->conf, err, sizeof(err)) == 0);
        CHECK(pipe2(w->pipefd, O_NONBLOCK) == 0);
        w->r.conf = &w->conf;
        w->r.guarantee = relay_guarantee_of(&w->conf);
        w->r.on_delivery = relay_on_delivery;
        w->r.on_kafka_event = relay_on_kafka_event;
        w->r.stop = &stop_flag;
        w->r.stop_fd = w->pipefd[0];
        w->r.ledger = ledger_new(LSN_INVALID);
        w->r.stats.topics = metrics_labels_new(16);
        w->r.stats.errors = metrics_labels_new(16);
        w->r.state = "test";
        w->r.limits.read_ms = 100;     /* the mock cluster never answers DescribeConfigs */
        w->props[0] = "message.timeout.ms";
        w->props[1] = timeout_ms;
        w->props[2] = "retries";
        w->props[3] = "2";
        w->props[4] = "retry.backoff.ms";
        w->props[5] = "10";
        /* Nothing the relay decides may come from librdkafka's log lines: there are none. */
        w->props[6] = "log_level";
        w->props[7] = "0";
        w->props[8] = "linger.ms";
        w->props[9] = world_linger_ms;
        w->r.prod_opts = (struct producer_options){.brokers = w->conf.brokers, .props = w->props,
                                                  .nprops = world_linger_ms ? 5 : 4, .queue_messages = 1000};
        if (eos) {
                snprintf(w->r.eos.tid, sizeof(w->r.eos.tid), "test-txn");
                w->r.prod_opts.transactional_id = w->r.eos.tid;
        }
        CHECK(producer_new(&w->r.prod_opts, relay_on_delivery, relay_on_kafka_event, &w->r, &w->r.prod,
                           err, sizeof(err)) == 0);
        if (eos) {
                CHECK(relay_eos_init(&w->r) == 0);
                /* The side connection's round, as if it had checked the slot and verified everything. */
                w->r.round.slot_checked = true;
                w->r.round.verified = UINT64_MAX;
        }
}

static void world_open(struct world *w, const char *on_error, const char *timeout_ms)
{
        world_open_eos(w, on_error, timeout_ms, false);
}

static void world_close(struct world *w)
{
        relay_limits_free(&w->r);
        relay_nacks_free(&w->r);
        producer_free(w->r.prod);
        ledger_free(w->r.ledger);
        metrics_labels_free(w->r.stats.topics);
        metrics_labels_free(w->r.stats.errors);
        config_free(&w->conf);
        rd_kafka_mock_cluster_destroy(w->mc);
        rd_kafka_destroy(w->mock_rk);
        close(w->pipefd[0]);
        close(w->pipefd[1]);
}

/* @topic's max.message.bytes is known to be @bytes, as after reading it. */
static void set_limit(struct world *w, const char *topic, int64_t bytes)
{
        relay_know_topic(&w->r, topic);
        for (size_t i = 0; i < w->r.limits.n; i++)
                if (strcmp(w->r.limits.v[i].name, topic) == 0) {
                        w->r.limits.v[i].max_bytes = bytes;
                        w->r.limits.v[i].unread = false;
                        w->r.limits.v[i].read = true;
                }
}

/* The relay's entry for @topic's limit, or NULL. */
static const struct relay_topic_limit *limit_of(const struct world *w, const char *topic)
{
        for (size_t i = 0; i < w->r.limits.n; i++)
                if (strcmp(w->r.limits.v[i].name, topic) == 0)
                        return &w->r.limits.v[i];
        return NULL;
}

/* One row of one transaction, produced under a ledger ticket with the relay's headers. */
static void produce_row(struct world *w, const char *topic, const char *work_id, size_t value_len,
                        uint64_t end_lsn)
{
        struct producer_header h[3] = {
                {"ce_id", work_id, strlen(work_id)},
                {"ce_pglsn", "0/10", 4},
                {"ce_source", "postgresql://1/db/public.outbox", 31},
        };
        char *value = malloc(value_len + 1);
        struct producer_error e;
        ledger_ticket t;

        memset(value, 'x', value_len);
        value[value_len] = '\0';
        CHECK(ledger_begin(w->r.ledger, end_lsn, 0) == 0);
        CHECK(ledger_add_message(w->r.ledger, &t) == 0);
        CHECK(relay_produce(&w->r, &(struct producer_msg){.topic = topic, .key = work_id,
                            .key_len = strlen(work_id), .value = value, .value_len = value_len,
                            .headers = h, .nheaders = 3, .ticket = t}, &e) == 0);
        CHECK(ledger_commit(w->r.ledger, end_lsn) == 0);
        CHECK(producer_inflight_bytes(w->r.prod) > value_len);
        free(value);
}

/* Serve reports and nacks until nothing is outstanding or a failure, at most 10 s. */
static void settle(struct world *w)
{
        for (int i = 0; i < 1000 && !w->r.failure && !w->r.producer_broken &&
                        (ledger_outstanding(w->r.ledger) > 0 || w->r.nacks.n > 0); i++) {
                relay_wait(&w->r, 10, 0);
                relay_handle_nacks(&w->r);
        }
}

static void test_acked(void)
{
        struct world w;

        world_open(&w, "--on-error=stop", "5000");
        produce_row(&w, TOPIC, "ok-1", 100, 0x10);
        settle(&w);
        CHECK_INT(w.r.failure, 0);
        CHECK_INT(ledger_outstanding(w.r.ledger), 0);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0x10);
        CHECK_INT(w.r.stats.c.acked, 1);
        CHECK_INT(producer_inflight_bytes(w.r.prod), 0);
        world_close(&w);
}

static void test_record_error_stops(void)
{
        struct world w;

        world_open(&w, "--on-error=stop", "5000");
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 1,
                                          RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
        produce_row(&w, TOPIC, "denied-1", 100, 0x10);
        settle(&w);
        CHECK_INT(w.r.failure, RELAY_EXIT_DATA);
        CHECK_INT(w.r.producer_broken, 0);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0);    /* never confirmed past it */
        CHECK_INT(w.r.stats.c.row_errors, 1);
        CHECK_INT(metrics_labels_get(w.r.stats.errors, "TOPIC_AUTHORIZATION_FAILED"), 1);
        CHECK_INT(producer_inflight_bytes(w.r.prod), 0);
        world_close(&w);
}

static void test_record_error_dead_lettered(void)
{
        struct world w;

        world_open(&w, "--on-error=dead-letter", "5000");
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 1, RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP);
        produce_row(&w, TOPIC, "old-1", 100, 0x10);
        settle(&w);
        CHECK_INT(w.r.failure, 0);
        CHECK_INT(w.r.stats.c.dead_lettered, 1);
        CHECK_INT(ledger_outstanding(w.r.ledger), 0);  /* the dead-letter ack releases the ticket */
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0x10);
        CHECK_INT(metrics_labels_get(w.r.stats.topics, DEAD), 1);
        CHECK_INT(producer_inflight_bytes(w.r.prod), 0);
        world_close(&w);
}

static void test_dead_letter_failure_stops(void)
{
        struct world w;

        world_open(&w, "--on-error=dead-letter", "5000");
        /* the row's produce, then the dead-letter produce, are both refused */
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 2,
                                          RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
                                          RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
        produce_row(&w, TOPIC, "denied-2", 100, 0x10);
        settle(&w);
        CHECK_INT(w.r.failure, RELAY_EXIT_DATA);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0);
        world_close(&w);
}

/* The last line of the log file at @path holding @needle, into @buf ("" if none). */
static void last_line_with(const char *path, const char *needle, char *buf, size_t size)
{
        char line[8192];
        FILE *f = fopen(path, "r");

        buf[0] = '\0';
        CHECK(f != NULL);
        if (!f)
                return;
        while (fgets(line, sizeof(line), f))
                if (strstr(line, needle))
                        snprintf(buf, size, "%s", line);
        fclose(f);
}

/*
 * A dead-letter copy that librdkafka refuses at once (here: larger than its
 * message.max.bytes, the topic's own limit read as larger) stops with the
 * words of a copy refused in its delivery report: the work ID, the
 * transaction's xid and end LSN, and the fix. Which of the two a start meets
 * can be a race (a topic refused by an ACL is refused at once only once its
 * metadata is in): the restart in CI's test_unauthorized_dead_letter_topic_stops
 * met the at-once path, which left out the xid and always gave the remedy for
 * a size.
 */
static void test_dead_letter_refused_at_once_names_the_transaction(void)
{
        struct producer_header h[4] = {
                {"ce_id", "dl-9", 4},
                {"ce_pglsn", "0/10", 4},
                {"ce_pgxid", "810", 3},
                {"ce_source", "postgresql://1/db/public.outbox", 31},
        };
        size_t len = 2 * 1000 * 1000;
        char *value = malloc(len);
        struct producer_msg m = {.topic = TOPIC, .key = "dl-9", .key_len = 4, .value = value, .value_len = len,
                                 .headers = h, .nheaders = 4};
        char path[] = "/tmp/test-relay-ack-XXXXXX", line[8192];
        struct world w;
        int fd, ret;

        memset(value, 'x', len);
        world_open(&w, "--on-error=dead-letter", "5000");
        set_limit(&w, DEAD, 10 * 1000 * 1000);
        fd = mkstemp(path);
        CHECK(fd >= 0);
        close(fd);
        CHECK_INT(log_open(path), 0);
        CHECK(ledger_begin(w.r.ledger, 0x10, 0) == 0);
        CHECK(ledger_add_message(w.r.ledger, &m.ticket) == 0);
        ret = relay_dead_letter(&w.r, &m, TOPIC, "MSG_SIZE_TOO_LARGE", "too large", "dl-9", "0/10");
        CHECK_INT(log_open(NULL), 0);
        CHECK(ret < 0 && ret != -EAGAIN);
        if (ret < 0)
                ledger_cancel_message(w.r.ledger, m.ticket);
        CHECK(ledger_commit(w.r.ledger, 0x10) == 0);
        CHECK_INT(w.r.failure, RELAY_EXIT_DATA);
        last_line_with(path, "dead-letter publish", line, sizeof(line));
        unlink(path);
        if (!strstr(line, "transaction 810 ending at LSN 0/10"))
                printf("the stop: %s", line);
        CHECK(strstr(line, "work ID \"dl-9\" (table \"public\".\"outbox\", transaction 810 ending at LSN 0/10) "
                     "to \"dead\" failed: ") != NULL);
        CHECK(strstr(line, "Let the dead-letter topic take the row") != NULL);
        CHECK(strstr(line, "--skip-transaction=0/10") != NULL);
        CHECK_INT(producer_inflight_bytes(w.r.prod), 0);
        world_close(&w);
        free(value);
}

/*
 * A batch refused as too large for a topic whose limit is not known: the
 * record alone may fit, so it is not dead-lettered; the relay streams again
 * with a new producer, which reads the limit first.
 */
static void test_refused_batch_is_not_the_rows(void)
{
        struct world w;

        world_open(&w, "--on-error=dead-letter", "5000");
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
        produce_row(&w, TOPIC, "innocent-1", 100, 0x10);
        settle(&w);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK(w.r.limits.refit);                       /* recover() then discards the producer */
        CHECK_INT(w.r.stats.c.dead_lettered, 0);
        CHECK_INT(w.r.stats.c.row_errors, 0);
        CHECK_INT(w.r.stats.c.refused_batches, 1);
        CHECK(limit_of(&w, TOPIC) && limit_of(&w, TOPIC)->refused);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0);    /* never confirmed past it */
        world_close(&w);
}

/* With the limit known, a record alone larger than it is the row's fault: its policy, no restream. */
static void test_record_too_large_alone(void)
{
        struct world w;

        world_open(&w, "--on-error=dead-letter", "5000");
        set_limit(&w, TOPIC, 3000);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
        produce_row(&w, TOPIC, "big-1", 5000, 0x10);
        settle(&w);
        CHECK_INT(w.r.failure, 0);
        CHECK_INT(w.r.producer_broken, 0);
        CHECK_INT(w.r.stats.c.dead_lettered, 1);
        CHECK_INT(w.r.stats.c.refused_batches, 0);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0x10);
        world_close(&w);

        world_open(&w, "--on-error=stop", "5000");
        set_limit(&w, TOPIC, 3000);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
        produce_row(&w, TOPIC, "big-2", 5000, 0x10);
        settle(&w);
        CHECK_INT(w.r.failure, RELAY_EXIT_DATA);
        CHECK_INT(w.r.stats.c.row_errors, 1);
        world_close(&w);
}

/*
 * The limit known and the record fitting it alone: still the batch's fault.
 * A refused topic whose limit cannot be read (the mock cluster has no
 * DescribeConfigs, like a principal without DESCRIBE_CONFIGS) is tried
 * again, then stops the relay (exit 3): no endless restreaming.
 */
static void test_refused_batch_with_unreadable_limit_stops(void)
{
        struct world w;
        char err[512];

        world_open(&w, "--on-error=stop", "5000");
        set_limit(&w, TOPIC, 3000);
        for (int round = 1; round <= 3; round++) {
                rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 1,
                                                  RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
                produce_row(&w, TOPIC, "innocent-2", 100, 0x10 * (uint64_t)round);
                settle(&w);
                CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
                CHECK_INT(w.r.stats.c.row_errors, 0);
                /* what recover() does: a new producer, fitted first */
                w.r.prod = producer_free(w.r.prod);
                if (round < 3) {
                        CHECK_INT(relay_new_producer(&w.r, err, sizeof(err)), 0);
                        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
                        CHECK(limit_of(&w, TOPIC)->refused);
                        CHECK(!w.r.limits.refit);
                        w.r.failure = 0;
                        ledger_reset(w.r.ledger);
                } else {
                        CHECK_INT(relay_new_producer(&w.r, err, sizeof(err)), -ECANCELED);
                        CHECK_INT(w.r.failure, RELAY_EXIT_ENVIRONMENT);
                }
        }
        CHECK_INT(w.r.stats.c.refused_batches, 1);
        world_close(&w);
}

static void test_cluster_error_discards_the_producer(void)
{
        struct world w;

        world_open(&w, "--on-error=dead-letter", "300");
        rd_kafka_mock_broker_set_down(w.mc, 1);
        produce_row(&w, TOPIC, "late-1", 100, 0x10);
        settle(&w);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK_INT(w.r.producer_broken, 1);
        CHECK_INT(w.r.stats.c.dead_lettered, 0);       /* a timeout is not the row's fault */
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0);
        world_close(&w);
}

/* An exactly-once world inside a PostgreSQL transaction ending at @end_lsn, its checkpoint key set. */
static void open_eos_txn(struct world *w, const char *on_error, uint64_t end_lsn)
{
        world_open_eos(w, on_error, "5000", true);
        snprintf(w->r.watch.key, sizeof(w->r.watch.key), "1/db/slot");
        CHECK(ledger_begin(w->r.ledger, end_lsn, 0) == 0);
        w->r.txn.end_lsn = end_lsn;
        relay_eos_txn_begins(&w->r, end_lsn);
}

/*
 * The commit or abort in flight carried to its end, as relay.c's top loop
 * does: a step, then the one wait, at most 10 s. Returns the first failed
 * step's -EIO, or 0.
 */
static int end_eos(struct world *w)
{
        int ret = 0;

        for (int i = 0; i < 1000 && relay_eos_busy(&w->r); i++) {
                if (relay_eos_step(&w->r) < 0 && ret == 0)
                        ret = -EIO;
                if (relay_eos_busy(&w->r))
                        relay_wait(&w->r, 10, 0);
        }
        CHECK(!relay_eos_busy(&w->r));
        return ret;
}

/* A stop's commit of what is open, carried to its end. Returns 0 or -EIO as end_eos(). */
static int flush_eos(struct world *w)
{
        int ret = relay_eos_flush(&w->r);

        return end_eos(w) < 0 ? -EIO : ret;
}

/*
 * One row into the open Kafka transaction, as relay_row.c's publish_row()
 * does it: the transaction opened first, a _STATE refusal handed to
 * relay_eos_produce_failed(). Returns 0, -ECANCELED when that aborted the
 * transaction, or relay_produce()'s error when it left the error to the caller.
 */
static int produce_eos_row(struct world *w, const char *work_id)
{
        struct producer_error e;
        ledger_ticket t;
        int ret;

        struct producer_header h[2] = {
                {"ce_id", work_id, strlen(work_id)},
                {"ce_pglsn", "0/10", 4},
        };

        CHECK(ledger_add_message(w->r.ledger, &t) == 0);
        CHECK(relay_eos_before_record(&w->r, TOPIC, work_id, strlen(work_id), 0x10, false) == 0);
        ret = relay_produce(&w->r, &(struct producer_msg){.topic = TOPIC, .key = work_id,
                            .key_len = strlen(work_id), .value = "{}", .value_len = 2, .headers = h,
                            .nheaders = 2, .ticket = t}, &e);
        if (ret < 0) {
                ledger_cancel_message(w->r.ledger, t);
                if (relay_eos_produce_failed(&w->r, &e) == 0)
                        return ret;
                end_eos(w);             /* the abort, once the reports are in */
                return -ECANCELED;
        }
        relay_eos_produced(&w->r, 2);
        return 0;
}

/*
 * The broker refuses AddPartitionsToTxn: librdkafka makes the transaction
 * abortable and purges its record; no report names a failed record. The
 * next produce is refused with _STATE: the relay aborts and streams again
 * (exit 1 if it came to that), it does not stop as if no retry could cure it.
 */
static void test_eos_transaction_failed_by_librdkafka_refuses_next_record(void)
{
        struct world w;
        int64_t start;
        int i, ret = 0;

        world_open_eos(&w, "--on-error=stop", "5000", true);
        CHECK(ledger_begin(w.r.ledger, 0x10, 0) == 0);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_ADD_PARTITIONS_TO_TXN, 1,
                                          RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
        /* librdkafka fails the transaction on its own thread; no report is served here */
        for (i = 0; i < 50 && (ret = produce_eos_row(&w, "next-1")) == 0; i++)
                usleep(100 * 1000);
        start = relay_mono_ms();
        CHECK_INT(ret, -ECANCELED);
        CHECK(i > 0);                                  /* the first record was taken */
        CHECK(relay_mono_ms() - start < 5000);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK_INT(w.r.producer_broken, 0);
        CHECK_INT(w.r.eos.open, 0);
        CHECK_INT(w.r.eos.stats_aborted, 1);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0);    /* nothing confirmed */
        world_close(&w);
}

/*
 * The same failure met at a commit: the purged record's report ends the
 * wait for reports at once (not after the 60 s bound), and the transaction
 * is aborted and streamed again.
 */
/*
 * One row in a transaction ending at 0x10 whose AddPartitionsToTxn the
 * coordinator answers with @err, then the commit at a stop, which fails.
 * Returns how long the commit took, in ms.
 */
static int64_t commit_after_refusal(struct world *w, const char *work_id, int err)
{
        int64_t start;

        world_open_eos(w, "--on-error=stop", "5000", true);
        CHECK(ledger_begin(w->r.ledger, 0x10, 0) == 0);
        rd_kafka_mock_push_request_errors(w->mc, KAFKA_API_ADD_PARTITIONS_TO_TXN, 1, err);
        CHECK_INT(produce_eos_row(w, work_id), 0);
        relay_eos_row_done(&w->r);
        CHECK(ledger_commit(w->r.ledger, 0x10) == 0);
        start = relay_mono_ms();
        CHECK_INT(flush_eos(w), -EIO);
        return relay_mono_ms() - start;
}

static void test_eos_transaction_failed_by_librdkafka_at_commit(void)
{
        struct world w;

        CHECK(commit_after_refusal(&w, "first-2", RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT) < 5000);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK_INT(w.r.eos.stats_committed, 0);
        CHECK_INT(w.r.eos.stats_aborted, 1);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0);
        world_close(&w);
}

/*
 * A session as relay.c's recover() and session() make it after a retry: a
 * new producer (its init_transactions() fences the old one), the ledger back
 * to what is confirmed, the transaction ending at 0x10 read again.
 */
static void next_session(struct world *w)
{
        char err[512];

        w->r.prod = producer_free(w->r.prod);
        CHECK(producer_new(&w->r.prod_opts, relay_on_delivery, relay_on_kafka_event, &w->r, &w->r.prod,
                           err, sizeof(err)) == 0);
        w->r.failure = 0;
        w->r.producer_broken = false;
        ledger_rewind(w->r.ledger, 0);
        CHECK(relay_eos_init(&w->r) == 0);
        CHECK(ledger_begin(w->r.ledger, 0x10, 0) == 0);
}

/*
 * The coordinator refuses the topic's partition for good (no WRITE on the
 * topic, as Kafka answers AddPartitionsToTxn). librdkafka fails the
 * transaction and purges its records; no delivery report names the record.
 * The relay learns the error's code from the transactions API (never from a
 * log line), aborts, and the next session puts each topic's first record
 * into a Kafka transaction of its own: refused again there, the error is
 * that record's, and the replay applies its --on-error policy to it instead
 * of aborting and streaming again forever. No log line is read: librdkafka
 * logs nothing here at all (log_level 0).
 */
static void test_eos_topic_refused_to_the_transaction_is_the_records_error(void)
{
        struct world w;
        char code[64], reason[1024];

        commit_after_refusal(&w, "denied-3", RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);      /* aborted, streamed again... */
        CHECK_INT(w.r.eos.stats_aborted, 1);
        CHECK(w.r.eos.probe_next);                     /* ...to find the topic */
        CHECK(!relay_eos_poisoned(&w.r, 0x10, "denied-3", 8, code, sizeof(code), reason, sizeof(reason)));
        next_session(&w);
        CHECK(w.r.eos.probing);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_ADD_PARTITIONS_TO_TXN, 1,
                                          RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED);
        CHECK_INT(produce_eos_row(&w, "denied-3"), 0);
        relay_eos_row_done(&w.r);
        CHECK_INT(relay_eos_after_record(&w.r), 0);     /* the probe's commit begins... */
        CHECK(relay_eos_busy(&w.r));
        CHECK_INT(end_eos(&w), -EIO);                   /* ...and fails */
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK(relay_eos_poisoned(&w.r, 0x10, "denied-3", 8, code, sizeof(code), reason, sizeof(reason)));
        CHECK_STR(code, "TOPIC_AUTHORIZATION_FAILED");
        CHECK(strstr(reason, "Grant WRITE on the topic") != NULL);
        CHECK(strstr(reason, TOPIC) != NULL);
        CHECK_INT(metrics_labels_get(w.r.stats.errors, "TOPIC_AUTHORIZATION_FAILED"), 1);
        world_close(&w);
}

/* A refusal with _STATE and no report at all outstanding (the first record of a transaction). */
static void test_eos_state_refusal_without_reports_aborts(void)
{
        struct world w;
        struct producer_error e = {.code = PRODUCER_ERR_STATE};

        world_open_eos(&w, "--on-error=stop", "5000", true);
        snprintf(e.name, sizeof(e.name), "_STATE");
        snprintf(e.text, sizeof(e.text), "Local: Erroneous state");
        CHECK(relay_eos_before_record(&w.r, TOPIC, "k", 1, 0x10, false) == 0);
        CHECK_INT(w.r.eos.pending, 0);
        CHECK_INT(relay_eos_produce_failed(&w.r, &e), -ECANCELED);
        CHECK(relay_eos_busy(&w.r));                   /* aborted by the top loop's step */
        CHECK_INT(end_eos(&w), -EIO);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK_INT(w.r.eos.open, 0);
        CHECK_INT(w.r.eos.stats_aborted, 1);
        world_close(&w);
}

/* Serve reports until the open Kafka transaction has none pending, at most 10 s. */
static void settle_eos(struct world *w)
{
        for (int i = 0; i < 1000 && w->r.eos.pending > 0; i++)
                relay_wait(&w->r, 10, 0);
}

/*
 * Under --exactly-once a refused batch fails the Kafka transaction; it is
 * aborted and streamed again, and no row is remembered as refused: the
 * replay publishes it (in batches that fit) instead of applying its policy.
 */
static void test_eos_refused_batch_is_not_the_rows(void)
{
        struct world w;
        char code[64], reason[1024];

        world_open_eos(&w, "--on-error=dead-letter", "5000", true);
        CHECK(ledger_begin(w.r.ledger, 0x10, 0) == 0);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
        CHECK_INT(produce_eos_row(&w, "innocent-3"), 0);
        settle_eos(&w);                /* the row's ProduceRequest takes the error, not the checkpoint's */
        relay_eos_row_done(&w.r);
        CHECK(ledger_commit(w.r.ledger, 0x10) == 0);
        CHECK_INT(flush_eos(&w), -EIO);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK_INT(w.r.eos.stats_aborted, 1);
        CHECK(!relay_eos_poisoned(&w.r, 0x10, "innocent-3", 10, code, sizeof(code), reason, sizeof(reason)));
        CHECK(limit_of(&w, TOPIC) && limit_of(&w, TOPIC)->refused);
        world_close(&w);
}

/*
 * A refused batch fails the Kafka transaction while a later batch of it is
 * in flight. The broker answers that one OUT_OF_ORDER_SEQUENCE_NUMBER, and
 * librdkafka puts its records back in its queue for after an epoch bump
 * (rdkafka_request.c), which under transactions only the abort brings. That
 * happens after the purge that followed the first failed report, so no
 * report of theirs came before message.timeout.ms: the commit waited for
 * them until its 60 s deadline (CI, test_limit_lowered_while_running
 * [exactly-once]). While a failed transaction's reports are due its queue is
 * purged again.
 */
static void test_eos_failed_transaction_purges_records_put_back(void)
{
        struct world w;
        int64_t start, took;

        world_open_eos(&w, "--on-error=dead-letter", "30000", true);
        CHECK(ledger_begin(w.r.ledger, 0x10, 0) == 0);
        CHECK_INT(produce_eos_row(&w, "before-5"), 0);
        settle_eos(&w);                 /* the partition in the transaction, the producer's sequence going */
        CHECK_INT(w.r.eos.failed, 0);
        rd_kafka_mock_broker_set_rtt(w.mc, 1, 500);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 2, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE,
                                          RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
        start = relay_mono_ms();
        CHECK_INT(produce_eos_row(&w, "refused-5"), 0);
        /*
         * Pacing, not a wait for a result: its ProduceRequest goes after
         * linger.ms (5), its answer 500 ms later, so the next record goes in
         * a request of its own while the first is in flight. The mock cluster
         * of librdkafka 2.0.2 tells no one what it received; the count of
         * MSG_SIZE_TOO_LARGE reports below says the two went apart.
         */
        usleep(150 * 1000);
        CHECK_INT(produce_eos_row(&w, "behind-5"), 0);
        relay_eos_row_done(&w.r);
        CHECK(ledger_commit(w.r.ledger, 0x10) == 0);
        CHECK_INT(flush_eos(&w), -EIO);
        took = relay_mono_ms() - start;
        printf("a failed transaction with a record put back aborted in %" PRId64 " ms\n", took);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK_INT(w.r.eos.stats_aborted, 1);
        /* Only the first was refused as too large: the second was put back, then purged. */
        CHECK_INT(metrics_labels_get(w.r.stats.errors, "MSG_SIZE_TOO_LARGE"), 1);
        CHECK(took < 5000);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0);
        world_close(&w);
}

/*
 * An open Kafka transaction holding one row (@work_id) of a PostgreSQL
 * transaction ended at 0x10, its producer's linger.ms @linger_ms (NULL: the
 * relay's own), the mock broker's round trip @rtt_ms (0: none). Nothing is
 * committed yet.
 */
static void open_one_row_txn(struct world *w, const char *linger_ms, int rtt_ms, const char *work_id)
{
        world_linger_ms = linger_ms;
        open_eos_txn(w, "--on-error=stop", 0x10);
        world_linger_ms = NULL;
        if (rtt_ms)
                rd_kafka_mock_broker_set_rtt(w->mc, 1, rtt_ms);
        CHECK_INT(produce_eos_row(w, work_id), 0);
        relay_eos_row_done(&w->r);
        CHECK(ledger_commit(w->r.ledger, 0x10) == 0);
        CHECK_INT(relay_eos_after_transaction(&w->r, 0x10), 0);
}

/*
 * A commit does not wait out linger.ms (producer_hurry()): every record of
 * the Kafka transaction is produced once the commit begins, the checkpoint
 * record last, and each batch would otherwise leave only when its first
 * record has waited linger.ms. Here linger.ms is 4 s: the commit takes well
 * under it, and over 4 s without the hurry. With a round trip of @rtt_ms
 * the row's partition is not yet in the transaction (AddPartitionsToTxn
 * unanswered) when the commit begins: librdkafka holds its batch until it
 * is, so the first flush cannot send it, and only a flush after the answer
 * keeps it from waiting out linger.ms.
 */
static void test_eos_commit_does_not_wait_out_linger(int rtt_ms)
{
        struct world w;
        int64_t start, took;

        open_one_row_txn(&w, "4000", rtt_ms, "linger-1");
        start = relay_mono_ms();
        CHECK_INT(flush_eos(&w), 0);
        took = relay_mono_ms() - start;
        printf("a commit with linger.ms at 4000 and a round trip of %d ms took %" PRId64 " ms\n", rtt_ms, took);
        CHECK_INT(w.r.eos.stats_committed, 1);
        CHECK(w.r.watch.ckpt_acked == 0x10);
        CHECK(took < 2000);
        world_close(&w);
}

/*
 * The flushes stop once no batch can linger: every record was produced when
 * the commit began, so past linger.ms (here 10) after it none waits on
 * linger, and the wait goes back to Kafka's wake-ups and its 50 ms look at
 * the commit (a broker that is down would otherwise get a flush every 5 ms
 * until the commit's deadline).
 */
static void test_eos_commit_stops_hurrying_after_linger(void)
{
        struct world w;
        int64_t start;

        open_one_row_txn(&w, "10", 400, "linger-2");
        CHECK(w.r.eos.linger_ms == 10);
        CHECK_INT(relay_eos_flush(&w.r), 0);
        start = relay_mono_ms();
        CHECK(relay_eos_idle_due_ms(&w.r) <= 5);        /* hurrying: the next flush within 5 ms */
        while (relay_mono_ms() - start < 100 && w.r.eos.pending > 0) {
                relay_wait(&w.r, (int)relay_eos_idle_due_ms(&w.r), 0);
                CHECK_INT(relay_eos_step(&w.r), 0);
        }
        /*
         * The state as of now: on a loaded machine the loop can end on a
         * wait that overran, with a flush due that no step has made yet.
         */
        CHECK_INT(relay_eos_step(&w.r), 0);
        CHECK(w.r.eos.pending > 0);     /* the 400 ms round trip is not over */
        CHECK(relay_eos_idle_due_ms(&w.r) == 50);
        CHECK_INT(end_eos(&w), 0);
        CHECK_INT(w.r.eos.stats_committed, 1);
        world_close(&w);
}

/*
 * At the relay's own linger.ms (5) a commit makes no flush: measured, the
 * flushes cost 13% more CPU for a latency gain within the noise
 * (HURRY_MIN_LINGER_MS). The wait goes on at Kafka's wake-ups and its 50 ms
 * look at the commit, and the commit ends all the same.
 */
static void test_eos_commit_at_default_linger_does_not_hurry(void)
{
        struct world w;

        open_one_row_txn(&w, NULL, 200, "linger-default");
        CHECK(w.r.eos.linger_ms == 5);
        CHECK_INT(relay_eos_flush(&w.r), 0);
        CHECK(w.r.eos.end_produced_ms > 0);
        CHECK(w.r.eos.pending > 0);     /* the 200 ms round trip is not over */
        CHECK(w.r.eos.end_hurried_ms == 0);
        CHECK(relay_eos_idle_due_ms(&w.r) == 50);
        CHECK_INT(end_eos(&w), 0);
        CHECK(w.r.eos.end_hurried_ms == 0);
        CHECK_INT(w.r.eos.stats_committed, 1);
        CHECK(w.r.watch.ckpt_acked == 0x10);
        world_close(&w);
}

/*
 * The flushes' window starts when the checkpoint record is produced, not
 * when the commit began: librdkafka's queue full (here its 1,000 messages,
 * held by a linger.ms of 300, then a round trip of 200 ms) keeps the
 * checkpoint record out until the rows' reports are in, past linger.ms
 * after the slot check, and that record's own batch may still linger for
 * linger.ms after it is in. Counted from the slot check, the commit stopped
 * flushing after the first flush (the next wake-up 50 ms away, not 5).
 */
static void test_eos_commit_hurries_from_its_checkpoint_record(void)
{
        struct world w;
        int64_t start, waited;
        int n = 0, ret;

        world_linger_ms = "300";
        open_eos_txn(&w, "--on-error=stop", 0x10);
        world_linger_ms = NULL;
        CHECK(w.r.eos.linger_ms == 300);
        rd_kafka_mock_broker_set_rtt(w.mc, 1, 200);
        while ((ret = produce_eos_row(&w, "queue-full")) == 0)
                n++;
        CHECK_INT(ret, -EAGAIN);
        CHECK(n > 900);
        relay_eos_row_done(&w.r);
        CHECK(ledger_commit(w.r.ledger, 0x10) == 0);
        CHECK_INT(relay_eos_after_transaction(&w.r, 0x10), 0);
        start = relay_mono_ms();
        CHECK_INT(relay_eos_flush(&w.r), 0);
        CHECK(w.r.eos.end_checked_ms > 0);
        CHECK(!w.r.eos.end_produced_ms);      /* the queue is full */
        while (relay_mono_ms() - start < 5000 && !w.r.eos.end_produced_ms) {
                relay_wait(&w.r, (int)relay_eos_idle_due_ms(&w.r), 0);
                CHECK_INT(relay_eos_step(&w.r), 0);
        }
        waited = w.r.eos.end_produced_ms - w.r.eos.end_checked_ms;
        printf("the checkpoint record went in %" PRId64 " ms after the slot check, with %d rows queued\n",
               waited, n);
        CHECK(w.r.eos.end_produced_ms > 0);
        CHECK(waited > w.r.eos.linger_ms);
        CHECK(w.r.eos.pending > 0);
        CHECK(w.r.eos.end_hurried_ms > 0);      /* the first flush, at once */
        CHECK(relay_eos_idle_due_ms(&w.r) <= 5);        /* and the next within 5 ms */
        CHECK_INT(end_eos(&w), 0);
        CHECK_INT(w.r.eos.stats_committed, 1);
        CHECK(w.r.watch.ckpt_acked == 0x10);
        world_close(&w);
}

/* A record alone larger than the known limit: the replay applies its policy, the reason names the limit. */
static void test_eos_record_too_large_alone(void)
{
        struct world w;
        char code[64], reason[1024];

        world_open_eos(&w, "--on-error=dead-letter", "5000", true);
        set_limit(&w, TOPIC, 40);
        CHECK(ledger_begin(w.r.ledger, 0x10, 0) == 0);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 1, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
        CHECK_INT(produce_eos_row(&w, "big-3"), 0);
        settle_eos(&w);
        relay_eos_row_done(&w.r);
        CHECK(ledger_commit(w.r.ledger, 0x10) == 0);
        CHECK_INT(flush_eos(&w), -EIO);
        CHECK(relay_eos_poisoned(&w.r, 0x10, "big-3", 5, code, sizeof(code), reason, sizeof(reason)));
        CHECK_STR(code, "MSG_SIZE_TOO_LARGE");
        CHECK(strstr(reason, "max.message.bytes of topic \"" TOPIC "\", 40 bytes") != NULL);
        world_close(&w);
}

/*
 * The producer's batches per topic: a topic whose limit is below the batch
 * goes through a lane (a librdkafka producer) with batches that fit; the
 * others keep theirs, and reports from every lane come through the one
 * descriptor. A topic fitted later gets a lane too, or shares one whose
 * batch fits it. A transactional producer shrinks every batch instead.
 */
static void test_producer_fits_topics(void)
{
        struct world w;
        struct producer_topic_limit limits[] = {{"small", 3000}, {"larger", 65536}, {DEAD, 2000000}};
        struct producer_options opts;
        struct producer *p;
        char err[512];

        world_open(&w, "--on-error=stop", "5000");
        rd_kafka_mock_topic_create(w.mc, "small", 1, 1);
        opts = w.r.prod_opts;
        opts.limits = limits;
        opts.nlimits = 3;
        CHECK_INT(producer_batch_bytes(w.r.prod), 1000000);
        CHECK_INT(producer_topic_batch_bytes(w.r.prod, "small"), 1000000);
        w.r.prod = producer_free(w.r.prod);
        CHECK_INT(producer_new(&opts, relay_on_delivery, relay_on_kafka_event, &w.r, &w.r.prod, err,
                               sizeof(err)), 0);
        CHECK_INT(producer_topic_batch_bytes(w.r.prod, "small"), 3000);
        CHECK_INT(producer_topic_batch_bytes(w.r.prod, "larger"), 65536);  /* a lane of its own */
        CHECK_INT(producer_topic_batch_bytes(w.r.prod, TOPIC), 1000000);
        CHECK_INT(producer_topic_batch_bytes(w.r.prod, DEAD), 1000000);
        CHECK_INT(producer_fit_topic(w.r.prod, "later", 2500, err, sizeof(err)), 0);
        CHECK_INT(producer_topic_batch_bytes(w.r.prod, "later"), 2500);
        CHECK_INT(producer_fit_topic(w.r.prod, "shares", 4000, err, sizeof(err)), 0);
        CHECK_INT(producer_topic_batch_bytes(w.r.prod, "shares"), 3000);
        CHECK_INT(producer_fit_topic(w.r.prod, "wide", 2000000, err, sizeof(err)), 0);
        CHECK_INT(producer_topic_batch_bytes(w.r.prod, "wide"), 1000000);
        produce_row(&w, "small", "fit-1", 100, 0x10);
        produce_row(&w, TOPIC, "wide-1", 100, 0x20);
        settle(&w);
        CHECK_INT(w.r.failure, 0);
        CHECK_INT(w.r.stats.c.acked, 2);
        CHECK_INT(metrics_labels_get(w.r.stats.topics, "small"), 1);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0x20);
        CHECK_INT(producer_inflight_bytes(w.r.prod), 0);

        /* -X batch.size and message.max.bytes: the lesser is the producer's batch */
        opts.props = (const char *[]){"batch.size", "500000", "message.max.bytes", "400000"};
        opts.nprops = 2;
        opts.limits = NULL;
        opts.nlimits = 0;
        CHECK_INT(producer_new(&opts, relay_on_delivery, relay_on_kafka_event, NULL, &p, err, sizeof(err)), 0);
        CHECK_INT(producer_batch_bytes(p), 400000);
        producer_free(p);

        opts.nprops = 0;
        opts.limits = limits;
        opts.nlimits = 3;
        opts.transactional_id = "test-fit";
        CHECK_INT(producer_new(&opts, relay_on_delivery, relay_on_kafka_event, NULL, &p, err, sizeof(err)), 0);
        CHECK_INT(producer_topic_batch_bytes(p, TOPIC), 3000);
        CHECK_INT(producer_batch_bytes(p), 1000000);
        CHECK_INT(producer_fit_topic(p, "later", 2500, err, sizeof(err)), -EBUSY);
        producer_free(p);
        world_close(&w);
}

/* A record batch of one record, by hand from the protocol's "Record Batch" and "Record". */
static void test_record_batch_bytes(void)
{
        char big[200];
        struct producer_header h[2] = {{"a", "bc", 2}, {"n", NULL, 0}};
        struct producer_msg m = {.topic = "t", .key = "k", .key_len = 1, .value = "vvvvvvvvvv",
                                 .value_len = 10};

        /* attributes 1, deltas 1+1, key 1+1, value 1+10, headers 1: 17; its length 1; header 61 */
        CHECK_INT(producer_record_batch_bytes(&m), 79);
        m.headers = h;
        m.nheaders = 1;
        CHECK_INT(producer_record_batch_bytes(&m), 84);   /* + name 1+1, value 1+2 */
        m.nheaders = 2;
        CHECK_INT(producer_record_batch_bytes(&m), 87);   /* + name 1+1, null value 1 */
        m.key = NULL;
        m.nheaders = 0;
        CHECK_INT(producer_record_batch_bytes(&m), 78);   /* a null key is length -1: 1 byte */
        memset(big, 'x', sizeof(big));
        m.value = big;
        m.value_len = sizeof(big);                         /* 200: a 2-byte varint */
        CHECK_INT(producer_record_batch_bytes(&m), 61 + 2 + 3 + 1 + 2 + 200 + 1);
}

static void test_classification(void)
{
        CHECK_INT(producer_classify(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, 0), PRODUCER_FAULT_RECORD);
        CHECK_INT(producer_classify(RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP, 0), PRODUCER_FAULT_RECORD);
        CHECK_INT(producer_classify(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, 0), PRODUCER_FAULT_CLUSTER);
        CHECK_INT(producer_classify(RD_KAFKA_RESP_ERR__STATE, 0), PRODUCER_FAULT_FATAL);
        CHECK_INT(producer_classify(RD_KAFKA_RESP_ERR__INVALID_ARG, 0), PRODUCER_FAULT_FATAL);
        CHECK_INT(producer_classify(RD_KAFKA_RESP_ERR__FATAL, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER),
                  PRODUCER_FAULT_CLUSTER);
        CHECK_INT(producer_classify(RD_KAFKA_RESP_ERR__FATAL, RD_KAFKA_RESP_ERR_UNKNOWN), PRODUCER_FAULT_FATAL);
        CHECK(producer_fix(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED) != NULL);
        CHECK(producer_fix(RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION) == NULL);
        CHECK(producer_unknown_topic(RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART));
        CHECK(producer_unknown_topic(RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
        CHECK(producer_unknown_topic(RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION));
        CHECK(!producer_unknown_topic(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED));
}

/*
 * A PostgreSQL transaction ending at 0x20 split over Kafka transactions: its
 * two rows committed by the split (the checkpoint says: up to 0x10, and 2
 * rows of the transaction ending at 0x20), then its commit line read, and no
 * row after it. The next checkpoint-only transaction (the slot moving on
 * with other tables' commits) may claim only what the side connection has
 * verified, 0x18 here, short of 0x20. It once carried no split part: after a
 * crash the restart took the two committed rows for unpublished and sent
 * them again (two duplicates in CI's exactly-once crash loop). The part
 * goes on until a checkpoint reaches the transaction's end.
 */
static void test_eos_checkpoint_short_of_a_split_transaction_keeps_its_part(void)
{
        struct world w;

        open_eos_txn(&w, "--on-error=stop", 0x20);
        CHECK_INT(produce_eos_row(&w, "split-1"), 0);
        relay_eos_row_done(&w.r);
        CHECK_INT(produce_eos_row(&w, "split-2"), 0);
        relay_eos_row_done(&w.r);
        /* the split: committed inside the PostgreSQL transaction, with its part */
        CHECK_INT(flush_eos(&w), 0);
        CHECK_INT(w.r.eos.stats_committed, 1);
        CHECK(w.r.eos.committed_part_end == 0x20);
        CHECK_INT(w.r.eos.committed_part_rows, 2);
        settle(&w);
        CHECK(ledger_commit(w.r.ledger, 0x20) == 0);
        CHECK_INT(relay_eos_after_transaction(&w.r, 0x20), 0);
        CHECK_INT(w.r.eos.open, 0);
        /* a checkpoint-only transaction short of the split transaction's end */
        relay_eos_checkpoint(&w.r, 0x18);
        CHECK_INT(end_eos(&w), 0);
        CHECK_INT(w.r.failure, 0);
        CHECK_INT(w.r.eos.stats_committed, 2);
        CHECK(w.r.watch.ckpt_acked == 0x18);
        CHECK(w.r.eos.committed_part_end == 0x20);
        CHECK_INT(w.r.eos.committed_part_rows, 2);
        world_close(&w);
}

/*
 * The commit is carried by the top loop's steps, never by a wait of its own:
 * once begun it holds every record back (relay_row.c then leaves the row to
 * be offered again), it ends only through relay_eos_step(), and only then
 * does the checkpoint count as committed.
 */
static void test_eos_commit_in_flight_holds_records_back(void)
{
        struct world w;

        open_eos_txn(&w, "--on-error=stop", 0x10);
        CHECK_INT(produce_eos_row(&w, "held-1"), 0);
        relay_eos_row_done(&w.r);
        CHECK(ledger_commit(w.r.ledger, 0x10) == 0);
        CHECK_INT(relay_eos_after_transaction(&w.r, 0x10), 0);
        CHECK(!relay_eos_busy(&w.r));                  /* inside its time bound */
        CHECK_INT(relay_eos_flush(&w.r), 0);
        CHECK(relay_eos_busy(&w.r));                   /* begun, not ended: nothing waited */
        CHECK_INT(w.r.eos.stats_committed, 0);
        CHECK(w.r.watch.ckpt_acked == 0);
        /* the next row is held back, and says so */
        CHECK_INT(relay_eos_before_record(&w.r, TOPIC, "held-2", 6, 0x20, false), -EAGAIN);
        CHECK(w.r.held_back);
        w.r.held_back = false;
        CHECK_INT(end_eos(&w), 0);
        CHECK_INT(w.r.eos.stats_committed, 1);
        CHECK(w.r.watch.ckpt_acked == 0x10);
        CHECK_INT(relay_eos_before_record(&w.r, TOPIC, "held-2", 6, 0x20, false), 0);
        CHECK(!w.r.held_back);
        world_close(&w);
}

/*
 * Two transactional producers (producer_options.transactional_second and
 * transactional_pair, the relay's default with librdkafka 2.4 and later):
 * init_transactions() registers both ids, and committed
 * Kafka transactions alternate between them, so that the next one never
 * waits for the coordinator to finish the last one of its own id. An abort
 * does not switch: the next transaction is the aborted one's producer's.
 * Every transaction after the first carries the newest committed checkpoint
 * from its start, so the checkpoint partition joins it with its records.
 */
static void test_eos_transactions_alternate_between_two_producers(void)
{
        struct world w;
        char err[512], id[600];

        open_eos_txn(&w, "--on-error=stop", 0x10);
        w.r.prod = producer_free(w.r.prod);
        w.r.prod_opts.transactional_second = true;
        w.r.prod_opts.transactional_pair = true;
        CHECK(producer_new(&w.r.prod_opts, relay_on_delivery, relay_on_kafka_event, &w.r, &w.r.prod,
                           err, sizeof(err)) == 0);
        CHECK(relay_eos_init(&w.r) == 0);
        CHECK_STR(producer_transactional_id(w.r.prod, id, sizeof(id)), "test-txn");
        CHECK_INT(produce_eos_row(&w, "pair-1"), 0);
        relay_eos_row_done(&w.r);
        CHECK(ledger_commit(w.r.ledger, 0x10) == 0);
        CHECK_INT(relay_eos_after_transaction(&w.r, 0x10), 0);
        CHECK_INT(flush_eos(&w), 0);
        CHECK_STR(w.r.eos.end_tid, "test-txn");
        CHECK_STR(producer_transactional_id(w.r.prod, id, sizeof(id)), "test-txn.1");
        CHECK(w.r.watch.ckpt_acked == 0x10);
        for (int i = 2; i <= 3; i++) {
                uint64_t end = 0x10 * (uint64_t)i;
                char work_id[16];

                snprintf(work_id, sizeof(work_id), "pair-%d", i);
                settle(&w);
                CHECK(ledger_begin(w.r.ledger, end, 0) == 0);
                w.r.txn.end_lsn = end;
                relay_eos_txn_begins(&w.r, end);
                CHECK_INT(produce_eos_row(&w, work_id), 0);
                /* the record and the newest committed checkpoint */
                CHECK_INT(w.r.eos.pending, 2);
                relay_eos_row_done(&w.r);
                CHECK(ledger_commit(w.r.ledger, end) == 0);
                CHECK_INT(relay_eos_after_transaction(&w.r, end), 0);
                CHECK_INT(flush_eos(&w), 0);
                CHECK_STR(w.r.eos.end_tid, i == 2 ? "test-txn.1" : "test-txn");
                CHECK(w.r.watch.ckpt_acked == end);
        }
        CHECK_INT(w.r.eos.stats_committed, 3);
        CHECK_INT(w.r.failure, 0);
        CHECK_STR(producer_transactional_id(w.r.prod, id, sizeof(id)), "test-txn.1");
        world_close(&w);
}

/*
 * A probing session meets a topic not probed yet while a transaction is
 * open: what is open is committed first, and the record waits for that
 * commit (it is offered again), then goes into a transaction of its own.
 * Its topic counts as probed only once the probe's own commit has ended.
 */
static void test_eos_probe_waits_for_the_commit_of_what_was_open(void)
{
        struct world w;

        open_eos_txn(&w, "--on-error=stop", 0x10);
        w.r.eos.probing = true;
        CHECK_INT(produce_eos_row(&w, "probe-1"), 0);  /* the first topic: a probe of its own */
        relay_eos_row_done(&w.r);
        CHECK(w.r.eos.probe_open);
        CHECK_INT(relay_eos_after_record(&w.r), 0);
        CHECK(w.r.eos.probe_open);                     /* not probed before its commit ends */
        CHECK_INT(end_eos(&w), 0);
        CHECK(!w.r.eos.probe_open);
        CHECK_INT(w.r.eos.nknown, 1);
        CHECK_INT(produce_eos_row(&w, "probe-2"), 0);  /* the same topic: no probe */
        relay_eos_row_done(&w.r);
        CHECK(!w.r.eos.probe_open);
        CHECK(w.r.eos.open);
        CHECK_INT(relay_eos_before_record(&w.r, DEAD, "probe-3", 7, 0x10, false), -EAGAIN);
        CHECK(w.r.held_back);
        CHECK(relay_eos_busy(&w.r));                   /* what was open, being committed */
        CHECK(!w.r.eos.probe_open);
        w.r.held_back = false;
        CHECK_INT(end_eos(&w), 0);
        CHECK_INT(w.r.eos.stats_committed, 2);
        CHECK_INT(relay_eos_before_record(&w.r, DEAD, "probe-3", 7, 0x10, false), 0);
        CHECK(w.r.eos.probe_open);
        CHECK(w.r.eos.open);
        world_close(&w);
}

/*
 * librdkafka failed the open transaction (AddPartitionsToTxn refused) and no
 * report has been served yet when a commit begins: its checkpoint record is
 * refused with _STATE. The commit turns into the abort, once the reports are
 * in, and the relay streams again (exit 1 if it came to that). It once ended
 * the step with -EIO and no failure recorded: the loop stopped as if asked to.
 */
static void test_eos_checkpoint_refused_by_a_failed_transaction_aborts(void)
{
        struct world w;

        open_eos_txn(&w, "--on-error=stop", 0x10);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_ADD_PARTITIONS_TO_TXN, 1,
                                          RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
        CHECK_INT(produce_eos_row(&w, "first-5"), 0);
        relay_eos_row_done(&w.r);
        CHECK(ledger_commit(w.r.ledger, 0x10) == 0);
        CHECK_INT(relay_eos_after_transaction(&w.r, 0x10), 0);
        /*
         * librdkafka fails it on its own thread and purges the row's record:
         * its report is waiting (the producer's descriptor is readable), and
         * none is served here, so the relay does not know yet.
         */
        CHECK(poll(&(struct pollfd){.fd = producer_fd(w.r.prod), .events = POLLIN}, 1, 10000) == 1);
        CHECK_INT(flush_eos(&w), -EIO);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK_INT(w.r.eos.stats_committed, 0);
        CHECK_INT(w.r.eos.stats_aborted, 1);
        CHECK(w.r.watch.ckpt_acked == 0);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0);
        world_close(&w);
}

/* One record of @topic into the open Kafka transaction, as publish_row() hands it over. */
static void produce_eos_record(struct world *w, const char *topic, const char *work_id)
{
        struct producer_error e;
        ledger_ticket t;

        CHECK(ledger_add_message(w->r.ledger, &t) == 0);
        CHECK_INT(relay_produce(&w->r, &(struct producer_msg){.topic = topic, .key = work_id,
                                .key_len = strlen(work_id), .value = "{}", .value_len = 2, .ticket = t},
                                &e), 0);
        relay_eos_produced(&w->r, 2);
}

/*
 * A probing session: a row's probe opens a transaction, its produce is
 * refused at once as the record's own fault (nothing went in), and its
 * dead-letter copy, of a topic not probed either, takes that empty
 * transaction as its own probe. It once split it instead: an empty commit,
 * the row's topic counted as probed though no record of it reached Kafka,
 * the copy held back, and the row offered again, the same way, for ever.
 */
static void test_eos_probe_refused_at_once_leaves_its_transaction_to_the_dead_letter_copy(void)
{
        struct world w;

        open_eos_txn(&w, "--on-error=dead-letter", 0x10);
        w.r.eos.probing = true;
        CHECK_INT(relay_eos_before_record(&w.r, TOPIC, "big-6", 5, 0x10, false), 0);
        CHECK(w.r.eos.probe_open);
        CHECK(w.r.eos.open);
        /* refused by the producer at once: the row goes to its dead-letter copy */
        CHECK_INT(relay_eos_before_record(&w.r, DEAD, "big-6", 5, 0x10, true), 0);
        CHECK(!relay_eos_busy(&w.r));
        CHECK(!w.r.held_back);
        CHECK_STR(w.r.eos.probe_topic, DEAD);
        CHECK(w.r.eos.probe_dead_letter);
        produce_eos_record(&w, DEAD, "big-6");
        relay_eos_row_done(&w.r);
        CHECK_INT(relay_eos_after_record(&w.r), 0);
        CHECK_INT(end_eos(&w), 0);
        CHECK_INT(w.r.eos.stats_committed, 1);
        CHECK_INT(w.r.eos.nknown, 1);                  /* the copy's topic, not the row's */
        CHECK_STR(w.r.eos.known[0], DEAD);
        world_close(&w);
}

/*
 * A dead-letter copy refused with _STATE because librdkafka had failed the
 * open transaction: aborted and streamed again (exit 1 if it came to that),
 * as a row's record is. It once stopped the relay with exit 3, "the
 * dead-letter publish ... failed too", since _STATE is no error a retry cures.
 */
/*
 * An abort from the top of the loop (end_session(), recover()): one call of
 * abort_transaction() at a time, -EAGAIN while the coordinator is slow to
 * answer, the loop's own wait between calls (relay_eos.c never waits);
 * then the transaction is gone, counted, and nothing may be checkpointed
 * past it in this session.
 */
static void test_eos_abort_from_the_top_takes_turns_with_the_wait(void)
{
        struct world w;
        int again = 0, ret;

        open_eos_txn(&w, "--on-error=stop", 0x10);
        CHECK_INT(produce_eos_row(&w, "abort-1"), 0);
        for (int i = 0; i < 500 && w.r.eos.pending > 0; i++)
                relay_wait(&w.r, 10, 0);
        CHECK_INT(w.r.eos.pending, 0);
        rd_kafka_mock_broker_set_rtt(w.mc, 1, 700);    /* longer than one call's 200 ms */
        while ((ret = relay_eos_abort(&w.r)) == -EAGAIN && again < 100) {
                CHECK(w.r.eos.aborting);
                again++;
                relay_wait(&w.r, 0, 0);
        }
        CHECK_INT(ret, 0);
        CHECK(again >= 1);
        CHECK(!w.r.eos.aborting);
        CHECK(!w.r.eos.open);
        CHECK(w.r.eos.aborted);
        CHECK_INT(w.r.eos.stats_aborted, 1);
        CHECK_INT(w.r.failure, 0);
        world_close(&w);
}

/*
 * The session ended (the walsender terminated) while the open Kafka
 * transaction held a record the coordinator never took in (its topic
 * deleted: AddPartitionsToTxn never sent), no delivery report yet. The
 * abort's EndTxn met INVALID_TXN_STATE, which librdkafka makes fatal. A
 * new producer settles that (init_transactions()); the relay streams again
 * rather than stop (exit 3) naming an error that no operator can act on.
 * CI found it (stop 31): the next session's own checks name the real cause.
 */
static void test_eos_abort_meeting_invalid_txn_state_takes_a_new_producer(void)
{
        struct world w;
        int ret, again = 0;

        open_eos_txn(&w, "--on-error=stop", 0x10);
        CHECK_INT(produce_eos_row(&w, "abort-state-1"), 0);
        for (int i = 0; i < 500 && w.r.eos.pending > 0; i++)
                relay_wait(&w.r, 10, 0);
        CHECK_INT(w.r.eos.pending, 0);
        CHECK(!w.r.eos.refused);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_END_TXN, 1, RD_KAFKA_RESP_ERR_INVALID_TXN_STATE);
        while ((ret = relay_eos_abort(&w.r)) == -EAGAIN && again++ < 400)
                relay_wait(&w.r, 10, 0);
        CHECK_INT(ret, -EIO);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        /* librdkafka raises the same error as a fatal event too (whenever): taken alike. */
        {
                struct producer_error e = {.code = PRODUCER_ERR_INVALID_TXN_STATE,
                                           .fault = PRODUCER_FAULT_FATAL};

                snprintf(e.name, sizeof(e.name), "INVALID_TXN_STATE");
                snprintf(e.text, sizeof(e.text), "Failed to end transaction");
                relay_on_kafka_event(&w.r, PRODUCER_EVENT_FATAL, &e);
        }
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK(w.r.producer_broken);
        CHECK(!w.r.eos.open);
        world_close(&w);
}

static void test_eos_dead_letter_copy_refused_by_a_failed_transaction_aborts(void)
{
        struct world w;
        struct producer_msg m = {.topic = TOPIC, .key = "dl-7", .key_len = 4, .value = "{}", .value_len = 2};
        int ret = 0;

        open_eos_txn(&w, "--on-error=dead-letter", 0x10);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_ADD_PARTITIONS_TO_TXN, 1,
                                          RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
        CHECK_INT(produce_eos_row(&w, "first-7"), 0);
        /* librdkafka fails the transaction on its own thread; no report is served here */
        for (int i = 0; i < 50 && ret == 0; i++) {
                usleep(100 * 1000);
                CHECK(ledger_add_message(w.r.ledger, &m.ticket) == 0);
                CHECK_INT(relay_eos_before_record(&w.r, DEAD, "dl-7", 4, 0x10, true), 0);
                ret = relay_dead_letter(&w.r, &m, TOPIC, "INVALID_JSON", "not JSON", "dl-7", "0/10");
                if (ret == 0)
                        relay_eos_produced(&w.r, 2);
                else
                        ledger_cancel_message(w.r.ledger, m.ticket);
        }
        CHECK_INT(ret, -ECANCELED);
        CHECK_INT(w.r.failure, 0);                     /* not yet: the loop aborts it */
        CHECK(relay_eos_busy(&w.r));
        CHECK_INT(end_eos(&w), -EIO);
        CHECK_INT(w.r.failure, RELAY_EXIT_RETRY);
        CHECK_INT(w.r.eos.stats_aborted, 1);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0);
        world_close(&w);
}

/* Make the world's producer anew with room for @n messages (queue.buffering.max.messages). */
static void requeue(struct world *w, int n)
{
        char err[512];

        w->r.prod = producer_free(w->r.prod);
        w->r.prod_opts.queue_messages = n;
        CHECK(producer_new(&w->r.prod_opts, relay_on_delivery, relay_on_kafka_event, &w->r, &w->r.prod, err,
                           sizeof(err)) == 0);
}

/*
 * librdkafka's queue full: relay_produce() does not wait (no turn of the
 * loop waits in relay_wait()). The record is held back, nothing sent, and
 * the stream is not read (backpressure) until the next wait has served
 * delivery reports; then the same record goes.
 */
static void test_full_queue_holds_the_record_back(void)
{
        struct world w;
        struct producer_error e;
        struct producer_msg m = {.topic = TOPIC, .key = "b", .key_len = 1, .value = "v", .value_len = 1};
        int ret = -EAGAIN;

        world_open(&w, "--on-error=stop", "5000");
        requeue(&w, 1);
        rd_kafka_mock_broker_set_rtt(w.mc, 1, 300);
        produce_row(&w, TOPIC, "queued-1", 10, 0x10);
        CHECK(ledger_begin(w.r.ledger, 0x20, 0) == 0);
        CHECK(ledger_add_message(w.r.ledger, &m.ticket) == 0);
        CHECK_INT(relay_produce(&w.r, &m, &e), -EAGAIN);
        CHECK(w.r.held_back);
        CHECK(w.r.kafka_full);
        CHECK(relay_backpressured(&w.r));
        CHECK_INT(w.r.stats.c.queue_full, 1);          /* outbox_relay_kafka_queue_full_total */
        CHECK_INT(w.r.stats.c.acked, 0);
        w.r.held_back = false;
        for (int i = 0; i < 300 && ret == -EAGAIN; i++) {
                relay_wait(&w.r, 10, 0);
                CHECK(!w.r.kafka_full);               /* served: tried again */
                w.r.held_back = false;
                ret = relay_produce(&w.r, &m, &e);
        }
        CHECK_INT(ret, 0);
        CHECK(ledger_commit(w.r.ledger, 0x20) == 0);
        settle(&w);
        CHECK_INT(w.r.failure, 0);
        CHECK_INT(w.r.stats.c.acked, 2);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0x20);
        world_close(&w);
}

/*
 * A failed report whose dead-letter copy meets a full queue: the report is
 * kept for the next turn (nothing waits), logged and counted once, and the
 * copy goes once when there is room. The held-back flag is the stream's:
 * a report leaves it clear.
 */
static void test_dead_letter_copy_held_back_by_a_full_queue_goes_once(void)
{
        struct world w;

        world_open(&w, "--on-error=dead-letter", "5000");
        requeue(&w, 1);
        rd_kafka_mock_push_request_errors(w.mc, KAFKA_API_PRODUCE, 1, RD_KAFKA_RESP_ERR_INVALID_TIMESTAMP);
        produce_row(&w, TOPIC, "old-2", 100, 0x10);
        for (int i = 0; i < 500 && w.r.nacks.n == 0; i++)
                relay_wait(&w.r, 10, 0);
        CHECK_INT(w.r.nacks.n, 1);
        /* the queue full again: a row in flight, slowly */
        rd_kafka_mock_broker_set_rtt(w.mc, 1, 400);
        produce_row(&w, TOPIC, "slow-1", 10, 0x20);
        relay_handle_nacks(&w.r);
        CHECK_INT(w.r.failure, 0);
        CHECK_INT(w.r.nacks.n, 1);                     /* kept for the next turn */
        CHECK(!w.r.held_back);
        CHECK_INT(w.r.stats.c.row_errors, 1);
        CHECK_INT(w.r.stats.c.dead_lettered, 0);
        /* Served, the queue may have room: still no row before the kept copy (it would fill it again). */
        relay_wait(&w.r, 0, 0);
        CHECK(!w.r.kafka_full);
        CHECK(relay_backpressured(&w.r));
        settle(&w);
        CHECK_INT(w.r.failure, 0);
        CHECK_INT(w.r.nacks.n, 0);
        CHECK_INT(w.r.stats.c.row_errors, 1);          /* counted once */
        CHECK_INT(w.r.stats.c.dead_lettered, 1);
        CHECK_INT(metrics_labels_get(w.r.stats.topics, DEAD), 1);
        CHECK_INT(ledger_outstanding(w.r.ledger), 0);
        CHECK_INT(ledger_flush_lsn(w.r.ledger), 0x20);
        world_close(&w);
}

/*
 * While streaming, a topic's limit is asked for without waiting: the
 * record is held back and nothing more is offered (backpressure) until the
 * answer, or none by its deadline (the mock cluster does not answer
 * DescribeConfigs); then the record goes, and the topic is not asked
 * again. One question at a time; one asked in a session that ended is
 * dropped unread, for the next session to ask.
 */
static void test_limit_read_while_streaming_holds_the_record_back(void)
{
        struct world w;

        world_open(&w, "--on-error=stop", "5000");
        w.r.streaming = true;   /* no replication connection: relay_wait() is not called here */
        CHECK_INT(relay_fit_topic(&w.r, "fresh"), -EINPROGRESS);
        CHECK(w.r.held_back);
        CHECK(relay_limit_asking(&w.r));
        CHECK(relay_backpressured(&w.r));
        w.r.held_back = false;
        CHECK_INT(relay_fit_topic(&w.r, "other"), -EINPROGRESS);
        CHECK_STR(w.r.limits.asking, "fresh");
        for (int i = 0; i < 400 && relay_limit_asking(&w.r); i++) {
                usleep(10000);
                producer_poll(w.r.prod);
                relay_limit_serve(&w.r);
        }
        CHECK(!relay_limit_asking(&w.r));
        CHECK(limit_of(&w, "fresh") && limit_of(&w, "fresh")->read);
        CHECK(!relay_backpressured(&w.r));
        w.r.held_back = false;
        CHECK_INT(relay_fit_topic(&w.r, "fresh"), 0);
        CHECK(!w.r.held_back);
        CHECK_INT(relay_fit_topic(&w.r, "other"), -EINPROGRESS);
        CHECK_STR(w.r.limits.asking, "other");
        /* its answer (the mock's timeout) in, but the session ends first */
        for (int i = 0; i < 400 && !producer_topic_max_bytes_answered(w.r.prod); i++) {
                usleep(10000);
                producer_poll(w.r.prod);
        }
        CHECK(producer_topic_max_bytes_answered(w.r.prod));
        w.r.streaming = false;
        relay_limit_serve(&w.r);
        CHECK(!relay_limit_asking(&w.r));
        CHECK(!limit_of(&w, "other")->read);
        CHECK_INT(w.r.failure, 0);
        world_close(&w);
}

/* A producer that produces nothing: no reports, and its events are not the test's. */
static void ignore_report(void *ctx, const struct producer_report *rep)
{
        (void)ctx;
        (void)rep;
}

static void ignore_event(void *ctx, enum producer_event ev, const struct producer_error *e)
{
        (void)ctx;
        (void)ev;
        (void)e;
}

/*
 * librdkafka 2.5 and later push client metrics (KIP-714) unless told not to,
 * and rd_kafka_destroy() then could wait a whole second: the relay turns it
 * off, and a user's -X turns it back on.
 */
static void test_client_metrics_push_off(void)
{
        const char *props[] = {"enable.metrics.push", "true"};
        struct producer_options o = {.brokers = "127.0.0.1:1"};
        struct producer *p = NULL;
        char err[512], v[16];

        if (!producer_metrics_push_property()) {
                printf("librdkafka %s pushes no client metrics\n", producer_library_version());
                CHECK(rd_kafka_version() < 0x020500ff);
                return;
        }
        CHECK(rd_kafka_version() >= 0x020500ff);
        CHECK_INT(producer_new(&o, ignore_report, ignore_event, NULL, &p, err, sizeof(err)), 0);
        if (p)
                CHECK_STR(producer_property(p, "enable.metrics.push", v, sizeof(v)), "false");
        p = producer_free(p);
        o.props = props;
        o.nprops = 1;
        CHECK_INT(producer_new(&o, ignore_report, ignore_event, NULL, &p, err, sizeof(err)), 0);
        if (p)
                CHECK_STR(producer_property(p, "enable.metrics.push", v, sizeof(v)), "true");
        producer_free(p);
}

/*
 * A topic new to a librdkafka producer has its metadata asked for at once:
 * a record produced by topic name alone waits for librdkafka's next refresh
 * of unknown topics, up to a second in librdkafka 2.8, and every new
 * producer meets it (every session of --exactly-once). Three new topics in
 * turn, each record settled before the next: without the prompt request
 * each but the first waits about a second.
 */
static void test_new_topic_is_asked_for_at_once(void)
{
        static const char *const topics[] = {"fresh-1", "fresh-2", "fresh-3"};
        struct world w;
        int64_t start, took;
        char id[16];

        world_open(&w, "--on-error=stop", "5000");
        for (size_t i = 0; i < 3; i++)
                rd_kafka_mock_topic_create(w.mc, topics[i], 1, 1);
        produce_row(&w, TOPIC, "warm-1", 100, 0x10);  /* the broker connection up */
        settle(&w);
        CHECK_INT(w.r.stats.c.acked, 1);
        start = relay_mono_ms();
        for (size_t i = 0; i < 3; i++) {
                snprintf(id, sizeof(id), "fresh-%zu", i + 1);
                produce_row(&w, topics[i], id, 100, 0x20 + 0x10 * i);
                settle(&w);
        }
        took = relay_mono_ms() - start;
        printf("librdkafka %s: a record to each of 3 new topics in turn took %" PRId64 " ms\n",
               producer_library_version(), took);
        CHECK_INT(w.r.failure, 0);
        CHECK_INT(w.r.stats.c.acked, 4);
        CHECK(took < 1500);
        world_close(&w);
}

/*
 * The row path's hooks: at-least-once lets every row go whatever the
 * exactly-once state says; exactly-once passes over what its checkpoint
 * counts (a transaction, a split transaction's rows) and holds a record
 * back while a commit is in flight.
 */
static void test_guarantee_hooks(void)
{
        struct world w;
        char code[64], reason[256];

        world_open(&w, "--on-error=stop", "5000");
        CHECK_STR(w.r.guarantee->name, "at-least-once");
        w.r.eos.skip_upto = 0x100;     /* would pass over everything up to 0/100 */
        w.r.eos.resume_end = 0x40;
        w.r.eos.resume_rows = 2;
        CHECK(!w.r.guarantee->txn_begins(&w.r, 0x40));
        CHECK(!w.r.guarantee->row_in_kafka(&w.r));
        CHECK(!w.r.guarantee->row_refused_before(&w.r, 0x40, "a", 1, code, sizeof(code), reason,
                                                 sizeof(reason)));
        CHECK_INT(w.r.guarantee->before_record(&w.r, TOPIC, "a", 1, 0x40, false), 0);
        CHECK_INT(w.r.guarantee->record_sent(&w.r, 10), 0);
        CHECK_INT(w.r.guarantee->txn_ends(&w.r, 0x40), 0);
        CHECK(!w.r.held_back);
        world_close(&w);

        open_eos_txn(&w, "--on-error=stop", 0x10);
        CHECK_STR(w.r.guarantee->name, "exactly-once");
        CHECK_INT(produce_eos_row(&w, "hook-1"), 0);
        relay_eos_row_done(&w.r);
        CHECK(ledger_commit(w.r.ledger, 0x10) == 0);
        CHECK_INT(w.r.guarantee->txn_ends(&w.r, 0x10), 0);
        CHECK_INT(relay_eos_flush(&w.r), 0);
        CHECK(relay_eos_busy(&w.r));                   /* a commit in flight */
        CHECK_INT(w.r.guarantee->before_record(&w.r, TOPIC, "hook-2", 6, 0x40, false), -EAGAIN);
        CHECK(w.r.held_back);
        w.r.held_back = false;
        CHECK_INT(end_eos(&w), 0);
        CHECK_INT(w.r.eos.stats_committed, 1);
        w.r.eos.skip_upto = 0x30;
        w.r.eos.resume_end = 0x40;
        w.r.eos.resume_rows = 1;
        CHECK(w.r.guarantee->txn_begins(&w.r, 0x30));  /* in Kafka already */
        CHECK(!w.r.guarantee->txn_begins(&w.r, 0x40)); /* in part: its first row is */
        CHECK(w.r.guarantee->row_in_kafka(&w.r));
        CHECK(!w.r.guarantee->row_in_kafka(&w.r));
        world_close(&w);
}

#ifndef NDEBUG
/* Nothing that handles what came waits in the one wait: relay_wait() there is a bug, and aborts. */
static void test_wait_inside_a_turn_aborts(void)
{
        struct world w;
        int status = 0;
        pid_t pid;

        world_open(&w, "--on-error=stop", "5000");
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
                signal(SIGABRT, SIG_DFL);
                CHECK_INT(dup2(open("/dev/null", O_WRONLY), 2), 2);
                w.r.handling = true;
                relay_wait(&w.r, 0, 0);
                _exit(0);
        }
        CHECK(waitpid(pid, &status, 0) == pid);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
        relay_wait(&w.r, 0, 0);  /* at the top: fine */
        world_close(&w);
}
#endif

/*
 * One row of a PostgreSQL transaction ending at LSN 0/10 in the open Kafka
 * transaction, whose commit a stop has begun (relay_eos_flush()) while the
 * side connection's round has verified only up to 0/8.
 */
static void begin_unverified_commit(struct world *w, const char *work_id)
{
        open_eos_txn(w, "--on-error=stop", 0x10);
        w->r.round.verified = 0x08;
        CHECK_INT(produce_eos_row(w, work_id), 0);
        relay_eos_row_done(&w->r);
        CHECK(ledger_commit(w->r.ledger, 0x10) == 0);
        CHECK_INT(relay_eos_after_transaction(&w->r, 0x10), 0);
        CHECK_INT(relay_eos_flush(&w->r), 0);
}

/*
 * No EndTxn before the side connection's round has verified what the
 * checkpoint claims (relay_eos.c, wait_verified()): a checkpoint past a
 * commit whose catalog change no round has seen would make a restart skip
 * that transaction. The commit waits, asking for rounds at once, and ends
 * once the verified LSN reaches its checkpoint.
 */
static void test_eos_commit_waits_for_the_round(void)
{
        struct world w;

        begin_unverified_commit(&w, "unverified-1");
        /* until the delivery reports are in (a loaded machine may take long), then a few turns more */
        for (int i = 0, after = 0; i < 3000 && after < 5; i++) {
                after += w.r.eos.pending == 0;
                w.r.streaming = true;   /* rounds could come: the commit waits (no relay_wait() meanwhile) */
                CHECK_INT(relay_eos_step(&w.r), 0);
                w.r.streaming = false;
                relay_wait(&w.r, 10, 0);
        }
        CHECK(relay_eos_busy(&w.r));                   /* the delivery reports are in, not the round */
        CHECK(w.r.eos.pending == 0);
        CHECK_INT(w.r.eos.stats_committed, 0);
        CHECK(w.r.watch.ckpt_acked == 0);
        CHECK(w.r.round.hurry_lsn == 0x10);
        w.r.round.verified = 0x10;
        CHECK_INT(end_eos(&w), 0);
        CHECK_INT(w.r.eos.stats_committed, 1);
        CHECK(w.r.watch.ckpt_acked == 0x10);
        CHECK(!w.r.failure);
        world_close(&w);
}

/*
 * The round a commit must wait for is asked for when the commit begins, so
 * that it runs beside the delivery reports: asked for only once they were
 * in, it added a round trip to every exactly-once commit.
 */
static void test_eos_commit_asks_for_the_round_beside_the_reports(void)
{
        struct world w;

        begin_unverified_commit(&w, "beside-1");
        CHECK(relay_eos_busy(&w.r));
        CHECK(w.r.eos.end_produced_ms != 0);    /* the checkpoint record is in */
        CHECK(w.r.eos.pending > 0);             /* and the delivery reports are not */
        CHECK(w.r.round.hurry_lsn == 0x10);     /* a round is due at once, without the gap */
        CHECK(w.r.round.hurry_gap_ms == 0);
        w.r.round.verified = 0x10;
        CHECK_INT(end_eos(&w), 0);
        CHECK_INT(w.r.eos.stats_committed, 1);
        CHECK(!w.r.failure);
        world_close(&w);
}

/*
 * A round asked for by a waiting commit wakes the wait (relay_round_due_ms()),
 * but not after a failure other than a row's, when relay_round_serve() sends
 * none: the wait would return at once, again and again, through the drain.
 */
static void test_round_due_not_after_a_failure(void)
{
        struct world w;

        world_open(&w, "--on-error=stop", "5000");
        w.r.round.verified = 0x10;
        w.r.round.hurry_lsn = 0x20;
        w.r.fb.server_lsn = 0x20;
        w.r.streaming = true;   /* no relay_wait() here */
        w.r.failure = RELAY_EXIT_ENVIRONMENT;
        CHECK(relay_round_due_ms(&w.r) == -1);
        w.r.failure = 0;
        w.r.streaming = false;
        CHECK(relay_round_due_ms(&w.r) == -1);
        world_close(&w);
}

int main(void)
{
        test_classification();
        test_client_metrics_push_off();
        test_new_topic_is_asked_for_at_once();
        test_acked();
        test_record_error_stops();
        test_record_error_dead_lettered();
        test_dead_letter_failure_stops();
        test_dead_letter_refused_at_once_names_the_transaction();
        test_refused_batch_is_not_the_rows();
        test_record_too_large_alone();
        test_refused_batch_with_unreadable_limit_stops();
        test_eos_refused_batch_is_not_the_rows();
        test_eos_failed_transaction_purges_records_put_back();
        test_eos_commit_does_not_wait_out_linger(0);
        test_eos_commit_hurries_from_its_checkpoint_record();
        test_eos_commit_at_default_linger_does_not_hurry();
        test_eos_commit_does_not_wait_out_linger(100);
        test_eos_commit_stops_hurrying_after_linger();
        test_eos_record_too_large_alone();
        test_producer_fits_topics();
        test_record_batch_bytes();
        test_cluster_error_discards_the_producer();
        test_eos_transaction_failed_by_librdkafka_refuses_next_record();
        test_eos_transaction_failed_by_librdkafka_at_commit();
        test_eos_state_refusal_without_reports_aborts();
        test_eos_topic_refused_to_the_transaction_is_the_records_error();
        test_eos_checkpoint_short_of_a_split_transaction_keeps_its_part();
        test_eos_commit_in_flight_holds_records_back();
        test_eos_commit_waits_for_the_round();
        test_eos_commit_asks_for_the_round_beside_the_reports();
        test_round_due_not_after_a_failure();
        test_eos_transactions_alternate_between_two_producers();
        test_eos_probe_waits_for_the_commit_of_what_was_open();
        test_eos_checkpoint_refused_by_a_failed_transaction_aborts();
        test_eos_probe_refused_at_once_leaves_its_transaction_to_the_dead_letter_copy();
        test_eos_dead_letter_copy_refused_by_a_failed_transaction_aborts();
        test_eos_abort_from_the_top_takes_turns_with_the_wait();
        test_eos_abort_meeting_invalid_txn_state_takes_a_new_producer();
        test_full_queue_holds_the_record_back();
        test_dead_letter_copy_held_back_by_a_full_queue_goes_once();
        test_limit_read_while_streaming_holds_the_record_back();
        test_guarantee_hooks();
#ifndef NDEBUG
        test_wait_inside_a_turn_aborts();
#endif
        return check_summary();
}
