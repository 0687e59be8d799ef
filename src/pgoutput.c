// SPDX-License-Identifier: Apache-2.0
/*
 * pgoutput decoder, protocol version 1 or 2 (streaming): each transaction's
 * messages are held (memory, then a file) until its Commit or Stream Commit
 * brings the end LSN, then parsed in place and handed out as events. See
 * pgoutput.h for the format.
 */
#include "pgoutput.h"

#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* µs from the Unix epoch to PostgreSQL's, 2000-01-01 00:00 UTC. */
#define PG_EPOCH_US (INT64_C(946684800) * 1000000)
/*
 * A held message: its length, XLogData start and (streamed) the xid it
 * carried, then its bytes (without that xid) and one spare byte.
 */
#define ENTRY_HDR (sizeof(uint32_t) + sizeof(uint64_t) + sizeof(uint32_t))
/* Bytes of the stdio buffer of a transaction's file (writing it and reading it back). */
#define PGO_FILE_BUFFER ((size_t)256 * 1024)
/* Memory kept for the next transaction after a larger one was handed out. */
#define BUF_KEEP ((size_t)256 * 1024)

enum state {
        IDLE,       /* between transactions */
        HOLDING,    /* after a Begin: messages are held */
        HANDING,    /* after its Commit: events are handed out */
        FAILED,     /* a malformed stream: nothing until pgo_reset() */
};

enum hand {
        HAND_BEGIN,    /* the BEGIN event is next */
        HAND_MEMORY,   /* held messages in memory */
        HAND_FILE,     /* held messages in the file */
        HAND_COMMIT,   /* the COMMIT event is next */
};

/* Held messages: in memory first, then (once the decoder's memory is spent) all in a file. */
struct store {
        char *buf;
        size_t len, cap;
        FILE *file;
        char *file_buf;             /* @file's stdio buffer, PGO_FILE_BUFFER bytes */
        uint64_t file_bytes;
};

/* Close @st's file, if any, and free its buffer (after: stdio writes from it at fclose()). */
static void close_file(struct store *st)
{
        if (st->file)
                fclose(st->file);
        free(st->file_buf);
        st->file = NULL;
        st->file_buf = NULL;
        st->file_bytes = 0;
}

/*
 * A run of a streamed transaction's held messages: from @off (bytes into
 * its store) on, the messages carried @xid, until one carried another. A
 * logical message carries the top-level xid whichever subtransaction wrote
 * it (reorderbuffer.c, ReorderBufferApplyMessage()), so it neither starts
 * nor ends a run. LSNs are the XLogData starts the messages came with: a
 * change's is the start of its WAL record.
 */
struct run {
        uint64_t off;
        uint64_t first_start;       /* LSN of its first message */
        uint64_t last_start;        /* LSN of its last message */
        uint32_t xid;
        bool first;                 /* the first run of @xid in the transaction */
        /*
         * A logical message whose place against this run's first change the
         * stream does not settle: @m_before, held after the previous run's last
         * message and written after that message's record began; @m_tie, held
         * after this run's first message at that message's LSN. A message is
         * queued at the end of its WAL record (decode.c), the start of the next
         * record, and the walsender merges the subtransactions' changes by LSN
         * in no set order on a tie (ReorderBufferIterTXNInit()).
         */
        bool m_before, m_tie;
};

/* Where each xid's first run is: open addressing on the xid (never 0), linear probing. */
struct xid_slot {
        uint32_t xid;               /* 0: free */
        uint32_t run;
};

/* A transaction streamed before its commit (protocol version 2): Stream Start to Stream Commit or Abort. */
struct stream {
        uint32_t xid;
        struct store st;
        struct run *runs;
        size_t nruns, runs_cap;
        struct xid_slot *firsts;
        size_t nfirsts;
        unsigned firsts_bits;       /* 1 << firsts_bits slots, or none */
        uint64_t m_since_max;       /* the largest LSN of the logical messages held since the last
                                     * message that carried an xid; 0: none */
};

struct pgo_decoder {
        size_t txn_memory;
        size_t mem_used;            /* bytes held in memory, over every store */
        enum state state;

        /* Relations, in the order first described; an OID at most once. */
        struct pgo_relation *rels[PGO_RELATIONS_MAX];
        size_t nrels;
        size_t last_rel;            /* index of the last one looked up */

        /* The transaction: its Begin, then its Commit (or its Stream Commit). */
        uint32_t xid;
        uint64_t final_lsn;
        int64_t begin_time_us;
        uint64_t end_lsn;
        int64_t commit_time_us;
        struct store cur;

        /* Streamed transactions not yet committed or aborted; @block: the one a Stream Start opened. */
        struct stream *streams;
        size_t nstreams, streams_cap;
        struct stream *block;

        /* Handing out. */
        enum hand hand;
        size_t off;                 /* next held message in cur.buf */
        bool pending;               /* a message outside a transaction: its event */
        struct pgo_event ev;
        char *rec;                  /* a message read back from the file, or copied to be parsed */
        size_t rec_cap;
        struct pgo_value *vals;     /* one per column of the widest relation seen */
        size_t vals_cap;

        char err[256];
};

static int fail(struct pgo_decoder *d, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Record why, put the decoder in FAILED (but for -EBUSY) and return @code. */
static int fail(struct pgo_decoder *d, int code, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(d->err, sizeof(d->err), fmt, ap);
        va_end(ap);
        if (code != -EBUSY)
                d->state = FAILED;
        return code;
}

/* A cursor over a message's bytes; every read checks the bound. */
struct rd {
        char *p, *end;
};

static bool rd_u8(struct rd *r, uint8_t *ret)
{
        if (r->end - r->p < 1)
                return false;
        *ret = (uint8_t)*r->p++;
        return true;
}

static bool rd_u16(struct rd *r, uint16_t *ret)
{
        const unsigned char *u = (const unsigned char *)r->p;

        if (r->end - r->p < 2)
                return false;
        *ret = (uint16_t)(u[0] << 8 | u[1]);
        r->p += 2;
        return true;
}

static bool rd_u32(struct rd *r, uint32_t *ret)
{
        const unsigned char *u = (const unsigned char *)r->p;

        if (r->end - r->p < 4)
                return false;
        *ret = (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
        r->p += 4;
        return true;
}

static bool rd_u64(struct rd *r, uint64_t *ret)
{
        uint32_t hi, lo;

        if (!rd_u32(r, &hi) || !rd_u32(r, &lo))
                return false;
        *ret = (uint64_t)hi << 32 | lo;
        return true;
}

static uint32_t be32(const char *p)
{
        const unsigned char *u = (const unsigned char *)p;

        return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

/* A String: NUL-terminated within the message. */
static bool rd_str(struct rd *r, const char **ret, size_t *ret_len)
{
        char *nul = memchr(r->p, '\0', (size_t)(r->end - r->p));

        if (!nul)
                return false;
        *ret = r->p;
        if (ret_len)
                *ret_len = (size_t)(nul - r->p);
        r->p = nul + 1;
        return true;
}

/* Int64 µs since 2000-01-01 as µs since the Unix epoch, or false when out of range. */
static bool pg_time(uint64_t raw, int64_t *ret_us)
{
        int64_t v = (int64_t)raw;

        if (v > INT64_MAX - PG_EPOCH_US)
                return false;
        *ret_us = v + PG_EPOCH_US;
        return true;
}

struct pgo_decoder *pgo_decoder_new(size_t txn_memory)
{
        struct pgo_decoder *d = calloc(1, sizeof(*d));

        if (d)
                d->txn_memory = txn_memory ? txn_memory : PGO_TXN_MEMORY_DEFAULT;
        return d;
}

/* Empty @st, keeping up to BUF_KEEP bytes of memory when @keep. */
static void drop_store(struct pgo_decoder *d, struct store *st, bool keep)
{
        close_file(st);
        d->mem_used -= st->len;
        st->len = 0;
        if (!keep || st->cap > BUF_KEEP) {
                free(st->buf);
                st->buf = NULL;
                st->cap = 0;
        }
}

static void drop_transaction(struct pgo_decoder *d)
{
        drop_store(d, &d->cur, true);
        d->off = 0;
        if (d->rec_cap > BUF_KEEP) {
                free(d->rec);
                d->rec = NULL;
                d->rec_cap = 0;
        }
}

/* Forget the streamed transaction @s (one of d->streams). */
static void drop_stream(struct pgo_decoder *d, struct stream *s)
{
        drop_store(d, &s->st, false);
        free(s->runs);
        free(s->firsts);
        if (d->block == s)
                d->block = NULL;
        *s = d->streams[--d->nstreams];
        if (d->block == &d->streams[d->nstreams])
                d->block = s;
}

void pgo_reset(struct pgo_decoder *d)
{
        drop_transaction(d);
        while (d->nstreams)
                drop_stream(d, &d->streams[0]);
        d->block = NULL;
        for (size_t i = 0; i < d->nrels; i++)
                free(d->rels[i]);
        d->nrels = d->last_rel = 0;
        d->pending = false;
        d->state = IDLE;
        d->err[0] = '\0';
}

struct pgo_decoder *pgo_decoder_free(struct pgo_decoder *d)
{
        if (!d)
                return NULL;
        pgo_reset(d);
        free(d->cur.buf);
        free(d->streams);
        free(d->rec);
        free(d->vals);
        free(d);
        return NULL;
}

bool pgo_in_transaction(const struct pgo_decoder *d)
{
        return d->state == HOLDING || d->state == HANDING;
}

bool pgo_ready(const struct pgo_decoder *d)
{
        return d->pending || d->state == HANDING;
}

uint64_t pgo_held_bytes(const struct pgo_decoder *d)
{
        uint64_t n = d->cur.len + d->cur.file_bytes;

        for (size_t i = 0; i < d->nstreams; i++)
                n += d->streams[i].st.len + d->streams[i].st.file_bytes;
        return n;
}

size_t pgo_streams(const struct pgo_decoder *d)
{
        return d->nstreams;
}

const char *pgo_error(const struct pgo_decoder *d)
{
        return d->err;
}

size_t pgo_relations(const struct pgo_decoder *d)
{
        return d->nrels;
}

static struct pgo_relation *find_rel(struct pgo_decoder *d, uint32_t oid, size_t *ret_index)
{
        if (d->last_rel < d->nrels && d->rels[d->last_rel]->oid == oid) {
                *ret_index = d->last_rel;
                return d->rels[d->last_rel];
        }
        for (size_t i = 0; i < d->nrels; i++) {
                if (d->rels[i]->oid == oid) {
                        d->last_rel = *ret_index = i;
                        return d->rels[i];
                }
        }
        return NULL;
}

/*
 * @arr (an array of @*cap elements of @size bytes, holding @n) with room for
 * one more: doubled when full, from @first elements. Returns the array, or
 * NULL when out of memory (@arr and @*cap kept).
 */
static void *grow_array(void *arr, size_t *cap, size_t n, size_t size, size_t first)
{
        size_t want = *cap ? *cap * 2 : first;
        void *na;

        if (n < *cap)
                return arr;
        na = realloc(arr, want * size);
        if (na)
                *cap = want;
        return na;
}

/* Room for @n more bytes in @*buf of capacity @*cap holding @len. */
static int reserve(char **buf, size_t *cap, size_t len, size_t n)
{
        size_t want;
        char *nb;

        if (n > SIZE_MAX - len)
                return -ENOMEM;
        if (len + n <= *cap)
                return 0;
        want = *cap ? *cap : 4096;
        while (want < len + n)
                want = want > SIZE_MAX / 2 ? len + n : want * 2;
        nb = realloc(*buf, want);
        if (!nb)
                return -ENOMEM;
        *buf = nb;
        *cap = want;
        return 0;
}

/*
 * A Relation message: the relation, its columns and their names in one
 * allocation, replacing an earlier one of the OID.
 */
static int parse_relation(struct pgo_decoder *d, struct rd *r)
{
        const char *schema, *name, *col;
        size_t schema_len, name_len, col_len, strings, i, at;
        uint32_t oid, typeoid, typmod;
        uint16_t ncols;
        uint8_t replident, flags;
        struct pgo_relation *rel, *old;
        struct pgo_column *cols;
        struct rd scan;
        char *s;

        if (!rd_u32(r, &oid) || !rd_str(r, &schema, &schema_len) || !rd_str(r, &name, &name_len) ||
            !rd_u8(r, &replident) || !rd_u16(r, &ncols))
                return fail(d, -EBADMSG, "truncated Relation message");
        if (ncols > PGO_COLUMNS_MAX)
                return fail(d, -ENOSPC, "Relation message of table \"%s\" (OID %u) with %u columns, more "
                            "than PostgreSQL allows (%d)", name, oid, ncols, PGO_COLUMNS_MAX);
        if (schema_len == 0)
                schema_len = strlen("pg_catalog");
        strings = schema_len + 1 + name_len + 1;
        scan = *r;
        for (i = 0; i < ncols; i++) {
                if (!rd_u8(&scan, &flags) || !rd_str(&scan, &col, &col_len) || !rd_u32(&scan, &typeoid) ||
                    !rd_u32(&scan, &typmod))
                        return fail(d, -EBADMSG, "truncated Relation message of table \"%s\" (OID %u)",
                                    name, oid);
                strings += col_len + 1;
        }
        if (scan.p != scan.end)
                return fail(d, -EBADMSG, "%zu bytes after the Relation message of table \"%s\" (OID %u)",
                            (size_t)(scan.end - scan.p), name, oid);
        old = find_rel(d, oid, &at);
        if (!old && d->nrels == PGO_RELATIONS_MAX)
                return fail(d, -ENOSPC, "a Relation message for table \"%s\" (OID %u), one more than the "
                            "%d relations the decoder keeps: the publication holds far more tables than "
                            "the relay publishes", name, oid, PGO_RELATIONS_MAX);
        rel = malloc(sizeof(*rel) + ncols * sizeof(*cols) + strings);
        if (!rel)
                return fail(d, -ENOMEM, "out of memory");
        cols = (struct pgo_column *)(rel + 1);
        s = (char *)(cols + ncols);
        rel->oid = oid;
        rel->replident = (char)replident;
        rel->ncolumns = ncols;
        rel->columns = cols;
        rel->schema = s;
        memcpy(s, schema[0] ? schema : "pg_catalog", schema_len + 1);
        s += schema_len + 1;
        rel->name = s;
        memcpy(s, name, name_len + 1);
        s += name_len + 1;
        for (i = 0; i < ncols; i++) {
                /* Checked by the scan above. */
                rd_u8(r, &flags);
                rd_str(r, &col, &col_len);
                rd_u32(r, &typeoid);
                rd_u32(r, &typmod);
                cols[i].key = flags & 1;
                cols[i].typeoid = typeoid;
                cols[i].typmod = (int32_t)typmod;
                cols[i].name = s;
                memcpy(s, col, col_len + 1);
                s += col_len + 1;
        }
        if (old) {
                free(old);
                d->rels[at] = rel;
        } else {
                d->rels[d->nrels++] = rel;
        }
        if (ncols > d->vals_cap) {
                struct pgo_value *nv = realloc(d->vals, ncols * sizeof(*nv));

                if (!nv)
                        return fail(d, -ENOMEM, "out of memory");
                d->vals = nv;
                d->vals_cap = ncols;
        }
        return 0;
}

/*
 * A TupleData of relation @rel at @r. With @keep, its values go to d->vals,
 * each NUL-terminated in place once the whole tuple is read (the byte after
 * a value is the next column's kind, or the spare byte after the message);
 * @unchanged_ok allows 'u'.
 */
static int parse_tuple(struct pgo_decoder *d, struct rd *r, const struct pgo_relation *rel, bool keep,
                       bool unchanged_ok)
{
        uint16_t ncols;
        uint32_t len;
        uint8_t kind;

        if (!rd_u16(r, &ncols))
                return fail(d, -EBADMSG, "truncated tuple of table \"%s\".\"%s\"", rel->schema, rel->name);
        if (ncols != rel->ncolumns)
                return fail(d, -EBADMSG, "tuple of %u columns for table \"%s\".\"%s\", whose Relation "
                            "message has %zu", ncols, rel->schema, rel->name, rel->ncolumns);
        for (size_t i = 0; i < ncols; i++) {
                struct pgo_value v = {0};

                if (!rd_u8(r, &kind))
                        return fail(d, -EBADMSG, "truncated tuple of table \"%s\".\"%s\"", rel->schema,
                                    rel->name);
                switch (kind) {
                case 'n':
                        v.is_null = true;
                        break;
                case 'u':
                        if (!unchanged_ok)
                                return fail(d, -EBADMSG, "unchanged TOASTed value of column \"%s\" of "
                                            "table \"%s\".\"%s\" outside an UPDATE's new row",
                                            rel->columns[i].name, rel->schema, rel->name);
                        v.unchanged = true;
                        break;
                case 't':
                        if (!rd_u32(r, &len) || (uint64_t)(r->end - r->p) < len)
                                return fail(d, -EBADMSG, "truncated value of column \"%s\" of table "
                                            "\"%s\".\"%s\"", rel->columns[i].name, rel->schema, rel->name);
                        if (memchr(r->p, '\0', len))
                                return fail(d, -EBADMSG, "value of column \"%s\" of table \"%s\".\"%s\" "
                                            "holds a NUL byte, which no PostgreSQL text output does",
                                            rel->columns[i].name, rel->schema, rel->name);
                        v.ptr = r->p;
                        v.len = len;
                        r->p += len;
                        break;
                case 'b':
                        return fail(d, -EBADMSG, "binary value of column \"%s\" of table \"%s\".\"%s\": "
                                    "the relay asks for text values", rel->columns[i].name, rel->schema,
                                    rel->name);
                default:
                        return fail(d, -EBADMSG, "unknown value kind 0x%02x in column \"%s\" of table "
                                    "\"%s\".\"%s\"", kind, rel->columns[i].name, rel->schema, rel->name);
                }
                if (keep)
                        d->vals[i] = v;
        }
        if (keep)
                for (size_t i = 0; i < ncols; i++)
                        if (d->vals[i].ptr)
                                ((char *)d->vals[i].ptr)[d->vals[i].len] = '\0';
        return 0;
}

/* The relation of a change, described earlier in the stream. */
static const struct pgo_relation *change_rel(struct pgo_decoder *d, struct rd *r, char type)
{
        uint32_t oid;
        size_t at;
        const struct pgo_relation *rel;

        if (!rd_u32(r, &oid)) {
                fail(d, -EBADMSG, "truncated '%c' message", type);
                return NULL;
        }
        rel = find_rel(d, oid, &at);
        if (!rel)
                fail(d, -EBADMSG, "'%c' message for relation OID %u, which no Relation message described",
                     type, oid);
        return rel;
}

/*
 * Parse the message @p of @len bytes (p[len] is writable), met inside a
 * transaction when @in_txn, into @ev. Returns 1 for an event, 0 for a message
 * that is only applied, or a negative errno (recorded).
 */
static int parse(struct pgo_decoder *d, char *p, size_t len, uint64_t data_start, bool in_txn,
                 struct pgo_event *ev)
{
        struct rd r = {p + 1, p + len};
        const struct pgo_relation *rel;
        const char *s;
        uint64_t u64;
        uint32_t u32 = 0, n;
        uint8_t u8;
        int ret;

        if (len == 0)
                return fail(d, -EBADMSG, "empty message");
        memset(ev, 0, sizeof(*ev));
        ev->lsn = data_start;
        switch (p[0]) {
        case 'R':
                ret = parse_relation(d, &r);
                return ret < 0 ? ret : 0;
        case 'Y':
                if (!rd_u32(&r, &u32) || !rd_str(&r, &s, NULL) || !rd_str(&r, &s, NULL))
                        return fail(d, -EBADMSG, "truncated Type message");
                break;
        case 'O':
                if (!in_txn)
                        return fail(d, -EBADMSG, "Origin message outside a transaction");
                if (!rd_u64(&r, &u64) || !rd_str(&r, &s, NULL))
                        return fail(d, -EBADMSG, "truncated Origin message");
                break;
        case 'I':
                if (!in_txn)
                        return fail(d, -EBADMSG, "Insert outside a transaction");
                rel = change_rel(d, &r, 'I');
                if (!rel)
                        return -EBADMSG;
                if (!rd_u8(&r, &u8) || u8 != 'N')
                        return fail(d, -EBADMSG, "Insert of table \"%s\".\"%s\" without its new row",
                                    rel->schema, rel->name);
                ret = parse_tuple(d, &r, rel, true, false);
                if (ret < 0)
                        return ret;
                ev->kind = PGO_INSERT;
                ev->rel = rel;
                ev->nvalues = rel->ncolumns;
                ev->values = d->vals;
                break;
        case 'U':
                if (!in_txn)
                        return fail(d, -EBADMSG, "Update outside a transaction");
                rel = change_rel(d, &r, 'U');
                if (!rel)
                        return -EBADMSG;
                if (!rd_u8(&r, &u8))
                        return fail(d, -EBADMSG, "truncated Update of table \"%s\".\"%s\"", rel->schema,
                                    rel->name);
                if (u8 == 'K' || u8 == 'O') {
                        ret = parse_tuple(d, &r, rel, false, true);
                        if (ret < 0)
                                return ret;
                        if (!rd_u8(&r, &u8))
                                return fail(d, -EBADMSG, "truncated Update of table \"%s\".\"%s\"",
                                            rel->schema, rel->name);
                }
                if (u8 != 'N')
                        return fail(d, -EBADMSG, "Update of table \"%s\".\"%s\" without its new row",
                                    rel->schema, rel->name);
                ret = parse_tuple(d, &r, rel, true, true);
                if (ret < 0)
                        return ret;
                ev->kind = PGO_UPDATE;
                ev->rel = rel;
                ev->nvalues = rel->ncolumns;
                ev->values = d->vals;
                break;
        case 'D':
                if (!in_txn)
                        return fail(d, -EBADMSG, "Delete outside a transaction");
                rel = change_rel(d, &r, 'D');
                if (!rel)
                        return -EBADMSG;
                if (!rd_u8(&r, &u8) || (u8 != 'K' && u8 != 'O'))
                        return fail(d, -EBADMSG, "Delete of table \"%s\".\"%s\" without its old key",
                                    rel->schema, rel->name);
                ret = parse_tuple(d, &r, rel, false, true);
                if (ret < 0)
                        return ret;
                ev->kind = PGO_DELETE;
                ev->rel = rel;
                break;
        case 'T':
                if (!in_txn)
                        return fail(d, -EBADMSG, "Truncate outside a transaction");
                if (!rd_u32(&r, &n) || !rd_u8(&r, &u8) || (uint64_t)(r.end - r.p) != (uint64_t)n * 4)
                        return fail(d, -EBADMSG, "malformed Truncate message");
                ev->kind = PGO_TRUNCATE;
                for (uint32_t i = 0; i < n; i++) {
                        size_t at;

                        rd_u32(&r, &u32);
                        if (!ev->rel)
                                ev->rel = find_rel(d, u32, &at);
                }
                break;
        case 'M':
                if (!rd_u8(&r, &u8) || !rd_u64(&r, &u64) || !rd_str(&r, &ev->prefix, NULL) ||
                    !rd_u32(&r, &n) || (uint64_t)(r.end - r.p) < n)
                        return fail(d, -EBADMSG, "truncated logical message");
                ev->kind = PGO_MESSAGE;
                ev->transactional = u8 & 1;
                if (ev->transactional != in_txn)
                        return fail(d, -EBADMSG, "%s logical message at LSN %X/%X %s a transaction",
                                    ev->transactional ? "transactional" : "non-transactional",
                                    (unsigned)(u64 >> 32), (unsigned)u64,
                                    in_txn ? "inside" : "outside");
                ev->lsn = u64;
                ev->content = r.p;
                ev->content_len = n;
                r.p += n;
                if (r.p != r.end)
                        break;  /* trailing bytes: refused below, before the terminator is written */
                p[len] = '\0';
                break;
        case 'B':
        case 'C':
                return fail(d, -EBADMSG, "'%c' message where none belongs", p[0]);
        case 'S': case 'E': case 'c': case 'A':
                return fail(d, -EBADMSG, "'%c' message of streaming where none belongs", p[0]);
        case 'b': case 'P': case 'K': case 'r': case 'p':
                return fail(d, -EBADMSG, "'%c' message of two-phase commit, which the relay does not ask "
                            "for", p[0]);
        default:
                return fail(d, -EBADMSG, "unknown message type 0x%02x", (unsigned char)p[0]);
        }
        if (r.p != r.end)
                return fail(d, -EBADMSG, "%zu bytes after a '%c' message", (size_t)(r.end - r.p), p[0]);
        if (p[0] == 'Y' || p[0] == 'O')
                return 0;
        if (in_txn) {
                ev->xid = d->xid;
                ev->commit_time_us = d->commit_time_us;
        }
        return 1;
}

/*
 * Hold a message in @st: its first byte (the type), then the bytes from
 * @data + 1 + @skip on (a streamed message's xid is left out); @xid is the
 * xid it carried (0 for none). In memory while the decoder's memory has
 * room, else (and from then on) in the store's file. Returns 0, or -EBADMSG,
 * -ENOMEM, -EIO (recorded).
 */
static int hold(struct pgo_decoder *d, struct store *st, const char *data, size_t len, size_t skip,
                uint64_t data_start, uint32_t xid)
{
        size_t mlen = len - skip;
        uint32_t len32 = (uint32_t)mlen;
        size_t need = ENTRY_HDR + mlen + 1;
        char hdr[ENTRY_HDR];

        if (len > UINT32_MAX - 1)
                return fail(d, -EBADMSG, "a message of %zu bytes", len);
        memcpy(hdr, &len32, sizeof(len32));
        memcpy(hdr + sizeof(len32), &data_start, sizeof(data_start));
        memcpy(hdr + sizeof(len32) + sizeof(data_start), &xid, sizeof(xid));
        /* A streamed transaction leaves half of it to the transactions committed meanwhile. */
        if (!st->file && d->mem_used + need <= (st == &d->cur ? d->txn_memory : d->txn_memory / 2)) {
                if (reserve(&st->buf, &st->cap, st->len, need) < 0)
                        return fail(d, -ENOMEM, "out of memory");
                memcpy(st->buf + st->len, hdr, ENTRY_HDR);
                st->buf[st->len + ENTRY_HDR] = data[0];
                memcpy(st->buf + st->len + ENTRY_HDR + 1, data + 1 + skip, mlen - 1);
                st->len += need;
                d->mem_used += need;
                return 0;
        }
        if (!st->file) {
                const char *dir = getenv("TMPDIR");
                char path[4096];
                int fd;

                snprintf(path, sizeof(path), "%s/outbox-relay-txn-XXXXXX", dir && *dir ? dir : "/tmp");
                fd = mkstemp(path);
                if (fd < 0)
                        return fail(d, -EIO, "cannot create a file for a transaction larger than %zu bytes "
                                    "in %s: %s", d->txn_memory, dir && *dir ? dir : "/tmp", strerror(errno));
                unlink(path);
                st->file = fdopen(fd, "w+b");
                if (!st->file) {
                        close(fd);
                        return fail(d, -EIO, "cannot open the transaction's file: %s", strerror(errno));
                }
                /*
                 * stdio's default buffer is st_blksize (4 KiB): one write(2) per 4 KiB
                 * of a transaction of hundreds of MB, and as many read(2)s handing it out.
                 * glibc ignores setvbuf()'s size without a buffer: it is given one.
                 */
                st->file_buf = malloc(PGO_FILE_BUFFER);
                if (st->file_buf)
                        setvbuf(st->file, st->file_buf, _IOFBF, PGO_FILE_BUFFER);
        }
        if (fwrite(hdr, ENTRY_HDR, 1, st->file) != 1 || fwrite(data, 1, 1, st->file) != 1 ||
            (mlen > 1 && fwrite(data + 1 + skip, mlen - 1, 1, st->file) != 1))
                return fail(d, -EIO, "cannot write a transaction of %llu bytes to its file: %s",
                            (unsigned long long)(st->len + st->file_bytes), strerror(errno));
        st->file_bytes += ENTRY_HDR + mlen;
        return 0;
}

/* Where the next message held in @st goes: bytes into the store, memory first. */
static uint64_t store_end(const struct store *st)
{
        return st->len + st->file_bytes;
}

/* Drop what @st holds from @pos (a store_end() of earlier) on. Returns 0 or -EIO (recorded). */
static int store_truncate(struct pgo_decoder *d, struct store *st, uint64_t pos)
{
        if (pos <= st->len) {
                close_file(st);
                d->mem_used -= st->len - (size_t)pos;
                st->len = (size_t)pos;
                return 0;
        }
        pos -= st->len;
        if (fflush(st->file) != 0 || ftruncate(fileno(st->file), (off_t)pos) != 0 ||
            fseeko(st->file, (off_t)pos, SEEK_SET) != 0)
                return fail(d, -EIO, "cannot cut a streamed transaction's file back to %llu bytes: %s",
                            (unsigned long long)pos, strerror(errno));
        st->file_bytes = pos;
        return 0;
}

static int begin(struct pgo_decoder *d, const char *data, size_t len)
{
        struct rd r = {(char *)data + 1, (char *)data + len};
        uint64_t lsn, ts;
        uint32_t xid;

        if (d->state != IDLE)
                return fail(d, -EBADMSG, "Begin inside transaction %u", d->xid);
        if (d->block)
                return fail(d, -EBADMSG, "Begin inside the stream of transaction %u", d->block->xid);
        if (!rd_u64(&r, &lsn) || !rd_u64(&r, &ts) || !rd_u32(&r, &xid) || r.p != r.end)
                return fail(d, -EBADMSG, "malformed Begin message of %zu bytes", len);
        if (!pg_time(ts, &d->begin_time_us))
                return fail(d, -EBADMSG, "Begin of transaction %u with a timestamp out of range", xid);
        for (size_t i = 0; i < d->nstreams; i++)
                if (d->streams[i].xid == xid)
                        return fail(d, -EBADMSG, "Begin of transaction %u, whose stream is open", xid);
        d->xid = xid;
        d->final_lsn = lsn;
        d->off = 0;
        d->state = HOLDING;
        return 0;
}

/* The transaction in d->cur is complete: hand it out. Returns 0 or -EIO (recorded). */
static int hand_out(struct pgo_decoder *d)
{
        if (d->cur.file && fflush(d->cur.file) != 0)
                return fail(d, -EIO, "cannot write transaction %u to its file: %s", d->xid, strerror(errno));
        if (d->cur.file)
                rewind(d->cur.file);
        d->state = HANDING;
        d->hand = HAND_BEGIN;
        d->off = 0;
        return 0;
}

static int commit(struct pgo_decoder *d, const char *data, size_t len)
{
        struct rd r = {(char *)data + 1, (char *)data + len};
        uint64_t commit_lsn, end_lsn, ts;
        uint8_t flags;

        if (d->state != HOLDING)
                return fail(d, -EBADMSG, "Commit outside a transaction");
        if (!rd_u8(&r, &flags) || !rd_u64(&r, &commit_lsn) || !rd_u64(&r, &end_lsn) || !rd_u64(&r, &ts) ||
            r.p != r.end)
                return fail(d, -EBADMSG, "malformed Commit message of %zu bytes", len);
        if (flags != 0)
                return fail(d, -EBADMSG, "Commit of transaction %u with flags 0x%02x", d->xid, flags);
        if (commit_lsn != d->final_lsn || end_lsn <= commit_lsn)
                return fail(d, -EBADMSG, "Commit of transaction %u at LSN %X/%X ending at %X/%X does not "
                            "match its Begin (LSN %X/%X)", d->xid, (unsigned)(commit_lsn >> 32),
                            (unsigned)commit_lsn, (unsigned)(end_lsn >> 32), (unsigned)end_lsn,
                            (unsigned)(d->final_lsn >> 32), (unsigned)d->final_lsn);
        if (!pg_time(ts, &d->commit_time_us))
                return fail(d, -EBADMSG, "Commit of transaction %u with a timestamp out of range", d->xid);
        d->end_lsn = end_lsn;
        return hand_out(d);
}

static struct stream *find_stream(struct pgo_decoder *d, uint32_t xid)
{
        for (size_t i = 0; i < d->nstreams; i++)
                if (d->streams[i].xid == xid)
                        return &d->streams[i];
        return NULL;
}

/* Stream Start: Int32 xid, Int8 1 for the transaction's first stream, else 0. */
static int stream_start(struct pgo_decoder *d, const char *data, size_t len)
{
        struct rd r = {(char *)data + 1, (char *)data + len};
        struct stream *s, *ns;
        uint32_t xid;
        uint8_t first;

        if (!rd_u32(&r, &xid) || !rd_u8(&r, &first) || r.p != r.end || first > 1 || xid == 0)
                return fail(d, -EBADMSG, "malformed Stream Start message of %zu bytes", len);
        if (d->state != IDLE)
                return fail(d, -EBADMSG, "Stream Start of transaction %u inside transaction %u", xid, d->xid);
        if (d->block)
                return fail(d, -EBADMSG, "Stream Start of transaction %u inside the stream of transaction %u",
                            xid, d->block->xid);
        s = find_stream(d, xid);
        if (first && s)
                return fail(d, -EBADMSG, "a first Stream Start of transaction %u, whose stream is open", xid);
        if (!first && !s)
                return fail(d, -EBADMSG, "a Stream Start of transaction %u continuing a stream never begun: "
                            "what came before it is missing", xid);
        if (!s) {
                ns = grow_array(d->streams, &d->streams_cap, d->nstreams, sizeof(*ns), 4);
                if (!ns)
                        return fail(d, -ENOMEM, "out of memory");
                d->streams = ns;
                s = &d->streams[d->nstreams++];
                *s = (struct stream){.xid = xid};
        }
        d->block = s;
        return 0;
}

static size_t firsts_home(const struct stream *s, uint32_t xid)
{
        return (uint32_t)(xid * UINT32_C(2654435761)) >> (32 - s->firsts_bits);
}

/* The slot of @xid's first run, or NULL. */
static struct xid_slot *firsts_find(const struct stream *s, uint32_t xid)
{
        size_t mask;

        if (!s->firsts_bits)
                return NULL;
        mask = ((size_t)1 << s->firsts_bits) - 1;
        for (size_t i = firsts_home(s, xid);; i = (i + 1) & mask) {
                if (s->firsts[i].xid == xid)
                        return &s->firsts[i];
                if (s->firsts[i].xid == 0)
                        return NULL;
        }
}

static void firsts_insert(struct stream *s, uint32_t xid, uint32_t run)
{
        size_t mask = ((size_t)1 << s->firsts_bits) - 1, i = firsts_home(s, xid);

        while (s->firsts[i].xid)
                i = (i + 1) & mask;
        s->firsts[i] = (struct xid_slot){xid, run};
        s->nfirsts++;
}

/* Remember @xid's first run at @run (@xid not there yet). Returns 0 or -ENOMEM. */
static int firsts_put(struct stream *s, uint32_t xid, uint32_t run)
{
        if ((s->nfirsts + 1) * 2 > ((size_t)1 << s->firsts_bits) || !s->firsts_bits) {
                unsigned bits = s->firsts_bits ? s->firsts_bits + 1 : 4;
                struct xid_slot *old = s->firsts;
                size_t n = s->firsts_bits ? (size_t)1 << s->firsts_bits : 0;

                s->firsts = calloc((size_t)1 << bits, sizeof(*s->firsts));
                if (!s->firsts) {
                        s->firsts = old;
                        return -ENOMEM;
                }
                s->firsts_bits = bits;
                s->nfirsts = 0;
                for (size_t i = 0; i < n; i++)
                        if (old[i].xid)
                                firsts_insert(s, old[i].xid, old[i].run);
                free(old);
        }
        firsts_insert(s, xid, run);
        return 0;
}

/* Forget @xid's first run (backward-shift deletion: no tombstones). */
static void firsts_del(struct stream *s, uint32_t xid)
{
        struct xid_slot *slot = firsts_find(s, xid);
        size_t mask, i, j;

        if (!slot)
                return;
        mask = ((size_t)1 << s->firsts_bits) - 1;
        i = (size_t)(slot - s->firsts);
        for (j = (i + 1) & mask; s->firsts[j].xid; j = (j + 1) & mask) {
                size_t k = firsts_home(s, s->firsts[j].xid);

                /* Move it back unless its home lies cyclically in (i, j]. */
                if (i <= j ? (k <= i || k > j) : (k <= i && k > j)) {
                        s->firsts[i] = s->firsts[j];
                        i = j;
                }
        }
        s->firsts[i].xid = 0;
        s->nfirsts--;
}

/*
 * A message inside a stream block: every change, Relation, Type and
 * logical message carries an Int32 xid after its type (the subtransaction's
 * for a change, Relation and Type; the top-level one's for a logical
 * message), an Origin none. Held in the stream's store without it; runs
 * and logical messages noted for stream_abort().
 */
static int stream_hold(struct pgo_decoder *d, const char *data, size_t len, uint64_t data_start)
{
        struct stream *s = d->block;
        struct run *last;
        uint64_t m_lsn;
        uint32_t xid = 0;
        int ret;

        switch (data[0]) {
        case 'O':
                return hold(d, &s->st, data, len, 0, data_start, 0);
        case 'R': case 'Y': case 'I': case 'U': case 'D': case 'T': case 'M':
                break;
        case 'S': case 'c': case 'A':
                return fail(d, -EBADMSG, "'%c' message inside the stream of transaction %u", data[0], s->xid);
        default:
                /* Parsed as it is: refused for what it is. */
                return hold(d, &s->st, data, len, 0, data_start, 0);
        }
        if (len < 5 || !(xid = (uint32_t)be32(data + 1)))
                return fail(d, -EBADMSG, "'%c' message inside the stream of transaction %u without its xid",
                            data[0], s->xid);
        last = s->nruns ? &s->runs[s->nruns - 1] : NULL;
        if (data[0] == 'M') {
                /* 'M', xid, Int8 flags, Int64 the message's LSN (the end of its WAL record), ... */
                if (len < 14)
                        return fail(d, -EBADMSG, "truncated logical message inside the stream of "
                                    "transaction %u", s->xid);
                m_lsn = (uint64_t)be32(data + 6) << 32 | be32(data + 10);
                ret = hold(d, &s->st, data, len, 4, data_start, xid);
                if (ret < 0)
                        return ret;
                if (m_lsn > s->m_since_max)
                        s->m_since_max = m_lsn;
                if (last && m_lsn <= last->first_start)
                        last->m_tie = true;
                return 0;
        }
        if (!last || last->xid != xid) {
                uint64_t prev_last = last ? last->last_start : 0;
                bool first = !firsts_find(s, xid);
                struct run *nr;

                if (s->nruns == PGO_STREAM_RUNS_MAX)
                        return fail(d, -ENOTSUP, "transaction %u changed tables in more than %d turns "
                                    "between its subtransactions while it was streamed", s->xid,
                                    PGO_STREAM_RUNS_MAX);
                nr = grow_array(s->runs, &s->runs_cap, s->nruns, sizeof(*nr), 16);
                if (!nr)
                        return fail(d, -ENOMEM, "out of memory");
                s->runs = nr;
                if (first && firsts_put(s, xid, (uint32_t)s->nruns) < 0)
                        return fail(d, -ENOMEM, "out of memory");
                s->runs[s->nruns++] = (struct run){
                        .off = store_end(&s->st), .first_start = data_start, .last_start = data_start,
                        .xid = xid, .first = first, .m_before = s->m_since_max > prev_last,
                };
        } else {
                last->last_start = data_start;
        }
        s->m_since_max = 0;
        return hold(d, &s->st, data, len, 4, data_start, xid);
}

/* Stream Stop: no fields. */
static int stream_stop(struct pgo_decoder *d, size_t len)
{
        if (len != 1)
                return fail(d, -EBADMSG, "malformed Stream Stop message of %zu bytes", len);
        if (!d->block)
                return fail(d, -EBADMSG, "Stream Stop outside a stream");
        d->block = NULL;
        return 0;
}

/*
 * Stream Commit: Int32 xid, Int8 flags (0), Int64 commit LSN, Int64 end LSN,
 * Int64 commit timestamp. The stream becomes the transaction handed out.
 */
static int stream_commit(struct pgo_decoder *d, const char *data, size_t len)
{
        struct rd r = {(char *)data + 1, (char *)data + len};
        uint64_t commit_lsn, end_lsn, ts;
        struct stream *s;
        uint32_t xid;
        uint8_t flags;

        if (!rd_u32(&r, &xid) || !rd_u8(&r, &flags) || !rd_u64(&r, &commit_lsn) || !rd_u64(&r, &end_lsn) ||
            !rd_u64(&r, &ts) || r.p != r.end)
                return fail(d, -EBADMSG, "malformed Stream Commit message of %zu bytes", len);
        if (d->state != IDLE || d->block)
                return fail(d, -EBADMSG, "Stream Commit of transaction %u inside a transaction or stream", xid);
        s = find_stream(d, xid);
        if (!s)
                return fail(d, -EBADMSG, "Stream Commit of transaction %u, whose stream never began: its "
                            "changes are missing", xid);
        if (flags != 0)
                return fail(d, -EBADMSG, "Stream Commit of transaction %u with flags 0x%02x", xid, flags);
        if (end_lsn <= commit_lsn)
                return fail(d, -EBADMSG, "Stream Commit of transaction %u at LSN %X/%X ending at %X/%X", xid,
                            (unsigned)(commit_lsn >> 32), (unsigned)commit_lsn, (unsigned)(end_lsn >> 32),
                            (unsigned)end_lsn);
        if (!pg_time(ts, &d->commit_time_us))
                return fail(d, -EBADMSG, "Stream Commit of transaction %u with a timestamp out of range", xid);
        d->xid = xid;
        d->final_lsn = commit_lsn;
        d->end_lsn = end_lsn;
        d->begin_time_us = d->commit_time_us;
        /* The stream's store becomes the transaction's; d->cur is empty between transactions. */
        drop_store(d, &d->cur, false);
        d->cur = s->st;
        s->st = (struct store){0};
        drop_stream(d, s);
        return hand_out(d);
}

/*
 * Stream Abort: Int32 xid, Int32 subtransaction xid (the xid again for the
 * whole transaction). A subtransaction's abort takes back every message
 * held since its first (as PostgreSQL's apply worker truncates its spool
 * file at the subtransaction's first change, worker.c subxact_info_add()
 * and stream_abort_internal()): a session works in its innermost
 * subtransaction, so what followed until the abort is its own or its
 * children's, whose aborts came first (decode.c DecodeAbort()). A logical
 * message carries the top-level xid, so one next to that first change
 * (struct run's @m_before, @m_tie), or after the last change held when none
 * of the subtransaction's is, may be its own or not, and nothing in the
 * stream tells: -ENOTSUP.
 */
static int stream_abort(struct pgo_decoder *d, const char *data, size_t len)
{
        struct rd r = {(char *)data + 1, (char *)data + len};
        struct xid_slot *slot;
        struct stream *s;
        uint32_t xid, subxid;
        struct run *run;
        size_t k;

        if (!rd_u32(&r, &xid) || !rd_u32(&r, &subxid) || r.p != r.end)
                return fail(d, -EBADMSG, "malformed Stream Abort message of %zu bytes", len);
        if (d->state != IDLE || d->block)
                return fail(d, -EBADMSG, "Stream Abort of transaction %u inside a transaction or stream", xid);
        s = find_stream(d, xid);
        if (!s)
                return 0;  /* nothing of it held */
        if (subxid == xid) {
                drop_stream(d, s);
                return 0;
        }
        slot = firsts_find(s, subxid);
        if (!slot) {
                /* None of its changes held (or taken back with a child's), but maybe its messages. */
                if (s->m_since_max > (s->nruns ? s->runs[s->nruns - 1].last_start : 0))
                        return fail(d, -ENOTSUP, "subtransaction %u of streamed transaction %u was rolled "
                                    "back, and logical messages came after the last change held: the "
                                    "stream does not tell whether the rollback took them back", subxid, xid);
                return 0;
        }
        k = slot->run;
        run = &s->runs[k];
        if (run->m_before || run->m_tie)
                return fail(d, -ENOTSUP, "subtransaction %u of streamed transaction %u was rolled back, and "
                            "a logical message came next to its first change: the stream does not tell "
                            "whether the rollback took it back too", subxid, xid);
        if (store_truncate(d, &s->st, run->off) < 0)
                return -EIO;
        while (s->nruns > k) {
                run = &s->runs[--s->nruns];
                if (run->first)
                        firsts_del(s, run->xid);
        }
        s->m_since_max = 0;
        return 0;
}

int pgo_decode(struct pgo_decoder *d, const char *data, size_t len, uint64_t data_start)
{
        int ret;

        if (d->state == FAILED)
                return -EBADMSG;
        if (d->state == HANDING || d->pending)
                return fail(d, -EBUSY, "events of an earlier message are still to be taken");
        d->err[0] = '\0';
        if (len == 0)
                return fail(d, -EBADMSG, "empty message");
        switch (data[0]) {
        case 'B':
                return begin(d, data, len);
        case 'C':
                return commit(d, data, len);
        case 'S':
                return stream_start(d, data, len);
        case 'E':
                return stream_stop(d, len);
        case 'c':
                return stream_commit(d, data, len);
        case 'A':
                return stream_abort(d, data, len);
        default:
                break;
        }
        if (d->block)
                return stream_hold(d, data, len, data_start);
        if (d->state == HOLDING)
                return hold(d, &d->cur, data, len, 0, data_start, 0);
        /* Outside a transaction: parse a copy now (values are terminated in place). */
        if (reserve(&d->rec, &d->rec_cap, 0, len + 1) < 0)
                return fail(d, -ENOMEM, "out of memory");
        memcpy(d->rec, data, len);
        ret = parse(d, d->rec, len, data_start, false, &d->ev);
        if (ret < 0)
                return ret;
        d->pending = ret == 1;
        return 0;
}

/* The next held message from the file into d->rec. Returns 1, 0 at the end, or -EIO. */
static int read_held(struct pgo_decoder *d, size_t *ret_len, uint64_t *ret_start)
{
        uint32_t len;

        uint32_t xid;

        if (fread(&len, sizeof(len), 1, d->cur.file) != 1) {
                if (feof(d->cur.file))
                        return 0;
                return fail(d, -EIO, "cannot read transaction %u back from its file: %s", d->xid,
                            strerror(errno));
        }
        if (fread(ret_start, sizeof(*ret_start), 1, d->cur.file) != 1 ||
            fread(&xid, sizeof(xid), 1, d->cur.file) != 1 ||
            reserve(&d->rec, &d->rec_cap, 0, (size_t)len + 1) < 0 ||
            (len && fread(d->rec, len, 1, d->cur.file) != 1))
                return fail(d, -EIO, "cannot read transaction %u back from its file", d->xid);
        *ret_len = len;
        return 1;
}

void pgo_unget(struct pgo_decoder *d, const struct pgo_event *ev)
{
        assert(!d->pending);
        d->ev = *ev;
        d->pending = true;
}

int pgo_next(struct pgo_decoder *d, struct pgo_event *ret_ev)
{
        int ret;

        if (d->state == FAILED)
                return -EBADMSG;
        if (d->pending) {
                d->pending = false;
                *ret_ev = d->ev;
                return 1;
        }
        if (d->state != HANDING)
                return 0;
        for (;;) {
                uint32_t len32;
                uint64_t start = 0;
                size_t len = 0;
                char *msg;

                switch (d->hand) {
                case HAND_BEGIN:
                        d->hand = HAND_MEMORY;
                        *ret_ev = (struct pgo_event){.kind = PGO_BEGIN, .xid = d->xid, .lsn = d->final_lsn,
                                                     .end_lsn = d->end_lsn,
                                                     .commit_time_us = d->begin_time_us};
                        return 1;
                case HAND_MEMORY:
                        if (d->off >= d->cur.len) {
                                d->hand = d->cur.file ? HAND_FILE : HAND_COMMIT;
                                continue;
                        }
                        memcpy(&len32, d->cur.buf + d->off, sizeof(len32));
                        memcpy(&start, d->cur.buf + d->off + sizeof(len32), sizeof(start));
                        msg = d->cur.buf + d->off + ENTRY_HDR;
                        len = len32;
                        d->off += ENTRY_HDR + len + 1;
                        break;
                case HAND_FILE:
                        ret = read_held(d, &len, &start);
                        if (ret < 0)
                                return ret;
                        if (ret == 0) {
                                d->hand = HAND_COMMIT;
                                continue;
                        }
                        msg = d->rec;
                        break;
                case HAND_COMMIT:
                default:
                        *ret_ev = (struct pgo_event){.kind = PGO_COMMIT, .xid = d->xid, .lsn = d->final_lsn,
                                                     .end_lsn = d->end_lsn,
                                                     .commit_time_us = d->commit_time_us};
                        drop_transaction(d);
                        d->state = IDLE;
                        return 1;
                }
                ret = parse(d, msg, len, start, true, ret_ev);
                if (ret != 0)
                        return ret;
        }
}
