// SPDX-License-Identifier: Apache-2.0
/*
 * What the relay keeps true while it runs, and how it knows before it
 * confirms. Two watchers gate every standby status update: the confirmed
 * LSN (relay_confirmable_lsn(), relay_report.c) is the least of the
 * ledger's flush LSN, the newest checkpoint Kafka acknowledged, and the LSN
 * the side connection last verified.
 *
 * The checkpoint (checkpoint.h): before a session streams, the newest
 * checkpoint of the slot is read and compared with the slot. A slot
 * confirmed beyond it was moved by someone else, and a checkpoint written
 * by a relay with another table set or row mapping means two relays would
 * take turns with one slot: both stop the relay (exit 3) unless the
 * operator accepts them. While streaming, a checkpoint record chases the
 * verified, acknowledged LSN, at most every STATUS_MIN_GAP_MS.
 *
 * The side connection (pgside.h): one ordinary connection runs a round of
 * catalog checks whenever there is something new to confirm and at least
 * every status interval: each configured outbox name still the same
 * relation (OID), a table, permanent (not UNLOGGED or TEMPORARY), pgoutput's
 * publication unchanged, the slot unmoved since the relay read it, and this
 * relay's walsender not a synchronous standby. A round that passes verifies every LSN received
 * before it was sent, up to the first transaction read that its snapshot
 * does not yet see ended: a commit is decoded and sent as soon as it is
 * flushed, and is visible to other sessions only once its backend has
 * left the process array (after waiting for synchronous standbys), so a
 * catalog read in between sees the catalog from before it (pgsnapshot.h).
 * A failed check stops the relay without confirming past the last
 * verified LSN. See relay_parts.h.
 */
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "pgsnapshot.h"
#include "publication.h"
#include "relay_parts.h"

#define ROUND_MIN_GAP_MS 50       /* rounds at most this often while there is something to verify */
#define SIDE_RETRY_MS 1000        /* after a lost side connection */
#define CHECKPOINT_READ_MS 30000  /* reading the newest checkpoint, at most */
#define CHECKPOINT_SLOW_MS 3000   /* a read still going after this long says why it waits */
#define TOPIC_MS 15000            /* creating or describing the checkpoint topic */
#define CHECKPOINT_RETRY_MS 5000  /* reading it again while Kafka is away */
#define TOPIC_RECHECK_MS 10000    /* the checkpoint topic's settings again while streaming, this often */
#define HELD_WARN_MS 30000        /* rounds held back by an unseen catalog change this long say so */

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
        w->side = pgside_new(conf->conninfo);
        if (!w->side)
                return -ENOMEM;
        w->schemas = preflight_watch_array(conf->tables, conf->ntables, true);
        w->tables = preflight_watch_array(conf->tables, conf->ntables, false);
        if (!w->schemas || !w->tables)
                return -ENOMEM;
        w->src = (struct checkpoint_source){
                .brokers = conf->brokers,
                .props = r->prod_props,
                .nprops = conf->nprops,
                .topic = conf->checkpoint_topic,
        };
        return 0;
}

void relay_watch_free(struct relay *r)
{
        r->watch.side = pgside_free(r->watch.side);
        free(r->watch.decoded);
        free(r->watch.schemas);
        free(r->watch.tables);
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

        w->verified = LSN_INVALID;       /* nothing new is confirmed before the first round */
        w->ndecoded = 0;
        w->slot_start_lsn = slot->confirmed_flush_lsn;
        /*
         * What the server holds now is the floor: after a server restart it can
         * be less than what this relay confirmed before, and confirming that
         * again before the first round would look like someone else moving
         * the slot.
         */
        r->fb.sent_flush_lsn = slot->confirmed_flush_lsn;
        w->slot_checked = false;
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
        if (ret == 0 && judge_checkpoint(r, found, &c, no_topic, w->slot_start_lsn, &(struct checkpoint){0}) == 0)
                log_info("read the newest checkpoint of slot \"%s\": confirming again", r->conf->slot);
}

void relay_watch_stream_started(struct relay *r)
{
        struct relay_watch *w = &r->watch;

        w->walsender_pid = pgstream_backend_pid(r->pg);
        w->topic_next_ms = relay_mono_ms() + TOPIC_RECHECK_MS;
        w->round_lsn = LSN_INVALID;
        w->last_round_ms = 0;
        w->held_since_ms = 0;
        w->held_warned = false;
        w->side_retry_ms = 0;
}

void relay_watch_session_ended(struct relay *r)
{
        if (pgside_abandon(r->watch.side))
                log_debug("closed the side connection's attempt or round in progress: the stream ended");
}

/* The slot's plugin is pgoutput: its publication is checked too (what the preflight read at start). */
static bool pgoutput(const struct relay *r)
{
        return strcmp(r->pre.plugin, "pgoutput") == 0;
}

/*
 * pgoutput's publication as the relay started with it: the same publication
 * (OID), not altered (its row's xmin: ALTER PUBLICATION ... SET changes it),
 * publishing inserts, and each table listed by the same pg_publication_rel
 * row (removed and added again is another row). pgoutput reads the
 * publication as it was when each row was written, so a row inserted while
 * its table was out of it, or inserts were not published, never arrives:
 * a change stops the relay before it confirms past it, and says so.
 */
static int check_publication(struct relay *r, PGresult *res)
{
        const char *pub = config_publication(r->conf), *what = NULL;
        char a[LSN_STRLEN], why[600], create[1024];

        lsn_format(r->fb.sent_flush_lsn, a);
        if (PQgetisnull(res, 0, 7))
                what = "was dropped (or renamed)";
        else if (strtoul(PQgetvalue(res, 0, 7), NULL, 10) != r->pre.publication_oid)
                what = "was dropped and created again";
        else if (strcmp(PQgetvalue(res, 0, 9), "t") != 0)
                what = "no longer publishes inserts";
        else if (strcmp(PQgetvalue(res, 0, 8), r->pre.publication_xmin) != 0)
                what = "was altered (ALTER PUBLICATION ... SET, RENAME or OWNER)";
        for (size_t i = 0; !what && i < r->conf->ntables; i++) {
                uint32_t oid = PQgetisnull(res, (int)i, 10) ? 0 :
                               (uint32_t)strtoul(PQgetvalue(res, (int)i, 10), NULL, 10);

                if (oid != r->pre.pubrel_oids[i]) {
                        snprintf(why, sizeof(why), "%s \"%s\".\"%s\"", oid ? "removed and added again" :
                                 "no longer lists", r->conf->tables[i].schema, r->conf->tables[i].table);
                        what = why;
                }
        }
        if (!what)
                return 0;
        publication_create_sql(r->conf, create, sizeof(create));
        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "publication \"%s\" %s while the relay ran: pgoutput does not "
                   "send rows inserted while a table is out of the publication or inserts are not "
                   "published, and they are never sent later. Stopping; nothing after LSN %s is "
                   "confirmed. Make the publication the relay's again (`outbox-relay check` gives the SQL; "
                   "it was: %s), publish the rows committed since LSN %s by other means (outbox-relay "
                   "redrive --since), then start the relay once with --accept-config-change", pub, what, a,
                   create, a);
        return -EINVAL;
}

/* Act on a round's result. Returns 0 if everything holds. */
static int judge_round(struct relay *r, PGresult *res)
{
        struct relay_watch *w = &r->watch;
        char a[LSN_STRLEN], b[LSN_STRLEN];
        uint64_t confirmed = r->fb.sent_flush_lsn;

        lsn_format(confirmed, a);
        if (PQresultStatus(res) != PGRES_TUPLES_OK || (size_t)PQntuples(res) != r->conf->ntables) {
                log_warning("the side connection's catalog check failed: %s; nothing new is confirmed "
                            "until it passes", PQresultErrorMessage(res));
                return -EAGAIN;
        }
        for (size_t i = 0; i < r->conf->ntables; i++) {
                const struct table_name *t = &r->conf->tables[i];
                uint32_t oid = PQgetisnull(res, (int)i, 1) ? 0 :
                               (uint32_t)strtoul(PQgetvalue(res, (int)i, 1), NULL, 10);
                char kind = PQgetisnull(res, (int)i, 2) ? '?' : PQgetvalue(res, (int)i, 2)[0];
                char persistence = PQgetisnull(res, (int)i, 3) ? '?' : PQgetvalue(res, (int)i, 3)[0];

                if (!oid) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "outbox table \"%s\".\"%s\" no longer exists "
                                   "(dropped or renamed while the relay ran): rows inserted under another "
                                   "name are not published. Stopping; nothing after LSN %s is confirmed. "
                                   "Put the table back under its name, or restart the relay with the new "
                                   "name (--table)", t->schema, t->table, a);
                        return -EINVAL;
                }
                if (oid != r->pre.table_oids[i]) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "outbox table \"%s\".\"%s\" is another "
                                   "relation now (OID %u, was %u when the relay started): it was dropped "
                                   "and created again, or another table was renamed to its name. Stopping; "
                                   "nothing after LSN %s is confirmed. Check which rows of either table "
                                   "were published, then restart the relay", t->schema, t->table, oid,
                                   r->pre.table_oids[i], a);
                        return -EINVAL;
                }
                if (kind != 'r') {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "outbox table \"%s\".\"%s\" is no longer a "
                                   "plain table (relkind '%c'). Stopping; nothing after LSN %s is confirmed",
                                   t->schema, t->table, kind, a);
                        return -EINVAL;
                }
                if (persistence != 'p') {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "outbox table \"%s\".\"%s\" is %s now: rows "
                                   "inserted into it are not written to the WAL, so they are never "
                                   "published, not even after SET LOGGED. Stopping; nothing after LSN %s "
                                   "is confirmed. Make it LOGGED again, publish the rows inserted since it "
                                   "became unlogged by other means, then restart the relay (sql/outbox.sql's "
                                   "event trigger refuses such DDL at the source)", t->schema, t->table,
                                   persistence == 'u' ? "UNLOGGED" : "TEMPORARY", a);
                        return -EINVAL;
                }
        }
        if (pgoutput(r) && check_publication(r, res) < 0)
                return -EINVAL;
        if (!w->slot_checked && !PQgetisnull(res, 0, 5)) {
                uint64_t now = LSN_INVALID;

                lsn_parse(PQgetvalue(res, 0, 5), strlen(PQgetvalue(res, 0, 5)), &now);
                if (now > w->slot_start_lsn) {
                        relay_fail(r, RELAY_EXIT_ENVIRONMENT, "replication slot \"%s\" moved from LSN %s to "
                                   "%s between the relay's reading it and its starting to stream: someone "
                                   "else consumed it, and the outbox rows committed in between were never "
                                   "published by this relay. Publish them again from the outbox table, then "
                                   "start once with --accept-slot-position=%s", r->conf->slot,
                                   lsn_format(w->slot_start_lsn, b), lsn_format(now, a), a);
                        return -EINVAL;
                }
                w->slot_checked = true;
        }
        if (!PQgetisnull(res, 0, 6)) {
                const char *sync = PQgetvalue(res, 0, 6);
                bool bad = strcmp(sync, "sync") == 0 || strcmp(sync, "quorum") == 0 ||
                           strcmp(sync, "potential") == 0;

                if (bad && strcmp(sync, w->sync_state) != 0)
                        log_error("this relay's walsender (PID %d) is a synchronous standby (sync_state "
                                  "\"%s\" in pg_stat_replication): every commit in the cluster now waits "
                                  "for the relay, that is for Kafka. Name the physical standbys in "
                                  "synchronous_standby_names explicitly (not '*', and not the relay's "
                                  "application_name), then SELECT pg_reload_conf()", w->walsender_pid, sync);
                else if (!bad && w->sync_state[0] && strcmp(w->sync_state, "async") != 0)
                        log_info("this relay's walsender is no longer a synchronous standby (sync_state "
                                 "\"%s\")", sync);
                snprintf(w->sync_state, sizeof(w->sync_state), "%s", sync);
        }
        return 0;
}

int relay_watch_decoded(struct relay *r, uint32_t xid, uint64_t end_lsn)
{
        struct relay_watch *w = &r->watch;

        if (end_lsn <= w->verified)
                return 0;
        if (w->ndecoded == w->decoded_cap) {
                size_t cap = w->decoded_cap ? 2 * w->decoded_cap : 256;
                struct relay_decoded *d = realloc(w->decoded, cap * sizeof(*d));

                if (!d)
                        return -ENOMEM;
                w->decoded = d;
                w->decoded_cap = cap;
        }
        w->decoded[w->ndecoded++] = (struct relay_decoded){.xid = xid, .end_lsn = end_lsn};
        return 0;
}

bool relay_watch_full(const struct relay *r)
{
        return r->watch.ndecoded >= RELAY_DECODED_MAX;
}

/*
 * The first transaction that changed a catalog row the round read (the
 * xmax of pg_class, pg_namespace, pg_publication and pg_publication_rel
 * rows, columns 12 to 15) and that the round's snapshot @s cannot show
 * ended (pgsnap_before_xmin()), or 0; what the row is in @what (@size
 * bytes). The row version a snapshot reads has an xmax only if the
 * transaction that updated or deleted it had not ended for that snapshot,
 * or aborted: such a transaction can have committed below the round's LSN
 * and still be invisible. The relay may never have read it (pgoutput sends
 * nothing of a transaction that publishes nothing, as one that takes the
 * outbox out of the publication and then inserts into it), so the commits
 * read (relay_watch_decoded()) cannot tell; and it may be a subtransaction,
 * which the snapshot does not list. Only an xmax older than every
 * transaction the snapshot saw running is surely ended, and since the row
 * version is still the visible one, aborted. A row share-locked by two
 * sessions at once (SELECT ... FOR SHARE on the catalog, which PostgreSQL
 * itself does not do to these rows) shows a MultiXactId as its xmax, taken
 * here for a transaction ID.
 */
static uint32_t unseen_catalog_change(const struct relay *r, PGresult *res, const struct pg_snapshot *s,
                                      char *what, size_t size)
{
        static const char *const catalogs[] = {"pg_class", "pg_namespace", "pg_publication",
                                               "pg_publication_rel"};

        if (PQnfields(res) < 16)
                return 0;
        for (int i = 0; i < PQntuples(res); i++) {
                for (int k = 0; k < 4; k++) {
                        uint32_t xid = PQgetisnull(res, i, 12 + k) ? 0 :
                                       (uint32_t)strtoul(PQgetvalue(res, i, 12 + k), NULL, 10);

                        if (xid && !pgsnap_before_xmin(s, xid)) {
                                snprintf(what, size, "the %s row of \"%s\".\"%s\"%s", catalogs[k],
                                         r->conf->tables[i].schema, r->conf->tables[i].table,
                                         k == 1 ? " (its schema)" : k == 2 ? " (its publication)" : "");
                                return xid;
                        }
                }
        }
        return 0;
}

/*
 * How far a passed round verifies: up to its LSN, but not to the commit of
 * a transaction read that the round's snapshot (column 11) still saw in
 * progress, whose catalog changes the round could not see, and not at all
 * while a change of a catalog row it read is unseen
 * (unseen_catalog_change()); the next round looks again. A walsender that is
 * a synchronous standby is waited for by every commit, none visible before
 * the relay confirms it: that is logged as an error already (judge_round()),
 * and the round counts as before, so that the cluster's commits do not wait
 * for good.
 */
static uint64_t verified_by_round(struct relay *r, PGresult *res)
{
        struct relay_watch *w = &r->watch;
        uint64_t upto = w->round_lsn, before = w->verified;
        int64_t now = relay_mono_ms();
        struct pg_snapshot s;
        char a[LSN_STRLEN], b[LSN_STRLEN], what[300];
        uint32_t xid;

        if (strcmp(w->sync_state, "sync") == 0 || strcmp(w->sync_state, "quorum") == 0)
                return upto;
        if (PQnfields(res) < 12 || PQgetisnull(res, 0, 11) || pgsnap_parse(PQgetvalue(res, 0, 11), &s) < 0) {
                log_warning("the side connection's catalog check gave no snapshot (%s); nothing new is "
                            "confirmed until one does", PQnfields(res) < 12 || PQgetisnull(res, 0, 11) ?
                            "none" : PQgetvalue(res, 0, 11));
                return w->verified;
        }
        xid = unseen_catalog_change(r, res, &s, what, sizeof(what));
        if (xid) {
                if (!w->held_since_ms)
                        w->held_since_ms = now;
                log_debug("transaction %u changed %s, and the catalog check does not see it ended yet: "
                          "verified up to LSN %s only", xid, what, lsn_format(before, b));
                if (!w->held_warned && now - w->held_since_ms >= HELD_WARN_MS) {
                        log_warning("nothing new has been confirmed for %" PRId64 " s (from LSN %s on): "
                                    "transaction %u changed %s and has not ended, or rolled back while "
                                    "a transaction older than it still runs (the oldest is %" PRIu64 " in "
                                    "pg_current_snapshot()'s terms), and until that ends the relay cannot "
                                    "tell whether the change hides outbox rows. End it (pg_stat_activity "
                                    "backend_xid and backend_xmin, pg_prepared_xacts) and confirmation goes "
                                    "on; nothing is lost meanwhile", (now - w->held_since_ms) / 1000,
                                    lsn_format(before, b), xid, what, s.xmin);
                        w->held_warned = true;
                }
                pgsnap_free(&s);
                return before;
        }
        if (w->held_warned)
                log_info("the change of a catalog row the relay checks has ended: confirming again");
        w->held_since_ms = 0;
        w->held_warned = false;
        for (size_t i = 0; i < w->ndecoded && w->decoded[i].end_lsn <= upto; i++) {
                if (!pgsnap_ended(&s, w->decoded[i].xid)) {
                        log_debug("transaction %u ending at LSN %s was read but the catalog check did not "
                                  "see it ended yet: verified up to LSN %s only", w->decoded[i].xid,
                                  lsn_format(w->decoded[i].end_lsn, a), lsn_format(before, b));
                        upto = before;
                        break;
                }
                before = w->decoded[i].end_lsn;
        }
        pgsnap_free(&s);
        return upto;
}

/* Forget the commits the verified LSN covers. */
static void prune_decoded(struct relay_watch *w)
{
        size_t i = 0;

        while (i < w->ndecoded && w->decoded[i].end_lsn <= w->verified)
                i++;
        if (i) {
                memmove(w->decoded, w->decoded + i, (w->ndecoded - i) * sizeof(*w->decoded));
                w->ndecoded -= i;
        }
}

/* Start a round if one is due. */
static void maybe_start_round(struct relay *r)
{
        struct relay_watch *w = &r->watch;
        int64_t now = relay_mono_ms();
        uint64_t received = r->fb.server_lsn > r->fb.write_lsn ? r->fb.server_lsn : r->fb.write_lsn;
        const char *params[4] = {w->schemas, w->tables, r->conf->slot,
                                 pgoutput(r) ? config_publication(r->conf) : NULL};

        if (pgside_busy(w->side) || now < w->side_retry_ms)
                return;
        if (ledger_flush_lsn(r->ledger) > received)
                received = ledger_flush_lsn(r->ledger);
        if (!(received > w->verified && now - w->last_round_ms >= ROUND_MIN_GAP_MS) &&
            now - w->last_round_ms < r->fb.interval_ms && w->slot_checked)
                return;
        if (pgside_query(w->side, PREFLIGHT_WATCH_SQL, 4, params) < 0)
                return;
        w->round_lsn = received;
        w->last_round_ms = now;
}

uint64_t relay_watch_checkpoint_target(const struct relay *r)
{
        const struct relay_watch *w = &r->watch;
        uint64_t target = ledger_flush_lsn(r->ledger);

        if (w->verified < target)
                target = w->verified;
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

void relay_watch_poll_fd(const struct relay *r, struct pollfd *pfd)
{
        pfd->fd = r->streaming ? pgside_fd(r->watch.side) : -1;
        pfd->events = pfd->fd >= 0 ? pgside_events(r->watch.side) : 0;
}

void relay_watch_serve(struct relay *r)
{
        struct relay_watch *w = &r->watch;
        char err[ERRLEN];
        PGresult *res;

        /* After a row error the drain still confirms what came before it; after anything else, nothing. */
        if (!r->streaming || (r->failure && r->failure != RELAY_EXIT_DATA))
                return;
        switch (pgside_serve(w->side, err, sizeof(err))) {
        case PGSIDE_LOST:
                if (!w->side_down)
                        log_warning("lost the side connection to the database: %s; nothing new is "
                                    "confirmed until it is back", err);
                w->side_down = true;
                w->side_retry_ms = relay_mono_ms() + SIDE_RETRY_MS;
                break;
        case PGSIDE_RESULT:
                res = pgside_result(w->side);
                if (w->side_down)
                        log_info("the side connection to the database is back");
                w->side_down = false;
                if (judge_round(r, res) == 0) {
                        uint64_t upto = verified_by_round(r, res);

                        if (upto > w->verified) {
                                w->verified = upto;
                                log_debug("verified the outbox tables and the slot up to LSN %s",
                                          lsn_format(w->verified, (char[LSN_STRLEN]){0}));
                                prune_decoded(w);
                        }
                }
                PQclear(res);
                break;
        case PGSIDE_NONE:
                break;
        }
        if (r->failure && r->failure != RELAY_EXIT_DATA)
                return;
        retry_checkpoint(r);
        if (r->failure && r->failure != RELAY_EXIT_DATA)
                return;
        recheck_topic(r);
        if (r->failure && r->failure != RELAY_EXIT_DATA)
                return;
        maybe_start_round(r);
        maybe_checkpoint(r);
}

