// SPDX-License-Identifier: Apache-2.0
/*
 * What the relay keeps true while it runs, through the checkpoint record
 * (checkpoint.h). The confirmed LSN (relay_confirmable_lsn(),
 * relay_report.c) is the least of the ledger's flush LSN, the newest
 * checkpoint Kafka acknowledged (here), and the LSN the side connection's
 * round last verified (relay_round.c).
 *
 * Before a session streams, the newest checkpoint of the slot is read and
 * compared with the slot. A slot confirmed beyond it was moved by someone
 * else, and a checkpoint written by a relay with another table set, row
 * mapping or publication means two relays would take turns with one slot,
 * or rows were never sent: these stop the relay (exit 3) unless the
 * operator accepts them. While streaming, a checkpoint record chases the
 * verified, acknowledged LSN, at most every STATUS_MIN_GAP_MS, and the
 * checkpoint topic's settings are read again now and then. See
 * relay_parts.h.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "relay_parts.h"

#define CHECKPOINT_READ_MS 30000  /* reading the newest checkpoint, at most */
#define CHECKPOINT_SLOW_MS 3000   /* a read still going after this long says why it waits */
#define TOPIC_MS 15000            /* creating or describing the checkpoint topic */
#define CHECKPOINT_RETRY_MS 5000  /* reading it again while Kafka is away */
#define TOPIC_RECHECK_MS 10000    /* the checkpoint topic's settings again while streaming, this often */

int relay_watch_init(struct relay *r)
{
        struct relay_watch *w = &r->watch;
        const struct relay_config *conf = r->conf;
        char host[128] = "";

        config_mapping(conf, w->mapping, sizeof(w->mapping));
        checkpoint_digest(w->mapping, w->digest);
        gethostname(host, sizeof(host) - 1);
        snprintf(w->writer, sizeof(w->writer), "%s PID %ld, outbox-relay %s", host, (long)getpid(),
                 RELAY_VERSION);
        w->src = (struct checkpoint_source){
                .brokers = conf->brokers,
                .props = r->prod_props,
                .nprops = conf->nprops,
                .topic = conf->checkpoint_topic,
        };
        return 0;
}

int relay_watch_send_checkpoint(struct relay *r, uint64_t lsn)
{
        struct relay_watch *w = &r->watch;
        struct checkpoint c = {.lsn = lsn};
        struct producer_error e;
        struct producer_msg m;
        char value[CHECKPOINT_VALUE_MAX];
        int n, ret;

        n = relay_checkpoint_value(r, &c, w->digest[0] ? "at-least-once" : "slot created", value,
                                   sizeof(value));
        if (n < 0)
                return n;
        m = (struct producer_msg){
                .topic = r->conf->checkpoint_topic,
                .key = w->key,
                .key_len = strlen(w->key),
                .value = value,
                .value_len = (size_t)n,
                .ticket = TICKET_CHECKPOINT | ++w->ckpt_seq,
                .first_partition = true,
        };
        ret = producer_send(r->prod, &m, &e);
        if (ret == -ENOBUFS)
                return ret;
        if (ret < 0) {
                relay_fail(r, e.fault == PRODUCER_FAULT_CLUSTER ? RELAY_EXIT_RETRY : RELAY_EXIT_ENVIRONMENT,
                           "cannot write a checkpoint record to topic \"%s\": %s (%s)%s",
                           r->conf->checkpoint_topic, e.text, e.name, e.fault == PRODUCER_FAULT_CLUSTER ?
                           "" : "; the relay's Kafka principal needs WRITE and READ on it");
                if (e.fault == PRODUCER_FAULT_CLUSTER)
                        r->producer_broken = true;
                return -EIO;
        }
        w->ckpt_inflight = lsn;
        w->ckpt_inflight_seq = w->ckpt_seq;
        w->ckpt_sent_ms = relay_mono_ms();
        return 0;
}

void relay_watch_checkpoint_report(struct relay *r, const struct producer_report *rep)
{
        struct relay_watch *w = &r->watch;
        uint64_t seq = rep->msg.ticket & ~TICKET_CHECKPOINT;

        if (seq != w->ckpt_inflight_seq)
                return;  /* from before a producer restart */
        if (rep->error.code == 0) {
                if (w->ckpt_inflight > w->ckpt_acked)
                        w->ckpt_acked = w->ckpt_inflight;
                w->ckpt_inflight = LSN_INVALID;
                return;
        }
        w->ckpt_inflight = LSN_INVALID;
        if (rep->error.fault == PRODUCER_FAULT_CLUSTER) {
                relay_fail(r, RELAY_EXIT_RETRY, "writing a checkpoint record to topic \"%s\" failed: %s "
                           "(%s); discarding the producer and streaming again from the slot",
                           r->conf->checkpoint_topic, rep->error.text, rep->error.name);
                r->producer_broken = true;
                return;
        }
        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "Kafka refused the checkpoint record for topic \"%s\": %s "
                   "(%s). Without it the relay confirms nothing. %s, then start the relay again",
                   r->conf->checkpoint_topic, rep->error.text, rep->error.name,
                   producer_fix(rep->error.code) ? producer_fix(rep->error.code) :
                   "Let the topic take it (create it compacted, raise its max.message.bytes)");
}

/*
 * Before every session: the checkpoint topic is one whose records the relay
 * can trust (checkpoint_topic_judge()). Returns 0 (*ret_missing when there
 * is none: the caller decides whether it may be created), -EAGAIN when the
 * cluster did not answer (the reason in @err), -EINVAL after recording a
 * failure no retry cures (exit 3).
 */
static int verify_topic(struct relay *r, bool *ret_missing, char *err, size_t errlen)
{
        struct relay_watch *w = &r->watch;
        const char *topic = r->conf->checkpoint_topic;
        char why[1536];

        *ret_missing = false;
        if (checkpoint_topic_describe(r->prod, topic, TOPIC_MS, &w->topic, err, errlen) < 0)
                return -EAGAIN;
        if (w->topic.partitions == 0) {
                *ret_missing = true;
                return 0;
        }
        switch (checkpoint_topic_judge(topic, &w->topic, why, sizeof(why))) {
        case CHECKPOINT_TOPIC_UNTRUSTED:
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "%s. Stopping: the relay cannot tell from it how far "
                           "slot \"%s\" was published", why, r->conf->slot);
                return -EINVAL;
        case CHECKPOINT_TOPIC_WEAK:
                if (!w->topic_warned)
                        log_warning("%s", why);
                w->topic_warned = true;
                break;
        case CHECKPOINT_TOPIC_OK:
                break;
        }
        return 0;
}

/*
 * Create the checkpoint topic, which does not exist, where the relay may
 * start without a checkpoint. Returns 0, -EACCES or -EIO (recorded).
 */
static int create_topic(struct relay *r)
{
        struct relay_watch *w = &r->watch;
        const char *topic = r->conf->checkpoint_topic;
        char err[ERRLEN], command[512];
        int ret;

        checkpoint_topic_create_command(topic, w->topic.brokers, command, sizeof(command));
        ret = checkpoint_topic_create(r->prod, topic, w->topic.brokers, TOPIC_MS, err, sizeof(err));
        if (ret == -EACCES) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "the checkpoint topic \"%s\" does not exist and the "
                           "relay's Kafka principal may not create it (%s): create it (%s) and grant the "
                           "relay READ, WRITE, DESCRIBE and DESCRIBE_CONFIGS on it, or grant it CREATE",
                           topic, err, command);
                return -EACCES;
        }
        if (ret < 0 && ret != -EEXIST) {
                relay_fail(r, RELAY_EXIT_RETRY, "cannot create the checkpoint topic \"%s\": %s", topic, err);
                return -EIO;
        }
        if (ret == 0)
                log_info("created the checkpoint topic \"%s\" (%s)", topic, command);
        return 0;
}

int relay_watch_verify_topic(struct relay *r, char *err, size_t errlen)
{
        bool missing;

        return verify_topic(r, &missing, err, errlen);
}

int relay_watch_ensure_topic(struct relay *r)
{
        char err[ERRLEN];
        bool missing;
        int ret = verify_topic(r, &missing, err, sizeof(err));

        if (ret == -EAGAIN)
                relay_fail(r, RELAY_EXIT_RETRY, "cannot look for the checkpoint topic \"%s\": %s",
                           r->conf->checkpoint_topic, err);
        if (ret < 0)
                return -EIO;
        return missing && create_topic(r) < 0 ? -EIO : 0;
}

/*
 * The newest checkpoint of the slot into @c (*ret_found false if none;
 * *ret_no_topic too when there is no checkpoint topic), from a topic that
 * can be trusted, waiting up to @timeout_ms. Returns 0; -EAGAIN when Kafka
 * could not be asked now (the reason in @err: worth trying again); -EINVAL
 * after recording a failure no retry cures.
 */
static int read_newest(struct relay *r, int timeout_ms, struct checkpoint *c, bool *ret_found,
                       bool *ret_no_topic, char *err, size_t errlen)
{
        struct relay_watch *w = &r->watch;
        int ret;

        if (!w->key[0] && checkpoint_key(r->system_id, r->pre.dbname, r->conf->slot, w->key,
                                         sizeof(w->key)) < 0) {
                relay_fail(r, RELAY_EXIT_USAGE, "the checkpoint key of slot \"%s\" is too long",
                           r->conf->slot);
                return -EINVAL;
        }
        ret = verify_topic(r, ret_no_topic, err, errlen);
        if (ret < 0)
                return ret;
        if (*ret_no_topic) {
                *ret_found = false;
                return 0;
        }
        /*
         * A long read says why it waits while it waits: after CHECKPOINT_SLOW_MS
         * (another producer's transaction open in the topic, a slow broker) a
         * warning names the reason, then the read starts again for the rest.
         */
        ret = checkpoint_read(&w->src, w->key,
                              timeout_ms > CHECKPOINT_SLOW_MS ? CHECKPOINT_SLOW_MS : timeout_ms, c,
                              ret_found, ret_no_topic, err, errlen);
        if (ret == -ETIMEDOUT && timeout_ms > CHECKPOINT_SLOW_MS) {
                log_warning("still reading the newest checkpoint of slot \"%s\" after %d ms, for up to "
                            "%d ms more: %s", r->conf->slot, CHECKPOINT_SLOW_MS,
                            timeout_ms - CHECKPOINT_SLOW_MS, err);
                ret = checkpoint_read(&w->src, w->key, timeout_ms - CHECKPOINT_SLOW_MS, c, ret_found,
                                      ret_no_topic, err, errlen);
        }
        if (ret == -EBADMSG) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "%s: something else writes to the checkpoint topic; "
                           "give the relay a topic of its own with --checkpoint-topic", err);
                return -EINVAL;
        }
        /* Not a moment's trouble: retried, it would be a restart loop that never says why. */
        if (ret == -EACCES) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "cannot read the newest checkpoint of slot \"%s\": "
                           "%s. Kafka refuses the relay's principal: grant it READ and DESCRIBE on "
                           "topic \"%s\" (an ACL; the relay writes its checkpoints there and reads "
                           "the newest one at every start and reconnect)", r->conf->slot, err,
                           r->conf->checkpoint_topic);
                return -EINVAL;
        }
        return ret < 0 ? -EAGAIN : 0;
}

int relay_watch_read_newest(struct relay *r, struct checkpoint *ret_c, bool *ret_found, char *err,
                            size_t errlen)
{
        bool no_topic;

        return read_newest(r, CHECKPOINT_READ_MS, ret_c, ret_found, &no_topic, err, errlen);
}

/* The checkpoint @c, found, comes from a relay with another mapping: stop unless accepted. */
static int mapping_differs(struct relay *r, const struct checkpoint *c)
{
        struct relay_watch *w = &r->watch;
        char a[LSN_STRLEN];

        if (r->conf->accept_config_change)
                return 0;
        relay_fail(r, RELAY_EXIT_ENVIRONMENT,
                   "the newest checkpoint of slot \"%s\" (LSN %s, written by %s at %s) comes from a relay "
                   "with another table set or row mapping: theirs \"%s\", this one \"%s\". Two relays "
                   "configured differently must not share a slot: each would confirm rows only the "
                   "other publishes. Give this configuration its own --slot; if the change is "
                   "deliberate and no relay with the old configuration runs any more, start once with "
                   "--accept-config-change", r->conf->slot, lsn_format(c->lsn, a), c->writer, c->time,
                   c->mapping, w->mapping);
        return -EINVAL;
}

/*
 * pgoutput: the publication as this session found it differs from the one
 * the newest checkpoint @c was written through (its state, "" from a
 * wal2json relay or an earlier writer, is not compared).
 */
static bool publication_changed(const struct relay *r, const struct checkpoint *c)
{
        char now[CHECKPOINT_PUBLICATION_MAX];

        if (!c->publication[0])
                return false;
        relay_publication_state(r, now);
        return now[0] && strcmp(now, c->publication) != 0;
}

/*
 * The publication changed while no relay of the slot streamed (ALTER
 * PUBLICATION ... DROP TABLE then ADD TABLE, SET (publish) and back, a row
 * filter set and removed): pgoutput never sends what it did not publish
 * then. Stop unless accepted.
 */
static int publication_differs(struct relay *r, const struct checkpoint *c)
{
        const char *pub = config_publication(r->conf);
        char now[CHECKPOINT_PUBLICATION_MAX], a[LSN_STRLEN];

        relay_publication_state(r, now);
        lsn_format(c->lsn, a);
        if (r->conf->accept_config_change) {
                log_warning("accepting publication \"%s\" changed since the newest checkpoint of slot \"%s\" "
                            "(LSN %s: \"%s\", now \"%s\"), as requested with --accept-config-change by %s; "
                            "remove the option after this start", pub, r->conf->slot, a, c->publication, now,
                            r->who);
                return 0;
        }
        relay_fail(r, RELAY_EXIT_ENVIRONMENT,
                   "publication \"%s\" changed since the newest checkpoint of slot \"%s\" (LSN %s, written by "
                   "%s at %s): it was \"%s\", it is \"%s\" (oid: the publication itself; xmin: its row, "
                   "changed by ALTER PUBLICATION ... SET, RENAME or OWNER; rels: each table's membership, "
                   "new when a table was removed and added again or its row filter changed). pgoutput does "
                   "not send rows inserted while a table was out of the publication or inserts were not "
                   "published, and never sends them later. Publish the rows committed since LSN %s again "
                   "from the outbox table (outbox-relay redrive --since), then start once with "
                   "--accept-config-change", pub, r->conf->slot, a, c->writer, c->time, c->publication, now,
                   a);
        return -EINVAL;
}

/* How often a warm standby reads the slot's newest checkpoint: from soon, doubling, to at most. */
#define STANDBY_FIRST_CHECK_MS 2000
#define STANDBY_RECHECK_MS 60000

int relay_watch_standby(struct relay *r)
{
        struct checkpoint c;
        bool found, no_topic;
        char err[ERRLEN];
        int ret;

        /*
         * A standby configured differently from the active relay says so while it waits, not at
         * takeover: soon while the slot's checkpoint has no mapping yet (the active relay writes its
         * first one when it first confirms), then now and then, since the active relay may be
         * replaced by one with --accept-config-change meanwhile.
         */
        if (relay_mono_ms() < r->watch.standby_next_ms)
                return 0;
        ret = read_newest(r, CHECKPOINT_READ_MS, &c, &found, &no_topic, err, sizeof(err));
        if (ret == 0 && found && c.digest[0])
                r->watch.standby_gap_ms = STANDBY_RECHECK_MS;
        else if (r->watch.standby_gap_ms < STANDBY_FIRST_CHECK_MS)
                r->watch.standby_gap_ms = STANDBY_FIRST_CHECK_MS;
        else if (r->watch.standby_gap_ms < STANDBY_RECHECK_MS)
                r->watch.standby_gap_ms = 2 * r->watch.standby_gap_ms < STANDBY_RECHECK_MS ?
                                          2 * r->watch.standby_gap_ms : STANDBY_RECHECK_MS;
        r->watch.standby_next_ms = relay_mono_ms() + r->watch.standby_gap_ms;
        if (ret == -EAGAIN)
                return 0;  /* Kafka away: the next look, or the takeover, reads it */
        if (ret < 0)
                return ret;
        if (found && c.digest[0] && strcmp(c.digest, r->watch.digest) != 0)
                return mapping_differs(r, &c);
        return 0;
}

/*
 * The newest checkpoint @c against the server's timeline. An LSN names a
 * WAL position only on its timeline's history: after a failover to a
 * standby that lacked the primary's last WAL, the new timeline branches off
 * at its switch point, and its commits reuse the LSNs past it that the
 * checkpoint already covers. Streaming on would skip them (exactly-once) or
 * take them for published. A checkpoint reaching past the switch point of
 * its timeline, or on a timeline not in the server's history, stops the
 * relay (exit 3) unless --accept-slot-position names the slot's LSN @s:
 * then *@ret holds @c cut back to the switch point (*@ret_accepted).
 * Returns 0, or -EINVAL with the failure recorded.
 */
static int judge_timeline(struct relay *r, const struct checkpoint *c, uint64_t s, struct checkpoint *ret,
                          bool *ret_accepted)
{
        uint32_t tli = r->sys.timeline;
        uint64_t end = LSN_INVALID, covered = c->txn_end_lsn > c->lsn ? c->txn_end_lsn : c->lsn;
        char a[LSN_STRLEN], b[LSN_STRLEN], e[LSN_STRLEN], fix[256];
        int known;

        *ret_accepted = false;
        if (!c->timeline || c->timeline == tli)
                return 0;
        known = c->timeline < tli ? checkpoint_timeline_end(r->tli_history, r->tli_history_len, c->timeline,
                                                            &end) : -ENOENT;
        if (known == 0 && covered <= end)
                return 0;       /* WAL both timelines share */
        lsn_format(s, a);
        lsn_format(covered, b);
        if (known == 0)
                snprintf(fix, sizeof(fix), "Then start once with --accept-slot-position=%s (the slot's "
                         "LSN): the checkpoint then counts up to LSN %s only, where the timelines part",
                         a, lsn_format(end, e));
        else
                snprintf(fix, sizeof(fix), "This checkpoint is not of this server's history: give the "
                         "relay its own --slot");
        if (known < 0 || r->conf->accept_slot_position != s) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT,
                           "the newest checkpoint of slot \"%s\" (written by %s at %s) covers WAL up to LSN "
                           "%s on timeline %u, but the server is on timeline %u%s%s: the server lacks WAL the "
                           "relay published from (a failover to a standby that had not received it, or a "
                           "restore), and its commits from there on reuse LSNs the checkpoint covers, so "
                           "the relay would take them for published. Rows published from the lost WAL are "
                           "in Kafka but not in this database: reconcile them (outbox-relay(7), \"The "
                           "checkpoint record\"). %s",
                           r->conf->slot, c->writer, c->time, b, c->timeline, tli,
                           known == 0 ? ", which branched off it at LSN " : ", whose history does not hold it",
                           known == 0 ? e : "", fix);
                return -EINVAL;
        }
        log_warning("accepting the switch to timeline %u at LSN %s, as requested with "
                    "--accept-slot-position by %s: the checkpoint of timeline %u (up to LSN %s) counts up "
                    "to the switch only, and what this server committed after it is published; remove "
                    "the option after this start", tli, lsn_format(end, e), r->who, c->timeline, b);
        *ret = *c;
        if (ret->lsn > end)
                ret->lsn = end;
        if (ret->txn_end_lsn > end) {
                ret->txn_end_lsn = LSN_INVALID;
                ret->txn_rows = 0;
        }
        *ret_accepted = true;
        return 0;
}

/*
 * Judge the newest checkpoint (@found: @c) against the slot's position @s
 * read before streaming. The resume point of --exactly-once goes to
 * @ret_resume: @c as judged (counted only up to a timeline switch that the
 * operator accepted), or an lsn of LSN_INVALID without one. Returns 0 (the
 * checkpoint chase then writes what is missing), or -EINVAL after
 * recording the failure.
 */
static int judge_checkpoint(struct relay *r, bool found, const struct checkpoint *c, bool no_topic,
                            uint64_t s, struct checkpoint *ret_resume)
{
        struct relay_watch *w = &r->watch;
        char a[LSN_STRLEN], b[LSN_STRLEN];
        struct checkpoint on_timeline;
        bool accepted = false, pub_changed;

        lsn_format(s, a);
        /*
         * An earlier session of this process read or wrote a checkpoint of
         * the slot there: the topic lost it under the running relay. Said
         * as the streaming check says it, whichever notices first (a Kafka
         * transaction whose checkpoint record found no topic ends the
         * session before the check).
         */
        if (!found && r->conf->exactly_once && w->judged_once &&
            (w->ckpt_acked != LSN_INVALID || w->ckpt_floor != LSN_INVALID)) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT,
                           "the checkpoint topic \"%s\" no longer holds the checkpoint of slot \"%s\"%s, "
                           "since the relay started streaming: it was deleted, or deleted and made anew. "
                           "Stopping: nothing after LSN %s is confirmed, and a relay of this slot started "
                           "on that topic cannot tell how far the slot was published. Give the relay a "
                           "topic of one partition with cleanup.policy=compact (outbox-relay(7), \"The "
                           "checkpoint record\"); if rows may be published twice, start once with "
                           "--accept-slot-position=%s", r->conf->checkpoint_topic, r->conf->slot,
                           no_topic ? " (no such topic)" : "", a, a);
                return -EINVAL;
        }
        if (found && judge_timeline(r, c, s, &on_timeline, &accepted) < 0)
                return -EINVAL;
        if (accepted)
                c = &on_timeline;
        pub_changed = found && publication_changed(r, c);
        /* An empty digest: written by `slot create`, which streams nothing; the first relay sets it. */
        if (found && c->digest[0] && strcmp(c->digest, w->digest) != 0) {
                if (mapping_differs(r, c) < 0)
                        return -EINVAL;
                log_warning("accepting a new table set or row mapping for slot \"%s\" as requested with "
                            "--accept-config-change by %s (was \"%s\"); remove the option after this "
                            "start", r->conf->slot, r->who, c->mapping);
        } else if (r->conf->accept_config_change && !w->judged_once && !pub_changed) {
                log_warning("--accept-config-change has no effect: the newest checkpoint of slot \"%s\" "
                            "has this relay's mapping and publication; remove the option", r->conf->slot);
        }
        if (pub_changed && publication_differs(r, c) < 0)
                return -EINVAL;
        if (!found && r->conf->exactly_once && !(r->pre.slot_created && !w->judged_once) &&
            r->conf->accept_slot_position != s) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT,
                           "replication slot \"%s\" is confirmed up to LSN %s but has no checkpoint in "
                           "topic \"%s\"%s: with --exactly-once the newest checkpoint says which "
                           "transactions are in Kafka already, and without it the relay would resume at "
                           "the slot and publish again what was committed after it. The topic was "
                           "deleted or made anew, or the slot was used by a relay of an earlier release. "
                           "If rows may be published twice, start once with --accept-slot-position=%s "
                           "(outbox-relay(7), EXACTLY-ONCE INTO KAFKA)", r->conf->slot, a,
                           r->conf->checkpoint_topic, no_topic ? " (no such topic)" : "", a);
                return -EINVAL;
        }
        if (!found && r->conf->exactly_once && r->conf->accept_slot_position == s && s) {
                log_warning("accepting replication slot \"%s\" at LSN %s without a checkpoint, as "
                            "requested with --accept-slot-position by %s: transactions committed to "
                            "Kafka after that LSN are published again; remove the option after this "
                            "start", r->conf->slot, a, r->who);
        } else if (found && s > c->lsn) {
                /* Not a slot made by this start: relay_checkpoint_new_slot() judged that one. */
                if (r->conf->accept_slot_position != s) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT,
                                   "replication slot \"%s\" is confirmed up to LSN %s, beyond the newest "
                                   "checkpoint of any relay of this slot, LSN %s (written by %s at %s): "
                                   "someone else consumed the slot (pg_logical_slot_get_changes(), "
                                   "pg_replication_slot_advance(), pg_recvlogical, or a relay configured "
                                   "differently), or it was dropped and made anew at a later LSN (by "
                                   "--create-slot, `outbox-relay slot create` or "
                                   "pg_create_logical_replication_slot()), and the outbox rows committed "
                                   "between LSN %s and %s were never published by this relay. Publish them "
                                   "again from the outbox table (outbox-relay(7), \"The checkpoint record\" "
                                   "and \"A lost slot\"), then start once with --accept-slot-position=%s",
                                   r->conf->slot, a, lsn_format(c->lsn, b),
                                   c->writer, c->time, b, a, a);
                        return -EINVAL;
                }
                log_warning("accepting replication slot \"%s\" moved by someone else from LSN %s to %s, as "
                            "requested with --accept-slot-position by %s: rows committed in between are "
                            "not published by this relay; remove the option after this start",
                            r->conf->slot, lsn_format(c->lsn, b), a, r->who);
        } else if (r->conf->accept_slot_position && !w->judged_once && !accepted &&
                   (found || !r->conf->exactly_once)) {
                log_warning("--accept-slot-position=%s has no effect: slot \"%s\" is confirmed up to %s, "
                            "not beyond its checkpoint; remove the option",
                            lsn_format(r->conf->accept_slot_position, b), r->conf->slot, a);
        }
        if (no_topic && create_topic(r) < 0)
                return -EINVAL;
        if (!found && !r->pre.slot_created && !r->conf->exactly_once)
                log_warning("no checkpoint of slot \"%s\" in topic \"%s\"%s: adopting the slot's position, "
                            "LSN %s (the first start of a relay that keeps checkpoints, or the topic was "
                            "deleted); from now on a slot moved by someone else stops the relay",
                            r->conf->slot, r->conf->checkpoint_topic, no_topic ? " (no such topic)" : "", a);
        /*
         * What a relay of this mapping published is known from here on. A
         * checkpoint that must change (none yet, another mapping, an accepted
         * position) is written by the chase before anything is confirmed.
         */
        w->ckpt_acked = found && c->lsn >= s && strcmp(c->digest, w->digest) == 0 ? c->lsn : LSN_INVALID;
        /* A rewritten checkpoint never claims less than the newest one did. */
        w->ckpt_floor = found ? c->lsn : LSN_INVALID;
        w->ckpt_unknown = false;
        w->judged_once = true;
        *ret_resume = found ? *c : (struct checkpoint){.lsn = LSN_INVALID};
        return 0;
}

int relay_watch_before_stream(struct relay *r, const struct preflight_slot *slot, struct checkpoint *ret_newest)
{
        struct relay_watch *w = &r->watch;
        struct checkpoint c;
        char err[ERRLEN];
        bool found, no_topic;
        int ret;

        *ret_newest = (struct checkpoint){.lsn = LSN_INVALID};

        /*
         * What the server holds now is the floor: after a server restart it can
         * be less than what this relay confirmed before, and confirming that
         * again before the first round would look like someone else moving
         * the slot.
         */
        r->fb.sent_flush_lsn = slot->confirmed_flush_lsn;
        w->ckpt_inflight = LSN_INVALID;
        ret = read_newest(r, CHECKPOINT_READ_MS, &c, &found, &no_topic, err, sizeof(err));
        if (ret == -EAGAIN && w->judged_once && !r->conf->exactly_once) {
                /*
                 * Kafka is away, and this process judged the slot before: stream
                 * now (holding the slot, serving the server) and judge before
                 * anything is confirmed, once Kafka answers. Not with
                 * --exactly-once: the checkpoint is its resume point, which
                 * transactions and rows are in Kafka already, and what this
                 * process remembers of it is older than what it committed
                 * since (and than what another relay of the slot committed
                 * while it was away): streaming on it sends them again.
                 */
                log_warning("cannot read the newest checkpoint of slot \"%s\" now (%s): streaming, but "
                            "confirming nothing until it is read", r->conf->slot, err);
                w->ckpt_unknown = true;
                w->ckpt_retries = 0;
                w->ckpt_retry_ms = relay_mono_ms() + CHECKPOINT_RETRY_MS;
                return 0;
        }
        if (ret == -EAGAIN) {
                relay_fail(r, RELAY_EXIT_RETRY, "cannot read the newest checkpoint of slot \"%s\" from "
                           "topic \"%s\": %s", r->conf->slot, r->conf->checkpoint_topic, err);
                return -EIO;
        }
        if (ret < 0)
                return ret;
        return judge_checkpoint(r, found, &c, no_topic, slot->confirmed_flush_lsn, ret_newest);
}

/* While streaming without a judged checkpoint: try again once Kafka answers. */
static void retry_checkpoint(struct relay *r)
{
        struct relay_watch *w = &r->watch;
        struct checkpoint c;
        char err[ERRLEN];
        bool found, no_topic;
        int64_t timeout;
        int ret;

        if (!w->ckpt_unknown || relay_mono_ms() < w->ckpt_retry_ms || producer_brokers_up(r->prod) <= 0)
                return;
        /*
         * The read blocks for a status interval at first (the server hears
         * from the relay before it), twice as long after each read that ran
         * out of time, up to two intervals (below): a read (a new consumer, the
         * topic's settings, its watermarks, the newest records) can need more
         * than one interval on a busy broker, and a cap that never lets it
         * finish would leave the relay confirming nothing for good.
         */
        timeout = (r->fb.interval_ms > 0 ? r->fb.interval_ms : 1000) << w->ckpt_retries;
        /*
         * Never past two status intervals: the interval is under half of
         * wal_sender_timeout, so the walsender outlives the blocked read.
         */
        if (timeout > 2 * r->fb.interval_ms && r->fb.interval_ms > 0)
                timeout = 2 * r->fb.interval_ms;
        if (timeout > CHECKPOINT_READ_MS)
                timeout = CHECKPOINT_READ_MS;
        relay_send_status(r);
        ret = read_newest(r, (int)timeout, &c, &found, &no_topic, err, sizeof(err));
        if (ret == -EAGAIN) {
                if (w->ckpt_retries < 8)
                        w->ckpt_retries++;
                log_debug("cannot read the newest checkpoint of slot \"%s\" within %" PRId64 " ms (%s): "
                          "trying again in %d ms", r->conf->slot, timeout, err, CHECKPOINT_RETRY_MS);
                w->ckpt_retry_ms = relay_mono_ms() + CHECKPOINT_RETRY_MS;
                return;
        }
        w->ckpt_retries = 0;
        /* Never with --exactly-once (relay_watch_before_stream()): no resume point is taken here. */
        assert(!r->conf->exactly_once);
        if (ret == 0 && judge_checkpoint(r, found, &c, no_topic, r->round.slot_start_lsn,
                                      &(struct checkpoint){0}) == 0)
                log_info("read the newest checkpoint of slot \"%s\": confirming again", r->conf->slot);
}

void relay_watch_stream_started(struct relay *r)
{
        r->watch.topic_next_ms = relay_mono_ms() + TOPIC_RECHECK_MS;
}

uint64_t relay_watch_checkpoint_target(const struct relay *r)
{
        const struct relay_watch *w = &r->watch;
        uint64_t target = ledger_flush_lsn(r->ledger);

        if (r->round.verified < target)
                target = r->round.verified;
        if (w->ckpt_inflight || w->ckpt_unknown || target <= w->ckpt_acked ||
            (r->failure && r->failure != RELAY_EXIT_DATA))
                return LSN_INVALID;
        return target < w->ckpt_floor ? w->ckpt_floor : target;
}

void relay_watch_checkpoint_committed(struct relay *r, uint64_t lsn)
{
        if (lsn > r->watch.ckpt_acked)
                r->watch.ckpt_acked = lsn;
}

/*
 * Chase the verified, acknowledged LSN with a checkpoint record. With
 * --exactly-once the top loop does (relay_eos_checkpoint()): a checkpoint
 * is committed in a Kafka transaction, not produced on its own.
 */
static void maybe_checkpoint(struct relay *r)
{
        struct relay_watch *w = &r->watch;
        uint64_t target = relay_watch_checkpoint_target(r);

        if (target == LSN_INVALID || r->conf->exactly_once ||
            (relay_mono_ms() - w->ckpt_sent_ms < STATUS_MIN_GAP_MS && relay_status_due_ms(r) > 0))
                return;
        relay_watch_send_checkpoint(r, target);
}

/*
 * While streaming, now and then: the checkpoint topic is still there and
 * compacted (a topic deleted while the relay runs is made again by the
 * next checkpoint write where the brokers create topics, with their default
 * settings). Asked without waiting; the answer comes through the producer.
 */
static void recheck_topic(struct relay *r)
{
        struct relay_watch *w = &r->watch;
        struct checkpoint_topic t = w->topic;
        char why[1536];

        if (producer_topic_config_answer(r->prod, &t.config) == 0 &&
            (!t.config.error || t.config.error == PRODUCER_ERR_UNKNOWN_TOPIC) &&
            checkpoint_topic_judge(r->conf->checkpoint_topic, &t, why, sizeof(why)) ==
            CHECKPOINT_TOPIC_UNTRUSTED) {
                relay_fail(r, RELAY_EXIT_ENVIRONMENT, "%s, since the relay started streaming. Stopping: "
                           "nothing after LSN %s is confirmed, and a relay of this slot started on that "
                           "topic cannot tell how far the slot was published", why,
                           lsn_format(r->fb.sent_flush_lsn, (char[LSN_STRLEN]){0}));
                return;
        }
        if (relay_mono_ms() >= w->topic_next_ms &&
            producer_topic_config_ask(r->prod, r->conf->checkpoint_topic, TOPIC_MS) == 0)
                w->topic_next_ms = relay_mono_ms() + TOPIC_RECHECK_MS;
}

void relay_watch_serve(struct relay *r)
{
        /* After a row error the drain still confirms what came before it; after anything else, nothing. */
        if (!r->streaming || (r->failure && r->failure != RELAY_EXIT_DATA))
                return;
        if (r->failure && r->failure != RELAY_EXIT_DATA)
                return;
        retry_checkpoint(r);
        if (r->failure && r->failure != RELAY_EXIT_DATA)
                return;
        recheck_topic(r);
        if (r->failure && r->failure != RELAY_EXIT_DATA)
                return;
        maybe_checkpoint(r);
}

