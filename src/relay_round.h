/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The side connection's round (relay_round.c): its state and the calls the
 * loop (relay.c) and the row path make. Every function takes the relay
 * (relay_parts.h) and reads the rest of it (the configuration, the
 * preflight's table and publication OIDs, the feedback LSNs); only
 * relay_round.c writes struct relay_round, and it calls no other part. The
 * SQL is preflight.h's PREFLIGHT_WATCH_SQL; snapshots are pgsnapshot.h's.
 */
#ifndef RELAY_RELAY_ROUND_H
#define RELAY_RELAY_ROUND_H

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct relay;
struct pgside;
struct preflight_slot;

/* A transaction whose commit the relay read: which the next round's snapshot must see. */
struct relay_decoded {
        uint32_t xid;                 /* top-level, as decoded */
        uint64_t end_lsn;             /* LSN just past its commit record */
};
/* Read past the verified LSN: at this many the relay reads no more until a round verifies. */
#define RELAY_DECODED_MAX 65536

struct relay_round {
        struct pgside *side;          /* the side connection */
        char *schemas, *tables;       /* the configured tables as array literals for the round */
        uint64_t verified;            /* LSN up to which a completed round saw everything intact */
        uint64_t round_lsn;           /* LSN the round in flight verifies */
        uint64_t hurry_lsn;           /* a commit waits for this LSN verified: rounds without the gap */
        int64_t hurry_gap_ms;         /* between such rounds: 0, then doubling while they are held back */
        int64_t held_since_ms;        /* monotonic: rounds verify nothing since (an unseen catalog change), or 0 */
        bool held_warned;             /* that lasted HELD_WARN_MS and was logged */
        int64_t last_round_ms;        /* monotonic, when the last round was sent */
        int64_t side_retry_ms;        /* monotonic: no round before this after a lost connection */
        bool side_down;
        int walsender_pid;            /* of this relay's replication connection */
        uint64_t slot_start_lsn;      /* the slot's confirmed_flush_lsn read before streaming */
        bool slot_checked;            /* the first round saw the slot where it was read */
        char sync_state[16];          /* this walsender's sync_state, as last seen */
        struct relay_decoded *decoded; /* commits read with end LSN past verified, in commit order */
        size_t ndecoded, decoded_cap;
};

/* relay_round_init() - the side connection (not yet connected). Returns 0 or -ENOMEM. */
int relay_round_init(struct relay *r);

/* relay_round_free() - close the side connection and free what init made. */
void relay_round_free(struct relay *r);

/*
 * relay_round_before_stream() - a session begins from @slot (just read):
 * nothing is verified until its first round, which also checks that the
 * slot is still at the confirmed_flush_lsn (LSN) read.
 */
void relay_round_before_stream(struct relay *r, const struct preflight_slot *slot);

/* relay_round_stream_started() - START_REPLICATION succeeded: rounds begin. */
void relay_round_stream_started(struct relay *r);

/*
 * relay_round_session_ended() - the session is over and nobody drives the
 * side connection until the next stream: close a connection attempt or a
 * round in progress (pgside_abandon()), so that it holds no backend up.
 */
void relay_round_session_ended(struct relay *r);

/* relay_round_poll_fd() - the side connection's descriptor and events for relay_wait()'s poll(). */
void relay_round_poll_fd(const struct relay *r, struct pollfd *pfd);

/*
 * relay_round_serve() - after poll(): take a round's result if it is there,
 * then send the next round (PREFLIGHT_WATCH_SQL, without waiting) if one is
 * due: at most every 50 ms while something received is not verified, at
 * least every status interval. A passed round moves r->round.verified
 * (LSN); a failed check records the failure (relay_fail(), exit 3) without
 * verifying more; a lost connection verifies nothing until it is back.
 * Nothing after a failure other than a row's. Never waits.
 */
void relay_round_serve(struct relay *r);

/*
 * relay_round_hurry() - a Kafka commit (--exactly-once) waits for
 * r->round.verified to reach @lsn (LSN): the next round goes out as soon
 * as the side connection is free, not after the 50 ms gap; while rounds are
 * held back short of it (a commit read but not yet visible, an open DDL
 * transaction), the gap between them doubles from 1 ms to 50 ms, so that
 * they do not spin.
 */
void relay_round_hurry(struct relay *r, uint64_t lsn);

/*
 * relay_round_due_ms() - ms until a round that relay_round_hurry() asked
 * for is due (0: now), or -1 when none is: the wait's timeout.
 */
int64_t relay_round_due_ms(const struct relay *r);

/*
 * relay_round_decoded() - the commit of transaction @xid, ending at @end_lsn
 * (LSN), was read: no round verifies past it before its snapshot sees the
 * transaction ended. Returns 0 or -ENOMEM.
 */
int relay_round_decoded(struct relay *r, uint32_t xid, uint64_t end_lsn);

/*
 * relay_round_full() - RELAY_DECODED_MAX commits read wait for a round (the
 * side connection is away or slow): the relay reads no more. Pure.
 */
bool relay_round_full(const struct relay *r);

#endif
