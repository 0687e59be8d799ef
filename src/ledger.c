// SPDX-License-Identifier: Apache-2.0
/*
 * The LSN ledger: a ring of transactions in commit order with a count of
 * unacknowledged messages each. See ledger.h for the rules. Knows nothing of
 * Kafka, libpq or wal2json.
 */
#include "ledger.h"

#include <errno.h>
#include <stdlib.h>

#include "lsn.h"

struct ledger_txn {
        uint64_t end_lsn;
        uint64_t outstanding;
        int64_t stamp;
        bool committed;
};

struct ledger {
        struct ledger_txn *ring;
        size_t cap;             /* power of two */
        uint64_t head_seq;      /* sequence number of the oldest entry */
        uint64_t tail_seq;      /* one past the newest entry */
        uint64_t epoch;         /* bumped by ledger_reset(); high bits of tickets */
        uint64_t flush_lsn;
        uint64_t last_end_lsn;  /* end LSN of the newest transaction begun */
        uint64_t outstanding;
        bool open;              /* the newest entry is an open transaction */
        bool open_folded;       /* the open transaction was folded into an older entry */
        uint64_t open_end_lsn;
        uint64_t keepalive_lsn; /* pending keepalive walEnd, or LSN_INVALID */
        uint64_t keepalive_seq; /* adopt it once head_seq passes this */
};

/* Tickets: bit 63 clear (the caller's), 15 bits of epoch, 48 bits of sequence. */
#define SEQ_BITS 48
#define SEQ_MASK ((UINT64_C(1) << SEQ_BITS) - 1)
#define EPOCH_MASK UINT64_C(0x7fff)

static struct ledger_txn *entry(const struct ledger *l, uint64_t seq)
{
        return &l->ring[seq & (l->cap - 1)];
}

struct ledger *ledger_new(uint64_t start_lsn)
{
        struct ledger *l = calloc(1, sizeof(*l));

        if (!l)
                return NULL;
        l->cap = 64;
        l->ring = calloc(l->cap, sizeof(*l->ring));
        if (!l->ring) {
                free(l);
                return NULL;
        }
        l->flush_lsn = start_lsn;
        l->last_end_lsn = start_lsn;
        return l;
}

struct ledger *ledger_free(struct ledger *l)
{
        if (l) {
                free(l->ring);
                free(l);
        }
        return NULL;
}

static int grow(struct ledger *l)
{
        size_t ncap = l->cap * 2;
        struct ledger_txn *nr = malloc(ncap * sizeof(*nr));

        if (!nr)
                return -ENOMEM;
        for (uint64_t s = l->head_seq; s < l->tail_seq; s++)
                nr[s & (ncap - 1)] = *entry(l, s);
        free(l->ring);
        l->ring = nr;
        l->cap = ncap;
        return 0;
}

static void adopt_keepalive(struct ledger *l)
{
        if (l->keepalive_lsn != LSN_INVALID && l->head_seq >= l->keepalive_seq) {
                if (l->keepalive_lsn > l->flush_lsn)
                        l->flush_lsn = l->keepalive_lsn;
                l->keepalive_lsn = LSN_INVALID;
        }
}

/* Drop fully acknowledged committed entries from the head, advancing the flush LSN. */
static void advance(struct ledger *l)
{
        while (l->head_seq < l->tail_seq) {
                struct ledger_txn *t = entry(l, l->head_seq);

                if (!t->committed || t->outstanding > 0)
                        break;
                if (t->end_lsn > l->flush_lsn)
                        l->flush_lsn = t->end_lsn;
                l->head_seq++;
        }
        adopt_keepalive(l);
}

int ledger_begin(struct ledger *l, uint64_t end_lsn, int64_t stamp)
{
        struct ledger_txn *t;

        if (l->open)
                return -EBUSY;
        if (end_lsn <= l->last_end_lsn && l->last_end_lsn != LSN_INVALID)
                return -ERANGE;
        l->last_end_lsn = end_lsn;
        l->open = true;
        l->open_end_lsn = end_lsn;
        l->open_folded = false;
        if (l->tail_seq - l->head_seq == l->cap && grow(l) < 0) {
                l->open = false;
                return -ENOMEM;
        }
        t = entry(l, l->tail_seq++);
        t->end_lsn = end_lsn;
        t->outstanding = 0;
        t->stamp = stamp;
        t->committed = false;
        return 0;
}

int ledger_add_message(struct ledger *l, ledger_ticket *ret_ticket)
{
        uint64_t seq;

        if (!l->open)
                return -EPROTO;
        seq = l->tail_seq - 1;
        entry(l, seq)->outstanding++;
        l->outstanding++;
        *ret_ticket = ((l->epoch & EPOCH_MASK) << SEQ_BITS) | (seq & SEQ_MASK);
        return 0;
}

int ledger_cancel_message(struct ledger *l, ledger_ticket ticket)
{
        struct ledger_txn *t;

        if (!l->open)
                return -EPROTO;
        t = entry(l, l->tail_seq - 1);
        if (t->outstanding == 0 || (ticket & SEQ_MASK) != ((l->tail_seq - 1) & SEQ_MASK))
                return -EPROTO;
        t->outstanding--;
        l->outstanding--;
        return 0;
}

int ledger_commit(struct ledger *l, uint64_t end_lsn)
{
        struct ledger_txn *t, *prev;

        if (!l->open)
                return -EPROTO;
        if (end_lsn != l->open_end_lsn)
                return -ERANGE;
        l->open = false;
        t = entry(l, l->tail_seq - 1);
        t->committed = true;
        /*
         * A transaction without messages behind a committed older one is
         * folded into it: confirming the older one's successor is safe as
         * soon as the older one is acknowledged, and the ring stays small.
         */
        if (t->outstanding == 0 && l->tail_seq - l->head_seq >= 2) {
                prev = entry(l, l->tail_seq - 2);
                if (prev->committed) {
                        prev->end_lsn = t->end_lsn;
                        l->tail_seq--;
                        if (l->keepalive_seq > l->tail_seq)
                                l->keepalive_seq = l->tail_seq;
                }
        }
        advance(l);
        return 0;
}

int ledger_ack(struct ledger *l, ledger_ticket ticket)
{
        uint64_t seq = ticket & SEQ_MASK;
        struct ledger_txn *t;

        if ((ticket >> SEQ_BITS) != (l->epoch & EPOCH_MASK))
                return -ENOENT;
        /* 48 bits of sequence: 2^48 transactions between resets never happen. */
        if (seq < l->head_seq || seq >= l->tail_seq)
                return -ENOENT;
        t = entry(l, seq);
        if (t->outstanding == 0)
                return -ENOENT;
        t->outstanding--;
        l->outstanding--;
        if (seq == l->head_seq)
                advance(l);
        return 0;
}

int ledger_ticket_stamp(const struct ledger *l, ledger_ticket ticket, int64_t *ret_stamp)
{
        uint64_t seq = ticket & SEQ_MASK;
        const struct ledger_txn *t;

        if ((ticket >> SEQ_BITS) != (l->epoch & EPOCH_MASK) || seq < l->head_seq || seq >= l->tail_seq)
                return -ENOENT;
        t = entry(l, seq);
        if (t->outstanding == 0)
                return -ENOENT;
        *ret_stamp = t->stamp;
        return 0;
}

void ledger_keepalive(struct ledger *l, uint64_t wal_end)
{
        if (wal_end <= l->flush_lsn)
                return;
        if (wal_end > l->keepalive_lsn)
                l->keepalive_lsn = wal_end;
        /* Everything read so far, the open transaction included, must drain first. */
        l->keepalive_seq = l->tail_seq;
        adopt_keepalive(l);
}

int ledger_oldest_stamp(const struct ledger *l, int64_t *ret_stamp)
{
        if (l->head_seq == l->tail_seq)
                return -ENOENT;
        *ret_stamp = entry(l, l->head_seq)->stamp;
        return 0;
}

uint64_t ledger_flush_lsn(const struct ledger *l)
{
        return l->flush_lsn;
}

uint64_t ledger_outstanding(const struct ledger *l)
{
        return l->outstanding;
}

size_t ledger_transactions(const struct ledger *l)
{
        return (size_t)(l->tail_seq - l->head_seq);
}

bool ledger_in_transaction(const struct ledger *l)
{
        return l->open;
}

void ledger_reset(struct ledger *l)
{
        l->head_seq = l->tail_seq = 0;
        l->epoch = (l->epoch + 1) & EPOCH_MASK;
        l->outstanding = 0;
        l->open = false;
        l->keepalive_lsn = LSN_INVALID;
        l->keepalive_seq = 0;
        l->last_end_lsn = l->flush_lsn;
}

void ledger_rewind(struct ledger *l, uint64_t lsn)
{
        if (lsn < l->flush_lsn)
                l->flush_lsn = lsn;
        ledger_reset(l);
}
