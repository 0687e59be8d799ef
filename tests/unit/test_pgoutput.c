// SPDX-License-Identifier: Apache-2.0
/*
 * Unit tests of the pgoutput decoder (pgoutput.c) and of what the relay
 * makes of its events (relay_pgo_record()), on streams recorded from a real
 * PostgreSQL 15 (tests/unit/capture_pgoutput.py): the same transactions
 * through pgoutput and through wal2json give the relay the same records,
 * column for column and byte for byte. Then hand-made messages: each
 * malformation refused, the Relation cache's bound, and a transaction held
 * in a file gives the same events as one held in memory.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lsn.h"
#include "pgoutput.h"
#include "relay_parts.h"
#include "unit_check.h"
#include "wal2json.h"

#ifndef TEST_DATA_DIR
#define TEST_DATA_DIR "tests/data"
#endif

struct frame {
        uint64_t lsn;
        size_t len;
        char *data;
};

static char *slurp(const char *name, size_t *ret_len)
{
        char path[512];
        FILE *f;
        char *buf = NULL;
        size_t cap = 0, len = 0, n;

        snprintf(path, sizeof(path), "%s/%s", TEST_DATA_DIR, name);
        f = fopen(path, "rb");
        CHECK(f != NULL);
        if (!f)
                return NULL;
        do {
                if (len + 65536 > cap) {
                        cap = cap ? cap * 2 : 65536;
                        buf = realloc(buf, cap + 1);
                        if (!buf)
                                abort();
                }
                n = fread(buf + len, 1, cap - len, f);
                len += n;
        } while (n > 0);
        fclose(f);
        buf[len] = '\0';
        *ret_len = len;
        return buf;
}

static uint64_t be(const unsigned char *p, int n)
{
        uint64_t v = 0;

        for (int i = 0; i < n; i++)
                v = v << 8 | p[i];
        return v;
}

/* The frames of a recorded stream: Int32 length, Int64 LSN, the message. */
static size_t load_frames(const char *name, struct frame *out, size_t max, char **ret_buf)
{
        size_t len = 0, off = 0, n = 0;
        char *buf = slurp(name, &len);

        *ret_buf = buf;
        while (buf && off + 12 <= len && n < max) {
                size_t flen = (size_t)be((unsigned char *)buf + off, 4);

                CHECK(off + 12 + flen <= len);
                if (off + 12 + flen > len)
                        break;
                out[n].lsn = be((unsigned char *)buf + off + 4, 8);
                out[n].len = flen;
                out[n].data = buf + off + 12;
                off += 12 + flen;
                n++;
        }
        CHECK(off == len);
        return n;
}

/* One record as a line of text: everything the relay reads from it. */
static void describe(const struct w2j_record *r, char *buf, size_t size)
{
        char a[LSN_STRLEN], b[LSN_STRLEN];
        size_t o = 0;

        switch (r->action) {
        case W2J_BEGIN:
        case W2J_COMMIT:
                snprintf(buf, size, "%c xid %u commit %s end %s time %lld", r->action_code, r->xid,
                         lsn_format(r->lsn, a), lsn_format(r->next_lsn, b), (long long)r->commit_time_us);
                return;
        case W2J_MESSAGE:
                /* wal2json cuts content at a NUL byte; pgoutput's is whole: compare up to it. */
                snprintf(buf, size, "M tx %d lsn %s prefix %s content %.*s", r->transactional,
                         lsn_format(r->lsn, a), r->prefix, (int)strnlen(r->content, r->content_len),
                         r->content);
                return;
        default:
                break;
        }
        o += (size_t)snprintf(buf + o, size - o, "%c %s.%s lsn %s xid %u time %lld:", r->action_code,
                              r->schema, r->table, lsn_format(r->lsn, a), r->xid,
                              (long long)r->commit_time_us);
        for (size_t i = 0; i < r->ncolumns && o < size; i++) {
                const struct w2j_column *c = &r->columns[i];

                o += (size_t)snprintf(buf + o, size - o, " [%s oid %u %s%s len %zu \"%s\"]", c->name,
                                      c->typeoid, c->value.is_null ? "null" : "text",
                                      c->value.was_number ? " number" : "", c->value.len,
                                      c->value.ptr ? c->value.ptr : "");
        }
}

#define MAX_LINES 512

struct lines {
        char *v[MAX_LINES];
        size_t n;
};

static void push_line(struct lines *l, const struct w2j_record *r)
{
        char buf[16384];

        describe(r, buf, sizeof(buf));
        if (l->n < MAX_LINES)
                l->v[l->n++] = strdup(buf);
}

/*
 * Keep what the relay acts on, the same for either plugin: inserts,
 * messages with the relay's prefix, and the begin and commit of a
 * transaction holding one (pgoutput sends no empty transaction, wal2json
 * does; wal2json is asked for the prefix only, pgoutput sends every one).
 */
struct filter {
        struct lines *out;
        struct w2j_record begin;
        char begin_line[512];
        bool have_begin, kept;
};

static void filter_record(struct filter *f, const struct w2j_record *r)
{
        switch (r->action) {
        case W2J_BEGIN:
                f->begin = *r;
                f->have_begin = true;
                f->kept = false;
                return;
        case W2J_COMMIT:
                if (f->kept)
                        push_line(f->out, r);
                f->have_begin = f->kept = false;
                return;
        case W2J_INSERT:
        case W2J_MESSAGE:
                if (r->action == W2J_MESSAGE && strcmp(r->prefix, "outbox") != 0)
                        return;
                if (f->have_begin && !f->kept) {
                        push_line(f->out, &f->begin);
                        f->kept = true;
                }
                push_line(f->out, r);
                return;
        default:
                return;
        }
}

static void test_same_as_wal2json(void)
{
        static struct frame frames[1024];
        struct lines w = {0}, p = {0};
        struct filter fw = {.out = &w}, fp = {.out = &p};
        struct w2j_decoder *wd = w2j_decoder_new();
        struct pgo_decoder *pd = pgo_decoder_new(0);
        struct relay_pgo rp = {0};
        char *buf, *text, *line;
        size_t n, len = 0, inserts = 0, messages = 0, relations = 0;

        /* wal2json */
        text = slurp("pgoutput-v1-wal2json.jsonl", &len);
        for (line = text; text && line < text + len;) {
                char *nl = memchr(line, '\n', (size_t)(text + len - line));
                struct w2j_record r;
                int ret;

                if (!nl)
                        nl = text + len;
                ret = w2j_decode(wd, line, (size_t)(nl - line), &r);
                CHECK_INT(ret, 0);
                if (ret == 0)
                        filter_record(&fw, &r);
                line = nl + 1;
        }
        /* pgoutput */
        n = load_frames("pgoutput-v1.stream", frames, 1024, &buf);
        CHECK(n > 20);
        for (size_t i = 0; i < n; i++) {
                struct pgo_event ev;
                struct w2j_record r;
                int ret = pgo_decode(pd, frames[i].data, frames[i].len, frames[i].lsn);

                relations += frames[i].data[0] == 'R';
                CHECK_INT(ret, 0);
                if (ret)
                        fprintf(stderr, "frame %zu ('%c'): %s\n", i, frames[i].data[0], pgo_error(pd));
                while ((ret = pgo_next(pd, &ev)) > 0) {
                        CHECK_INT(relay_pgo_record(&ev, &rp, &r), 0);
                        inserts += ev.kind == PGO_INSERT;
                        messages += ev.kind == PGO_MESSAGE;
                        filter_record(&fp, &r);
                }
                CHECK_INT(ret, 0);
        }
        CHECK(!pgo_in_transaction(pd));
        /*
         * outbox, types, "we\"ird", then outbox again after its ALTER TABLE, and once more
         * after the invalidations of the next transactions: five Relation messages.
         */
        CHECK_INT(relations, 5);
        CHECK_INT(pgo_relations(pd), 3);
        CHECK_INT(inserts, 4 + 1 + 2 + 1 + 50);
        CHECK_INT(messages, 4);
        CHECK(w.n > 60);
        CHECK_INT(p.n, w.n);
        for (size_t i = 0; i < w.n && i < p.n; i++) {
                CHECK_STR(p.v[i], w.v[i]);
                free(w.v[i]);
                free(p.v[i]);
        }
        free(text);
        free(buf);
        free(rp.cols);
        w2j_decoder_free(wd);
        pgo_decoder_free(pd);
}

/* Events of a whole stream as lines, through a decoder of @memory bytes. */
static size_t stream_lines(struct frame *frames, size_t n, size_t memory, struct lines *out)
{
        struct pgo_decoder *d = pgo_decoder_new(memory);
        struct relay_pgo rp = {0};
        size_t spilled = 0;

        for (size_t i = 0; i < n; i++) {
                struct pgo_event ev;
                struct w2j_record r;
                int ret;

                CHECK_INT(pgo_decode(d, frames[i].data, frames[i].len, frames[i].lsn), 0);
                if (pgo_held_bytes(d) > memory)
                        spilled++;
                while ((ret = pgo_next(d, &ev)) > 0) {
                        relay_pgo_record(&ev, &rp, &r);
                        push_line(out, &r);
                }
                CHECK_INT(ret, 0);
        }
        free(rp.cols);
        pgo_decoder_free(d);
        return spilled;
}

static void test_held_in_a_file(void)
{
        static struct frame frames[1024];
        struct lines mem = {0}, file = {0};
        char *buf;
        size_t n = load_frames("pgoutput-v1.stream", frames, 1024, &buf);

        CHECK_INT(stream_lines(frames, n, PGO_TXN_MEMORY_DEFAULT, &mem), 0);
        /* 64 bytes of memory: every transaction of more than a message goes to the file */
        CHECK(stream_lines(frames, n, 64, &file) > 10);
        CHECK_INT(file.n, mem.n);
        for (size_t i = 0; i < mem.n && i < file.n; i++) {
                CHECK_STR(file.v[i], mem.v[i]);
                free(mem.v[i]);
                free(file.v[i]);
        }
        free(buf);
}

/* A message built from pieces: 'c' a byte, 's' a string, 'h' Int16, 'i' Int32, 'l' Int64. */
static size_t msg(char *out, const char *fmt, ...)
{
        va_list ap;
        size_t o = 0;

        va_start(ap, fmt);
        for (const char *f = fmt; *f; f++) {
                uint64_t v;
                int bytes = 0;
                const char *s;

                switch (*f) {
                case 'c': out[o++] = (char)va_arg(ap, int); break;
                case 's':
                        s = va_arg(ap, const char *);
                        memcpy(out + o, s, strlen(s) + 1);
                        o += strlen(s) + 1;
                        break;
                case 'h': bytes = 2; break;
                case 'i': bytes = 4; break;
                case 'l': bytes = 8; break;
                }
                if (bytes) {
                        v = bytes == 8 ? va_arg(ap, uint64_t) : (uint64_t)va_arg(ap, unsigned);
                        for (int k = bytes - 1; k >= 0; k--)
                                out[o++] = (char)(v >> (8 * k));
                }
        }
        va_end(ap);
        return o;
}

static int feed(struct pgo_decoder *d, const char *m, size_t len)
{
        return pgo_decode(d, m, len, 0x1000);
}

/* A fresh decoder inside a transaction with relation 16384 (a, b) described. */
static struct pgo_decoder *in_txn(void)
{
        struct pgo_decoder *d = pgo_decoder_new(0);
        char m[256];
        size_t n;

        n = msg(m, "clli", 'B', (uint64_t)0x2000, (uint64_t)1000000, 7u);
        CHECK_INT(feed(d, m, n), 0);
        n = msg(m, "cisschcsiicsii", 'R', 16384u, "public", "outbox", 'd', 2u, 1, "a", 25u, 0xffffffffu, 0,
                "b", 3802u, 0xffffffffu);
        CHECK_INT(feed(d, m, n), 0);
        return d;
}

static void test_refused(void)
{
        struct pgo_decoder *d;
        struct pgo_event ev;
        char m[256];
        size_t n;

        /* A change outside a transaction. */
        d = pgo_decoder_new(0);
        n = msg(m, "cic", 'I', 16384u, 'N');
        CHECK_INT(feed(d, m, n), -EBADMSG);
        CHECK(strstr(pgo_error(d), "outside a transaction") != NULL);
        /* Failed: refused until reset. */
        n = msg(m, "clli", 'B', (uint64_t)0x2000, (uint64_t)0, 7u);
        CHECK_INT(feed(d, m, n), -EBADMSG);
        pgo_reset(d);
        CHECK_INT(feed(d, m, n), 0);
        CHECK(pgo_in_transaction(d));
        /* A Begin inside a transaction. */
        CHECK_INT(feed(d, m, n), -EBADMSG);
        pgo_decoder_free(d);

        /* Held messages are checked when handed out. */
        static const char *const bad[] = {
                "unknown relation", "binary value", "column count", "unchanged in an insert", "truncated",
        };
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                d = in_txn();
                if (i == 0)
                        n = msg(m, "cichcicc", 'I', 99u, 'N', 2u, 't', 1u, 'x', 'n');
                else if (i == 1)
                        n = msg(m, "cichcic", 'I', 16384u, 'N', 2u, 'b', 0u, 'n');
                else if (i == 2)
                        n = msg(m, "cichc", 'I', 16384u, 'N', 1u, 'n');
                else if (i == 3)
                        n = msg(m, "cichcc", 'I', 16384u, 'N', 2u, 'u', 'n');
                else
                        n = msg(m, "cichci", 'I', 16384u, 'N', 2u, 't', 100u);
                CHECK_INT(feed(d, m, n), 0);
                n = msg(m, "cclll", 'C', 0, (uint64_t)0x2000, (uint64_t)0x2030, (uint64_t)1000000);
                CHECK_INT(feed(d, m, n), 0);
                CHECK_INT(pgo_next(d, &ev), 1);
                CHECK_INT(ev.kind, PGO_BEGIN);
                CHECK_INT(ev.end_lsn, 0x2030);
                CHECK_INT(pgo_next(d, &ev), -EBADMSG);
                if (pgo_error(d)[0] == '\0')
                        fprintf(stderr, "no reason for: %s\n", bad[i]);
                CHECK(pgo_error(d)[0] != '\0');
                pgo_decoder_free(d);
        }

        /* A Commit that does not match its Begin. */
        d = in_txn();
        n = msg(m, "cclll", 'C', 0, (uint64_t)0x2008, (uint64_t)0x2030, (uint64_t)1000000);
        CHECK_INT(feed(d, m, n), -EBADMSG);
        pgo_decoder_free(d);

        /* A value holding a NUL, trailing bytes, a message type the relay never asks for. */
        d = in_txn();
        n = msg(m, "cichcicccc", 'I', 16384u, 'N', 2u, 't', 3u, 'a', 0, 'b', 'n');
        CHECK_INT(feed(d, m, n), 0);
        n = msg(m, "cclll", 'C', 0, (uint64_t)0x2000, (uint64_t)0x2030, (uint64_t)1000000);
        CHECK_INT(feed(d, m, n), 0);
        CHECK_INT(pgo_next(d, &ev), 1);
        CHECK_INT(pgo_next(d, &ev), -EBADMSG);
        CHECK(strstr(pgo_error(d), "NUL") != NULL);
        pgo_decoder_free(d);
        d = pgo_decoder_new(0);
        n = msg(m, "cic", 'S', 7u, 1);
        CHECK_INT(feed(d, m, n), -EBADMSG);
        CHECK(strstr(pgo_error(d), "streaming") != NULL);
        pgo_decoder_free(d);

        /* Events not taken: the next message waits. */
        d = in_txn();
        n = msg(m, "cclll", 'C', 0, (uint64_t)0x2000, (uint64_t)0x2030, (uint64_t)1000000);
        CHECK_INT(feed(d, m, n), 0);
        CHECK(pgo_ready(d));
        CHECK_INT(feed(d, m, n), -EBUSY);
        CHECK_INT(pgo_next(d, &ev), 1);
        CHECK_INT(pgo_next(d, &ev), 1);
        CHECK_INT(ev.kind, PGO_COMMIT);
        CHECK_INT(ev.commit_time_us, INT64_C(946684800000000) + 1000000);
        CHECK(!pgo_ready(d) && !pgo_in_transaction(d));
        CHECK_INT(pgo_next(d, &ev), 0);
        pgo_decoder_free(d);
}

static void test_values(void)
{
        struct pgo_decoder *d = in_txn();
        struct pgo_event ev;
        char m[256];
        size_t n;

        /* Text values are NUL-terminated in place; an empty text is not NULL. */
        n = msg(m, "cichcicccci", 'I', 16384u, 'N', 2u, 't', 3u, 'x', 'y', 'z', 't', 0u);
        CHECK_INT(feed(d, m, n), 0);
        /* A non-transactional message inside a transaction is refused; a transactional one is held. */
        n = msg(m, "cclsicc", 'M', 1, (uint64_t)0x1ff0, "outbox", 2u, '{', '}');
        CHECK_INT(feed(d, m, n), 0);
        n = msg(m, "cclll", 'C', 0, (uint64_t)0x2000, (uint64_t)0x2030, (uint64_t)2000000);
        CHECK_INT(feed(d, m, n), 0);
        CHECK_INT(pgo_next(d, &ev), 1);
        CHECK_INT(ev.xid, 7);
        CHECK_INT(ev.lsn, 0x2000);
        CHECK_INT(pgo_next(d, &ev), 1);
        CHECK_INT(ev.kind, PGO_INSERT);
        CHECK_STR(ev.rel->schema, "public");
        CHECK_STR(ev.rel->name, "outbox");
        CHECK_INT(ev.rel->oid, 16384);
        CHECK_INT(ev.nvalues, 2);
        CHECK_STR(ev.values[0].ptr, "xyz");
        CHECK_INT(ev.values[0].len, 3);
        CHECK_STR(ev.values[1].ptr, "");
        CHECK(!ev.values[1].is_null);
        CHECK_INT(ev.lsn, 0x1000);
        CHECK_INT(ev.xid, 7);
        CHECK_INT(pgo_next(d, &ev), 1);
        CHECK_INT(ev.kind, PGO_MESSAGE);
        CHECK(ev.transactional);
        CHECK_STR(ev.prefix, "outbox");
        CHECK_STR(ev.content, "{}");
        CHECK_INT(ev.lsn, 0x1ff0);
        CHECK_INT(pgo_next(d, &ev), 1);
        CHECK_INT(ev.kind, PGO_COMMIT);
        /* Outside a transaction: a non-transactional message at once, its content whole. */
        n = msg(m, "cclsicccc", 'M', 0, (uint64_t)0x3000, "p", 4u, 'a', 0, 'b', 0xff);
        CHECK_INT(feed(d, m, n), 0);
        CHECK_INT(pgo_next(d, &ev), 1);
        CHECK(!ev.transactional);
        CHECK_INT(ev.content_len, 4);
        CHECK(memcmp(ev.content, "a\0b\xff", 4) == 0 && ev.content[4] == '\0');
        CHECK_INT(ev.xid, 0);
        CHECK_INT(pgo_next(d, &ev), 0);
        /* A transactional message outside a transaction is malformed. */
        n = msg(m, "cclsic", 'M', 1, (uint64_t)0x3000, "p", 1u, 'a');
        CHECK_INT(feed(d, m, n), -EBADMSG);
        pgo_decoder_free(d);
}

/* The Relation cache is bounded: one relation more is an error, a relation described again is not. */
static void test_relation_bound(void)
{
        struct pgo_decoder *d = pgo_decoder_new(0);
        char m[256];
        size_t n;

        for (unsigned i = 0; i < PGO_RELATIONS_MAX; i++) {
                n = msg(m, "cisschcsii", 'R', 20000u + i, "public", "t", 'd', 1u, 0, "a", 25u, 0xffffffffu);
                CHECK_INT(feed(d, m, n), 0);
        }
        CHECK_INT(pgo_relations(d), PGO_RELATIONS_MAX);
        n = msg(m, "cisschcsii", 'R', 20000u, "public", "t2", 'd', 1u, 0, "a", 23u, 0xffffffffu);
        CHECK_INT(feed(d, m, n), 0);
        CHECK_INT(pgo_relations(d), PGO_RELATIONS_MAX);
        n = msg(m, "cisschcsii", 'R', 1u, "public", "t", 'd', 1u, 0, "a", 25u, 0xffffffffu);
        CHECK_INT(feed(d, m, n), -ENOSPC);
        pgo_reset(d);
        CHECK_INT(pgo_relations(d), 0);
        CHECK_INT(feed(d, m, n), 0);
        pgo_decoder_free(d);
}

int main(void)
{
        test_same_as_wal2json();
        test_held_in_a_file();
        test_refused();
        test_values();
        test_relation_bound();
        return check_summary();
}
