// SPDX-License-Identifier: Apache-2.0
/*
 * The checkpoint record's value (checkpoint_format(), checkpoint_parse())
 * and the verdict on a checkpoint topic (checkpoint_topic_judge()): what a
 * topic must be for its records to be trusted, and what only makes it less
 * durable. The topics of the integration tests live on one broker, so the
 * replication cases are here.
 */
#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "unit_check.h"
#include "checkpoint.h"
#include "monoclock.h"

#define KAFKA_API_LIST_OFFSETS 2  /* Kafka protocol ApiKey of ListOffsetsRequest */

#define KAFKA_UNKNOWN_TOPIC_OR_PART 3
#define KAFKA_TOPIC_AUTHORIZATION_FAILED 29

static struct checkpoint_topic topic(int partitions, int replicas, int brokers, const char *policy,
                                     int min_isr)
{
        struct checkpoint_topic t = {.partitions = partitions, .replicas = replicas, .brokers = brokers};

        snprintf(t.config.cleanup_policy, sizeof(t.config.cleanup_policy), "%s", policy);
        t.config.min_insync_replicas = min_isr;
        return t;
}

static enum checkpoint_topic_verdict judge(struct checkpoint_topic t, const char *words)
{
        char why[2048] = "";
        enum checkpoint_topic_verdict v = checkpoint_topic_judge("cp", &t, why, sizeof(why));

        if (words && !strstr(why, words)) {
                fprintf(stderr, "\"%s\" not in: %s\n", words, why);
                CHECK(0);
        }
        return v;
}

static void test_trusted(void)
{
        CHECK_INT(judge(topic(1, 1, 1, "compact", 1), NULL), CHECKPOINT_TOPIC_OK);
        CHECK_INT(judge(topic(1, 3, 5, "compact", 2), NULL), CHECKPOINT_TOPIC_OK);
        CHECK_INT(judge(topic(1, 2, 2, "compact", 2), NULL), CHECKPOINT_TOPIC_OK);
}

static void test_untrusted(void)
{
        CHECK_INT(judge(topic(3, 1, 1, "compact", 1), "has 3 partitions"), CHECKPOINT_TOPIC_UNTRUSTED);
        CHECK_INT(judge(topic(1, 1, 1, "compact,delete", 1), "cleanup.policy=compact,delete"),
                  CHECKPOINT_TOPIC_UNTRUSTED);
        CHECK_INT(judge(topic(1, 1, 1, "delete", 1), "--add-config cleanup.policy=compact"),
                  CHECKPOINT_TOPIC_UNTRUSTED);
        CHECK_INT(judge(topic(0, 0, 1, "", -1), "does not exist"), CHECKPOINT_TOPIC_UNTRUSTED);
        {
                struct checkpoint_topic gone = topic(1, 1, 1, "", -1);

                gone.config.error = KAFKA_UNKNOWN_TOPIC_OR_PART;
                CHECK_INT(judge(gone, "does not exist"), CHECKPOINT_TOPIC_UNTRUSTED);
        }
}

static void test_weak(void)
{
        struct checkpoint_topic unreadable = topic(1, 3, 3, "", -1);

        /* one replica on a cluster of three: a broker lost takes the newest checkpoint with it */
        CHECK_INT(judge(topic(1, 1, 3, "compact", 1), "1 replica in a cluster of 3"), CHECKPOINT_TOPIC_WEAK);
        /* acknowledged by one broker only */
        CHECK_INT(judge(topic(1, 3, 3, "compact", 1), "min.insync.replicas=2"), CHECKPOINT_TOPIC_WEAK);
        /* no DESCRIBE_CONFIGS: not verified, said so */
        unreadable.config.error = KAFKA_TOPIC_AUTHORIZATION_FAILED;
        snprintf(unreadable.config.error_text, sizeof(unreadable.config.error_text), "not authorized");
        CHECK_INT(judge(unreadable, "DESCRIBE_CONFIGS"), CHECKPOINT_TOPIC_WEAK);
}

static void test_create_command(void)
{
        char buf[512];

        CHECK(strstr(checkpoint_topic_create_command("cp", 5, buf, sizeof(buf)),
                     "--partitions 1 --replication-factor 3 --config cleanup.policy=compact --config "
                     "min.insync.replicas=2") != NULL);
        CHECK(strstr(checkpoint_topic_create_command("cp", 1, buf, sizeof(buf)),
                     "--replication-factor 1 --config cleanup.policy=compact --config "
                     "min.insync.replicas=1") != NULL);
}

static void test_value_round_trip(void)
{
        struct checkpoint c = {.lsn = 0x1551468, .txn_end_lsn = 0x1551500, .txn_rows = 12345678901ULL,
                               .timeline = 7};
        struct checkpoint back;
        char buf[CHECKPOINT_VALUE_MAX];
        int n;

        snprintf(c.digest, sizeof(c.digest), "22f6af3bea88259f");
        snprintf(c.mode, sizeof(c.mode), "exactly-once");
        n = checkpoint_format(&c, buf, sizeof(buf));
        CHECK(n > 0);
        CHECK_INT(checkpoint_parse(buf, (size_t)n, &back), 0);
        CHECK_INT(back.lsn, c.lsn);
        CHECK_INT(back.txn_end_lsn, c.txn_end_lsn);
        CHECK_INT(back.txn_rows, c.txn_rows);
        CHECK_INT(back.timeline, 7);
        CHECK_STR(back.mode, "exactly-once");
        CHECK_STR(back.publication, "");
        CHECK(strstr(buf, "publication") == NULL);   /* wal2json: not written at all */
        snprintf(c.publication, sizeof(c.publication), "oid=16412 xmin=790 rels=16413,16420");
        n = checkpoint_format(&c, buf, sizeof(buf));
        CHECK(n > 0);
        CHECK_INT(checkpoint_parse(buf, (size_t)n, &back), 0);
        CHECK_STR(back.publication, "oid=16412 xmin=790 rels=16413,16420");
        CHECK_INT(checkpoint_parse("{\"version\":1}", 13, &back), -EBADMSG);
        /* A writer before the timeline and the publication were recorded: 0 and "", unknown. */
        CHECK_INT(checkpoint_parse("{\"lsn\":\"0/10\"}", 14, &back), 0);
        CHECK_INT(back.timeline, 0);
        CHECK_STR(back.publication, "");
}

/* FNV-1a 64: the published test vectors, and a text hashed in pieces as a whole. */
static void test_digest(void)
{
        char d[17], whole[17];

        checkpoint_digest("", d);
        CHECK_STR(d, "cbf29ce484222325");
        checkpoint_digest("a", d);
        CHECK_STR(d, "af63dc4c8601ec8c");
        checkpoint_digest("16413,16420", whole);
        snprintf(d, sizeof(d), "%016" PRIx64,
                 checkpoint_fnv(checkpoint_fnv(CHECKPOINT_FNV_START, "16413", 5), ",16420", 6));
        CHECK_STR(d, whole);
}

/* A timeline history file as PostgreSQL writes it (timeline.c, writeTimeLineHistory()). */
static void test_timeline_end(void)
{
        static const char history[] = "1\t0/3000158\tno recovery target specified\n"
                                      "\n"
                                      "# a comment 4\t0/9\n"
                                      "2\t0/5A0000A0\tat restore point \"x\"\n";
        uint64_t at = 0;

        CHECK_INT(checkpoint_timeline_end(history, strlen(history), 1, &at), 0);
        CHECK_INT(at, 0x3000158);
        CHECK_INT(checkpoint_timeline_end(history, strlen(history), 2, &at), 0);
        CHECK_INT(at, 0x5A0000A0);
        CHECK_INT(checkpoint_timeline_end(history, strlen(history), 4, &at), -ENOENT);
        CHECK_INT(checkpoint_timeline_end(history, strlen(history), 3, &at), -ENOENT);
        CHECK_INT(checkpoint_timeline_end(NULL, 0, 1, &at), -ENOENT);
        /* no final newline */
        CHECK_INT(checkpoint_timeline_end("1\t0/10\treason", 14, 1, &at), 0);
        CHECK_INT(at, 0x10);
}

/*
 * checkpoint_read() against librdkafka's mock cluster, whose ListOffsets
 * answers the errors pushed: @n of @code, then the truth (an empty topic);
 * @timeout_ms for the read.
 */
static int read_through(int n, rd_kafka_resp_err_t code, int timeout_ms, bool *found, bool *no_topic, char *err,
                        size_t errlen)
{
        rd_kafka_conf_t *kc = rd_kafka_conf_new();
        char kerr[256];
        rd_kafka_t *rk;
        rd_kafka_mock_cluster_t *mc;
        struct checkpoint c;
        struct checkpoint_source src = {.topic = "cp"};
        int ret;

        rd_kafka_conf_set(kc, "log_level", "0", kerr, sizeof(kerr));
        rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, kerr, sizeof(kerr));
        CHECK(rk != NULL);
        mc = rd_kafka_mock_cluster_new(rk, 1);
        rd_kafka_mock_topic_create(mc, "cp", 1, 1);
        src.brokers = rd_kafka_mock_cluster_bootstraps(mc);
        for (int i = 0; i < n; i++)
                rd_kafka_mock_push_request_errors(mc, KAFKA_API_LIST_OFFSETS, 1, code);
        ret = checkpoint_read(&src, "k", timeout_ms, &c, found, no_topic, err, errlen);
        rd_kafka_mock_cluster_destroy(mc);
        rd_kafka_destroy(rk);
        return ret;
}

/*
 * A checkpoint topic the relay has just created has no leader known yet:
 * ListOffsets answers NOT_LEADER_OR_FOLLOWER for a moment. That is asked
 * again, not a failed start (CI, stop 42: the relay exited 1 right after
 * creating the topic). A leader that never comes still ends the read by its
 * deadline, with librdkafka's reason.
 */
static void test_read_while_the_leader_moves(void)
{
        bool found = true, no_topic = true;
        char err[512] = "";
        int64_t t0;

        CHECK_INT(read_through(3, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, 10000, &found, &no_topic, err,
                               sizeof(err)), 0);
        CHECK(!found);
        CHECK(!no_topic);
        CHECK_INT(read_through(2, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, 10000, &found, &no_topic, err,
                               sizeof(err)), 0);
        CHECK(!found);
        t0 = monoclock_ms();
        CHECK_INT(read_through(1000, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, 1000, &found, &no_topic, err,
                               sizeof(err)), -EIO);
        CHECK(monoclock_ms() - t0 < 5000);
        CHECK(strstr(err, "leader") != NULL);
}

int main(void)
{
        test_trusted();
        test_untrusted();
        test_weak();
        test_create_command();
        test_value_round_trip();
        test_digest();
        test_timeline_end();
        test_read_while_the_leader_moves();
        return check_summary();
}
