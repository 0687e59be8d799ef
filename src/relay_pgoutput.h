/* SPDX-License-Identifier: Apache-2.0 */
/*
 * --plugin=pgoutput's part of the relay (relay_pgoutput.c): the decoder
 * (pgoutput.h), and the records its events become, in wal2json.h's form, so
 * that relay_row.c handles a row the same whichever plugin decoded it and
 * its Kafka record is the same byte for byte. Only relay_pgoutput.c writes
 * struct relay_pgo: the loop (relay.c) and the watch (relay_watch.c) ask it
 * through the functions below. The functions that take the relay
 * (relay_parts.h) need its row path, ledger and failure state. Format:
 * PostgreSQL's logical replication protocol, versions 1 and 2 ("Logical
 * Replication Message Formats" in PostgreSQL's documentation), as
 * pgoutput.h reads it.
 */
#ifndef RELAY_RELAY_PGOUTPUT_H
#define RELAY_RELAY_PGOUTPUT_H

#include <stdbool.h>
#include <stddef.h>

#include "pgoutput.h"
#include "replmsg.h"
#include "wal2json.h"

struct relay;

/* The decoder, and the columns of the record an event becomes, reused from row to row. */
struct relay_pgo {
        struct pgo_decoder *dec;      /* NULL with wal2json */
        struct w2j_column *cols;
        size_t cols_cap;
        /*
         * Streaming 'off' for the rest of the process: a streamed transaction
         * the decoder could not follow (pgo_decode() -ENOTSUP) comes again whole.
         */
        bool no_streaming;
        bool said_streaming;          /* why streaming is off was logged */
};

/*
 * relay_pgo_init() - @p with a decoder if @on (the slot's plugin is
 * pgoutput), else empty (wal2json). The decoder holds open transactions in
 * up to PGO_TXN_MEMORY_DEFAULT bytes of memory, the rest in unlinked files
 * under $TMPDIR. Free with relay_pgo_free(). Returns 0, or -ENOMEM.
 */
int relay_pgo_init(struct relay_pgo *p, bool on);

/* relay_pgo_free() - the decoder and the columns; @p is empty (wal2json's) after. */
void relay_pgo_free(struct relay_pgo *p);

/* relay_pgo_on() - true if the relay decodes with pgoutput. */
bool relay_pgo_on(const struct relay_pgo *p);

/*
 * relay_pgo_session_start() - a new walsender: it sends every Relation
 * message again and starts at a transaction's Begin, so what the decoder
 * held of the last session goes (never confirmed: it comes again).
 */
void relay_pgo_session_start(struct relay_pgo *p);

/* relay_pgo_ready() - decoded events wait to be handed out (relay_pgo_drain()). */
bool relay_pgo_ready(const struct relay_pgo *p);

/* relay_pgo_busy() - events wait, or a transaction is held (its end LSN unknown); false with wal2json. */
bool relay_pgo_busy(const struct relay_pgo *p);

/*
 * relay_pgo_streaming() - whether this session asks pgoutput for streaming
 * ('on'): not after a streamed transaction the decoder could not follow, and
 * with @message_prefix (logical messages published) only from PostgreSQL 18
 * (@server_version_num 180000) on. Logs why it is off, once.
 */
bool relay_pgo_streaming(struct relay_pgo *p, int server_version_num, bool message_prefix);

/*
 * relay_pgo_line() - give the pgoutput message of @m to the decoder, then
 * act on the events it makes ready (relay_pgo_drain()). A malformed message
 * stops the relay (exit 4) without confirming it.
 */
void relay_pgo_line(struct relay *r, const struct replmsg *m);

/*
 * relay_pgo_drain() - act on the decoder's ready events until there are
 * none, the in-flight bounds are reached or a failure is recorded. Returns
 * true while events remain: the loop calls it again before reading on.
 */
bool relay_pgo_drain(struct relay *r);

/*
 * relay_pgo_record() - @ev as the record wal2json would have given
 * (wal2json.h): actions B, C, I, U, D, T, M; columns named and typed from the
 * Relation message, values rewritten by w2j_value_from_text(); a message's
 * content whole (wal2json cuts it at a NUL byte: the one difference, and
 * only for binary content, which is no envelope either way). @ret_rec
 * borrows from @ev and @p->cols (grown as needed) until the next call.
 * Returns 0 or -ENOMEM. Pure otherwise.
 */
int relay_pgo_record(const struct pgo_event *ev, struct relay_pgo *p, struct w2j_record *ret_rec);

#endif
