// SPDX-License-Identifier: Apache-2.0
/*
 * Fuzz target for the pgoutput decoder (src/pgoutput.c). The input is a
 * stream of frames, as tests/data/pgoutput-v1.stream records them: Int32
 * length, Int64 LSN, the message (a short last frame is cut to what is
 * there). It is fed to two decoders, one holding transactions in memory and
 * one with 16 bytes of memory, which holds them in a file: both must say the
 * same, event for event and error for error. Every event keeps the header's
 * promises (values NUL-terminated in place and holding no NUL, one per
 * column, BEGIN before COMMIT with a later end LSN), and is written back
 * into the message it came from, which must give the input's bytes: the
 * insert's tuple, the logical message, and the relation as its last
 * Relation message described it. Once the input streams (Stream Start,
 * Stop, Commit or Abort: protocol version 2) events are no longer matched
 * to the messages they came from; both decoders must still agree, through
 * every rolled-back subtransaction cut from memory or from a file.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "pgoutput.h"

struct frame {
        const uint8_t *p;
        size_t len;
        uint64_t lsn;
};

struct buf {
        uint8_t b[1 << 16];
        size_t n;
        bool over;
};

static void put(struct buf *o, const void *p, size_t n)
{
        if (o->n + n > sizeof(o->b)) {
                o->over = true;
                return;
        }
        memcpy(o->b + o->n, p, n);
        o->n += n;
}

static void put_be(struct buf *o, uint64_t v, int bytes)
{
        for (int k = bytes - 1; k >= 0; k--) {
                uint8_t c = (uint8_t)(v >> (8 * k));

                put(o, &c, 1);
        }
}

static uint64_t be(const uint8_t *p, int n)
{
        uint64_t v = 0;

        for (int i = 0; i < n; i++)
                v = v << 8 | p[i];
        return v;
}

/* The input's last Relation message of each OID, as the events' relations must re-encode to. */
#define MODEL_RELS 64
struct model {
        struct {
                uint32_t oid;
                const uint8_t *p;
                size_t len;
        } rel[MODEL_RELS];
        size_t nrel;
};

static void model_relation(struct model *m, const struct frame *f)
{
        uint32_t oid;

        if (f->len < 5)
                return;
        oid = (uint32_t)be(f->p + 1, 4);
        for (size_t i = 0; i < m->nrel; i++) {
                if (m->rel[i].oid == oid) {
                        m->rel[i].p = f->p;
                        m->rel[i].len = f->len;
                        return;
                }
        }
        if (m->nrel < MODEL_RELS) {
                m->rel[m->nrel].oid = oid;
                m->rel[m->nrel].p = f->p;
                m->rel[m->nrel].len = f->len;
                m->nrel++;
        }
}

/* @rel written back as a Relation message equals the model's bytes for its OID. */
static void check_relation(const struct model *m, const struct pgo_relation *rel)
{
        if (!m)
                return;
        struct buf o = {.n = 0};
        const uint8_t *want = NULL;
        size_t want_len = 0;

        for (size_t i = 0; i < m->nrel; i++)
                if (m->rel[i].oid == rel->oid) {
                        want = m->rel[i].p;
                        want_len = m->rel[i].len;
                }
        if (!want)
                return;  /* more relations than the model keeps, or no model */
        put(&o, "R", 1);
        put_be(&o, rel->oid, 4);
        /* "" in the message is pg_catalog in the relation */
        if (strcmp(rel->schema, "pg_catalog") == 0 && want_len > 5 && want[5] == '\0')
                put(&o, "", 1);
        else
                put(&o, rel->schema, strlen(rel->schema) + 1);
        put(&o, rel->name, strlen(rel->name) + 1);
        put(&o, &rel->replident, 1);
        put_be(&o, rel->ncolumns, 2);
        for (size_t i = 0; i < rel->ncolumns; i++) {
                /* flags: only bit 0 is kept */
                size_t at = o.n;

                put_be(&o, rel->columns[i].key, 1);
                if (!o.over && at < want_len && (want[at] & ~1u) != 0)
                        o.b[at] = want[at];
                put(&o, rel->columns[i].name, strlen(rel->columns[i].name) + 1);
                put_be(&o, rel->columns[i].typeoid, 4);
                put_be(&o, (uint32_t)rel->columns[i].typmod, 4);
        }
        if (o.over)
                return;
        FUZZ_CHECK(o.n == want_len && memcmp(o.b, want, want_len) == 0);
}

/* An event's promises, and the message it came from written back. */
static void check_event(const struct model *m, const struct pgo_event *ev, const struct frame *f)
{
        struct buf o = {.n = 0};

        switch (ev->kind) {
        case PGO_BEGIN:
        case PGO_COMMIT:
                FUZZ_CHECK(ev->end_lsn > ev->lsn);
                return;
        case PGO_INSERT:
        case PGO_UPDATE:
                FUZZ_CHECK(ev->rel && ev->nvalues == ev->rel->ncolumns && ev->values);
                for (size_t i = 0; i < ev->nvalues; i++) {
                        const struct pgo_value *v = &ev->values[i];

                        FUZZ_CHECK(v->is_null + v->unchanged + (v->ptr != NULL) == 1);
                        FUZZ_CHECK(!v->unchanged || ev->kind == PGO_UPDATE);
                        if (v->ptr)
                                FUZZ_CHECK(v->ptr[v->len] == '\0' && strlen(v->ptr) == v->len);
                }
                check_relation(m, ev->rel);
                if (ev->kind == PGO_UPDATE || !f)
                        return;
                put(&o, "I", 1);
                put_be(&o, ev->rel->oid, 4);
                put(&o, "N", 1);
                put_be(&o, ev->nvalues, 2);
                for (size_t i = 0; i < ev->nvalues; i++) {
                        if (ev->values[i].is_null) {
                                put(&o, "n", 1);
                                continue;
                        }
                        put(&o, "t", 1);
                        put_be(&o, ev->values[i].len, 4);
                        put(&o, ev->values[i].ptr, ev->values[i].len);
                }
                if (!o.over)
                        FUZZ_CHECK(o.n == f->len && memcmp(o.b, f->p, f->len) == 0);
                FUZZ_CHECK(ev->lsn == f->lsn);
                return;
        case PGO_DELETE:
                FUZZ_CHECK(ev->rel != NULL);
                check_relation(m, ev->rel);
                return;
        case PGO_TRUNCATE:
                return;
        case PGO_MESSAGE:
                FUZZ_CHECK(ev->prefix && ev->content && ev->content[ev->content_len] == '\0');
                if (!ev->transactional)
                        FUZZ_CHECK(ev->xid == 0 && ev->commit_time_us == 0);
                if (!f)
                        return;
                put(&o, "M", 1);
                /* flags: only bit 0 is kept */
                put_be(&o, f->len > 1 ? (f->p[1] & ~1u) | ev->transactional : ev->transactional, 1);
                put_be(&o, ev->lsn, 8);
                put(&o, ev->prefix, strlen(ev->prefix) + 1);
                put_be(&o, ev->content_len, 4);
                put(&o, ev->content, ev->content_len);
                if (!o.over)
                        FUZZ_CHECK(o.n == f->len && memcmp(o.b, f->p, f->len) == 0);
                return;
        }
        FUZZ_CHECK(!"unknown event kind");
}

/* An event as bytes, to compare the two decoders' events. */
static size_t event_bytes(const struct pgo_event *ev, struct buf *o)
{
        o->n = 0;
        o->over = false;
        put_be(o, ev->kind, 1);
        put_be(o, ev->xid, 4);
        put_be(o, ev->lsn, 8);
        put_be(o, ev->end_lsn, 8);
        put_be(o, (uint64_t)ev->commit_time_us, 8);
        if (ev->rel) {
                put_be(o, ev->rel->oid, 4);
                put(o, ev->rel->schema, strlen(ev->rel->schema) + 1);
                put(o, ev->rel->name, strlen(ev->rel->name) + 1);
        }
        for (size_t i = 0; i < ev->nvalues; i++) {
                put_be(o, ev->values[i].is_null | ev->values[i].unchanged << 1, 1);
                put_be(o, ev->values[i].len, 4);
                if (ev->values[i].ptr)
                        put(o, ev->values[i].ptr, ev->values[i].len);
        }
        if (ev->kind == PGO_MESSAGE) {
                put_be(o, ev->transactional, 1);
                put(o, ev->prefix, strlen(ev->prefix) + 1);
                put(o, ev->content, ev->content_len);
        }
        return o->n;
}

#define MAX_FRAMES 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static struct frame frames[MAX_FRAMES];
        static struct buf a, b;
        struct pgo_decoder *mem = pgo_decoder_new(0), *file = pgo_decoder_new(16);
        struct model model = {.nrel = 0};
        size_t nframes = 0, off = 0, txn_first = 0;
        bool open = false, streamed = false;

        if (!mem || !file)
                abort();
        while (off + 12 <= size && nframes < MAX_FRAMES) {
                size_t len = (size_t)be(data + off, 4);

                if (len > size - off - 12)
                        len = size - off - 12;
                frames[nframes++] = (struct frame){data + off + 12, len, be(data + off + 4, 8)};
                off += 12 + len;
        }
        for (size_t i = 0; i < nframes; i++) {
                const struct frame *f = &frames[i];
                int ra = pgo_decode(mem, (const char *)f->p, f->len, f->lsn);
                int rb = pgo_decode(file, (const char *)f->p, f->len, f->lsn);
                struct pgo_event ea, eb;
                size_t held = txn_first;

                FUZZ_CHECK(ra == rb);
                if (f->len && strchr("SEcA", f->p[0]))
                        streamed = true;
                if (ra < 0) {
                        FUZZ_CHECK(ra == -EBADMSG || ra == -ENOSPC || ra == -ENOMEM || ra == -ENOTSUP);
                        FUZZ_CHECK(pgo_error(mem)[0] != '\0');
                        break;
                }
                if (f->len && f->p[0] == 'B') {
                        FUZZ_CHECK(pgo_in_transaction(mem) && !pgo_ready(mem));
                        open = true;
                        txn_first = i + 1;
                        continue;
                }
                if (!open && f->len && f->p[0] == 'R')
                        model_relation(&model, f);
                for (;;) {
                        const struct frame *src = NULL;

                        ra = pgo_next(mem, &ea);
                        rb = pgo_next(file, &eb);
                        FUZZ_CHECK(ra == rb);
                        if (ra <= 0)
                                break;
                        FUZZ_CHECK(event_bytes(&ea, &a) == event_bytes(&eb, &b));
                        FUZZ_CHECK(a.over || memcmp(a.b, b.b, a.n) == 0);
                        if (ea.kind != PGO_BEGIN && ea.kind != PGO_COMMIT && !streamed) {
                                if (open) {
                                        /* The held message this event came from: skip what only applies. */
                                        while (held < i && frames[held].len &&
                                               strchr("RYO", frames[held].p[0])) {
                                                if (frames[held].p[0] == 'R')
                                                        model_relation(&model, &frames[held]);
                                                held++;
                                        }
                                        src = held < i ? &frames[held++] : NULL;
                                } else {
                                        src = f;
                                }
                        }
                        check_event(streamed ? NULL : &model, &ea, src);
                        if (ea.kind == PGO_COMMIT) {
                                FUZZ_CHECK(!pgo_in_transaction(mem));
                                FUZZ_CHECK(pgo_streams(mem) || pgo_held_bytes(mem) == 0);
                                open = false;
                        }
                }
                if (ra < 0) {
                        FUZZ_CHECK(ra == -EBADMSG || ra == -ENOSPC || ra == -ENOMEM || ra == -EIO);
                        break;
                }
                FUZZ_CHECK(pgo_in_transaction(mem) == open);
        }
        pgo_decoder_free(mem);
        pgo_decoder_free(file);
        return 0;
}
