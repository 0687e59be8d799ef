/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decoder for pgoutput, PostgreSQL's built-in logical replication output
 * plugin, protocol version 2 with text values: one message per XLogData, as
 * requested with proto_version '2', streaming 'on', publication_names and
 * messages 'true', without binary or two_phase (version 1, without
 * streaming, is decoded alike). Sources: PostgreSQL documentation "Logical
 * Replication Message Formats" (protocol-logicalrep-message-formats.html)
 * and src/backend/replication/logical/proto.c (logicalrep_write_*), with
 * src/backend/replication/pgoutput/pgoutput.c and
 * src/backend/replication/logical/reorderbuffer.c for when each is sent.
 *
 * Integers are big-endian; String is NUL-terminated (server encoding, UTF-8
 * here); LSNs are Int64; timestamps are Int64 microseconds since 2000-01-01
 * 00:00 UTC.
 *
 *   Begin     'B' Int64 final LSN (the commit record's LSN), Int64 commit
 *                 timestamp, Int32 xid
 *   Commit    'C' Int8 flags (0), Int64 commit LSN, Int64 end LSN (just past
 *                 the commit record), Int64 commit timestamp
 *   Origin    'O' Int64 the origin's commit LSN, String origin name
 *   Relation  'R' Int32 relation OID, String namespace ("" for pg_catalog),
 *                 String relation name, Int8 replica identity ('d', 'n',
 *                 'f', 'i'), Int16 number of columns, then per column:
 *                 Int8 flags (1: part of the key), String name, Int32 type
 *                 OID (pg_attribute.atttypid: a domain's own OID), Int32
 *                 atttypmod
 *   Type      'Y' Int32 type OID, String namespace, String type name
 *   Insert    'I' Int32 relation OID, Byte1 'N', TupleData (the new row)
 *   Update    'U' Int32 relation OID, [Byte1 'K' or 'O', TupleData (old key
 *                 or row)], Byte1 'N', TupleData (the new row)
 *   Delete    'D' Int32 relation OID, Byte1 'K' or 'O', TupleData
 *   Truncate  'T' Int32 number of relations, Int8 flags (1 CASCADE,
 *                 2 RESTART IDENTITY), Int32 relation OID per relation
 *   Message   'M' Int8 flags (1: transactional), Int64 LSN of the message
 *                 (the end of its WAL record, what pg_logical_emit_message()
 *                 returned), String prefix, Int32 length, Byte[length]
 *                 content (PostgreSQL 14+, with messages 'true')
 *
 * Streaming (protocol version 2): a transaction whose changes pass the
 * walsender's logical_decoding_work_mem is sent in blocks before it
 * commits, between other transactions, rather than spilled to disk on the
 * server:
 *
 *   Stream Start  'S' Int32 xid, Int8 1 for the transaction's first block
 *                 (an Origin message may follow), else 0
 *   Stream Stop   'E' (the block ends)
 *   Stream Commit 'c' Int32 xid, Int8 flags (0), Int64 commit LSN, Int64
 *                 end LSN, Int64 commit timestamp
 *   Stream Abort  'A' Int32 xid, Int32 subtransaction xid (the xid again
 *                 when the whole transaction aborted)
 *
 * Inside a block every Relation, Type, change and logical message carries
 * an Int32 xid after its type byte: the subtransaction's that made it for
 * a Relation, Type or change, the top-level one's for a logical message.
 * No Begin or Commit comes with a streamed transaction.
 *
 *   TupleData     Int16 number of columns, then per column one of:
 *                 'n' (NULL), 'u' (unchanged TOASTed value: UPDATE only),
 *                 't' Int32 length, Byte[length] (the type's text output),
 *                 'b' Int32 length, Byte[length] (binary: never asked for)
 *
 * A Relation message describes a table before the first change of it that
 * a walsender sends, and again after the table changed (pgoutput.c,
 * maybe_send_schema()); Type messages (user-defined types) come before it.
 * Since PostgreSQL 15 a transaction without a published change is not sent
 * at all, and Begin comes just before its first change. Dropped and
 * generated columns are not sent.
 *
 * Begin carries the commit record's LSN but not the transaction's end LSN,
 * which only Commit brings, and the relay names, confirms and skips
 * transactions by their end LSN (wal2json's "nextlsn"). So the decoder holds
 * each transaction's messages until its Commit and then hands out Begin
 * (with the end LSN), the changes and Commit in stream order. A streamed
 * transaction is held the same way, each apart, from its first Stream Start
 * to its Stream Commit, then handed out alike (its BEGIN and COMMIT events
 * made from the Stream Commit); a Stream Abort drops it, or what its rolled
 * back subtransaction added. What is held, over every transaction, stays in
 * memory up to the limit given to pgo_decoder_new() (streamed transactions
 * half of it, so that those committed meanwhile keep room), the rest in
 * unlinked files under $TMPDIR (/tmp), each with a stdio buffer of 256 KiB,
 * as PostgreSQL spills a large transaction to disk itself: memory stays
 * bounded whatever a transaction holds. Relation messages are applied in
 * their place among the held changes, when their transaction is handed out.
 *
 * Values are handed out as the text PostgreSQL's output function printed,
 * NUL-terminated in place: no allocation per row. The Relation cache is
 * bounded (PGO_RELATIONS_MAX tables of at most PGO_COLUMNS_MAX columns).
 * Knows nothing of Kafka, of the replication protocol's framing, of which
 * tables are outboxes or of what a message means.
 */
#ifndef RELAY_PGOUTPUT_H
#define RELAY_PGOUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Relations remembered at once, at most. The relay's publication holds only
 * its outbox tables; a Relation message for one more is an error (-ENOSPC),
 * never an eviction: pgoutput does not send a table's Relation message
 * again, so a forgotten one could not be decoded.
 */
#define PGO_RELATIONS_MAX 1024
/* Columns of a relation, at most: PostgreSQL's MaxTupleAttributeNumber. */
#define PGO_COLUMNS_MAX 1664
/*
 * Runs of one streamed transaction's changes, at most: each time its changes
 * pass from one subtransaction to another a run begins (16 bytes). Past it
 * pgo_decode() fails with -ENOTSUP.
 */
#define PGO_STREAM_RUNS_MAX 65536
/* Bytes of a transaction held in memory before the rest goes to a file, by default. */
#define PGO_TXN_MEMORY_DEFAULT ((size_t)4 * 1024 * 1024)

enum pgo_kind {
        PGO_BEGIN,
        PGO_COMMIT,
        PGO_INSERT,
        PGO_UPDATE,
        PGO_DELETE,
        PGO_TRUNCATE,
        PGO_MESSAGE,
};

struct pgo_column {
        const char *name;    /* the column's name, NUL-terminated */
        uint32_t typeoid;    /* pg_attribute.atttypid */
        int32_t typmod;      /* pg_attribute.atttypmod, -1 for none */
        bool key;            /* part of the replica identity */
};

struct pgo_relation {
        uint32_t oid;        /* pg_class.oid */
        const char *schema;  /* the namespace, "pg_catalog" where the message has "" */
        const char *name;    /* the relation's name */
        char replident;      /* pg_class.relreplident */
        size_t ncolumns;
        const struct pgo_column *columns;
};

struct pgo_value {
        const char *ptr;     /* the text, NUL-terminated, holding no NUL; NULL for NULL or unchanged */
        size_t len;          /* bytes of @ptr, without the terminator */
        bool is_null;        /* SQL NULL */
        bool unchanged;      /* UPDATE only: an unchanged TOASTed value, not sent */
};

struct pgo_event {
        enum pgo_kind kind;
        uint32_t xid;             /* of the transaction; 0 for a non-transactional message */
        /*
         * BEGIN, COMMIT: the commit record's LSN. INSERT, UPDATE, DELETE,
         * TRUNCATE: the dataStart of the XLogData that carried the change
         * (the start of its WAL record), as given to pgo_decode(). MESSAGE:
         * the message's LSN.
         */
        uint64_t lsn;
        uint64_t end_lsn;         /* BEGIN, COMMIT: the LSN just past the commit record */
        int64_t commit_time_us;   /* µs since the Unix epoch; 0 for a non-transactional message */
        const struct pgo_relation *rel; /* INSERT, UPDATE, DELETE, TRUNCATE (its first
                                         * relation, if known): the table */
        size_t nvalues;           /* INSERT, UPDATE: the new row, one value per column of @rel */
        const struct pgo_value *values;
        /* MESSAGE only: */
        bool transactional;
        const char *prefix;       /* NUL-terminated */
        const char *content;      /* @content_len bytes (any bytes, NUL too), then a NUL */
        size_t content_len;
};

struct pgo_decoder;

/*
 * pgo_decoder_new() - a decoder that holds up to @txn_memory bytes of a
 * transaction in memory (0: PGO_TXN_MEMORY_DEFAULT), the rest in a file.
 * Returns NULL when out of memory. The caller owns it: pgo_decoder_free().
 */
struct pgo_decoder *pgo_decoder_new(size_t txn_memory);

/* pgo_decoder_free() - free @d, its relations and any held transaction; NULL-safe; returns NULL. */
struct pgo_decoder *pgo_decoder_free(struct pgo_decoder *d);

/*
 * pgo_reset() - forget the relations and drop a transaction held or half
 * handed out: a new walsender (a new START_REPLICATION) sends every Relation
 * message again and starts at a transaction's Begin. Also the way out of a
 * failed decoder. Never fails.
 */
void pgo_reset(struct pgo_decoder *d);

/*
 * pgo_decode() - take one pgoutput message of @len bytes (an XLogData's
 * data, borrowed for this call only) whose XLogData started at @data_start
 * (LSN; 0 where the walsender sent none). Inside a transaction the message
 * is held; a Commit makes the transaction's events ready, a message outside
 * a transaction (a non-transactional logical message) its one event. Take
 * them with pgo_next() before the next pgo_decode().
 *
 * Returns 0, or with the reason in pgo_error():
 *   -EBADMSG  the message is malformed: truncated, trailing bytes, an
 *             unknown or unrequested type (two-phase), a Begin inside a
 *             transaction or stream block, a change or a transactional
 *             message outside one, a Commit that does not match its Begin, a
 *             Stream Start, Stop, Commit or Abort out of place, a Stream
 *             Commit of a transaction whose first block never came, a binary
 *             or NUL-holding value, a tuple whose column count differs from
 *             its Relation's, a change of a relation never described, an
 *             unchanged value outside an UPDATE, a timestamp out of range;
 *   -ENOSPC   a Relation message for one relation more than PGO_RELATIONS_MAX,
 *             or of more than PGO_COLUMNS_MAX columns;
 *   -ENOTSUP  a streamed transaction the decoder cannot follow: a rolled back
 *             subtransaction whose first message may have been a logical
 *             message (which carries the top-level xid), or more than
 *             PGO_STREAM_RUNS_MAX runs; the same transaction decodes without
 *             streaming (a new START_REPLICATION with streaming 'off');
 *   -EBUSY    events of an earlier message are still to be taken;
 *   -EIO      the file holding a large transaction could not be written;
 *   -ENOMEM   out of memory.
 * A held message is checked when its transaction is handed out (pgo_next()).
 * After any error but -EBUSY the decoder refuses everything until pgo_reset().
 */
int pgo_decode(struct pgo_decoder *d, const char *data, size_t len, uint64_t data_start);

/*
 * pgo_next() - the next ready event into @ret_ev, in stream order: a
 * committed transaction's BEGIN, its changes and messages, its COMMIT.
 * Relation, Type and Origin messages are applied, not handed out.
 * Everything @ret_ev points to is owned by @d and borrowed until the next
 * call of pgo_next(), pgo_decode() or pgo_reset().
 *
 * Returns 1 (an event), 0 (none ready), or an error as pgo_decode() for a
 * held message found malformed now (and -EIO when the file cannot be read).
 */
int pgo_next(struct pgo_decoder *d, struct pgo_event *ret_ev);

/*
 * pgo_unget() - give back @ev, the event the last pgo_next() returned, so
 * that the next pgo_next() returns it again (a record the caller cannot take
 * yet). Valid only before any other call on @d; what @ev points to stays
 * owned by @d and unchanged until then. Never fails.
 */
void pgo_unget(struct pgo_decoder *d, const struct pgo_event *ev);

/*
 * pgo_in_transaction() - true from a Begin until its COMMIT event was
 * handed out: the stream is inside a transaction whose end LSN the caller
 * may not know yet.
 */
bool pgo_in_transaction(const struct pgo_decoder *d);

/* pgo_ready() - true while pgo_next() has an event to hand out. */
bool pgo_ready(const struct pgo_decoder *d);

/*
 * pgo_held_bytes() - bytes held of the current transaction and of every
 * streamed one not yet committed, in memory and in files.
 */
uint64_t pgo_held_bytes(const struct pgo_decoder *d);

/* pgo_streams() - streamed transactions begun and not yet committed or aborted. */
size_t pgo_streams(const struct pgo_decoder *d);

/* pgo_error() - why the last call failed, one line (borrowed from @d); "" if none did. */
const char *pgo_error(const struct pgo_decoder *d);

/* pgo_relations() - relations described so far (at most PGO_RELATIONS_MAX). */
size_t pgo_relations(const struct pgo_decoder *d);

#endif
