/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The messages of PostgreSQL's streaming replication protocol carried in
 * CopyData during START_REPLICATION (PostgreSQL documentation, "Streaming
 * Replication Protocol", protocol-replication.html; walsender.c,
 * pg_recvlogical.c). Pure encoding and decoding of byte buffers: no sockets,
 * no libpq, no knowledge of wal2json or Kafka.
 *
 *   XLogData          'w' Int64 dataStart, Int64 walEnd, Int64 sendTime, Byte[n] data
 *   Primary keepalive 'k' Int64 walEnd, Int64 sendTime, Byte1 replyRequested
 *   Standby status    'r' Int64 write, Int64 flush, Int64 apply, Int64 sendTime,
 *                         Byte1 replyRequested
 *
 * Integers are big-endian; sendTime is microseconds since 2000-01-01 00:00 UTC.
 */
#ifndef RELAY_REPLMSG_H
#define RELAY_REPLMSG_H

#include <stddef.h>
#include <stdint.h>

#define REPLMSG_XLOGDATA_HDR 25   /* bytes before the data of an XLogData */
#define REPLMSG_KEEPALIVE_LEN 18  /* bytes of a primary keepalive */
#define REPLMSG_STATUS_LEN 34     /* bytes of a standby status update */

/* Seconds from the Unix epoch to PostgreSQL's epoch, 2000-01-01 00:00 UTC. */
#define REPLMSG_PG_EPOCH_OFFSET_S INT64_C(946684800)

enum replmsg_kind {
        REPLMSG_XLOGDATA,
        REPLMSG_KEEPALIVE,
};

struct replmsg {
        enum replmsg_kind kind;
        uint64_t data_start;     /* XLogData: LSN of the data's start; 0 for logical messages at times */
        uint64_t wal_end;        /* LSN: the server's current end of WAL (walEnd) */
        int64_t send_time_us;    /* server clock, microseconds since 2000-01-01 */
        int reply_requested;     /* keepalive: the server asks for a status update now */
        const char *data;        /* XLogData payload, borrowed from the input buffer */
        size_t data_len;         /* bytes of @data */
};

/*
 * replmsg_parse() - decode one CopyData payload of @len bytes received during
 * START_REPLICATION into @ret_msg. @ret_msg->data points into @buf (borrowed:
 * valid as long as @buf is).
 *
 * Returns 0 on success, -EBADMSG if the message is truncated or of an
 * unknown type ('w' and 'k' are the only ones the server sends in this
 * phase). @ret_msg is untouched on failure.
 */
int replmsg_parse(const char *buf, size_t len, struct replmsg *ret_msg);

/*
 * replmsg_status_update() - encode a standby status update into @buf
 * (REPLMSG_STATUS_LEN bytes). @write_lsn, @flush_lsn, @apply_lsn are LSNs;
 * the server copies @flush_lsn into the slot's confirmed_flush_lsn.
 * @now_us is microseconds since the Unix epoch. Returns the number of bytes
 * written, always REPLMSG_STATUS_LEN.
 */
size_t replmsg_status_update(char buf[REPLMSG_STATUS_LEN], uint64_t write_lsn, uint64_t flush_lsn,
                             uint64_t apply_lsn, int64_t now_us, int reply_requested);

/* replmsg_get_u64() - read a big-endian 64-bit integer from @p (8 bytes). */
uint64_t replmsg_get_u64(const char *p);

#endif
