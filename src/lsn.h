/* SPDX-License-Identifier: Apache-2.0 */
/*
 * LSNs (log sequence numbers, byte positions in PostgreSQL's WAL) as uint64_t,
 * and their text form, pg_lsn's "%X/%X" (PostgreSQL src/backend/utils/adt/pg_lsn.c).
 */
#ifndef RELAY_LSN_H
#define RELAY_LSN_H

#include <stddef.h>
#include <stdint.h>

/* The invalid LSN, InvalidXLogRecPtr. */
#define LSN_INVALID ((uint64_t)0)

/* Enough for "FFFFFFFF/FFFFFFFF" and its terminator. */
#define LSN_STRLEN 18

/*
 * lsn_format() - write @lsn as pg_lsn text ("16/B374D848") into @buf, which
 * must hold LSN_STRLEN bytes. Returns @buf, for use in printf arguments.
 */
char *lsn_format(uint64_t lsn, char buf[LSN_STRLEN]);

/*
 * lsn_parse() - parse pg_lsn text of exactly @len bytes (one to eight hex
 * digits, '/', one to eight hex digits). Returns 0 and sets *ret_lsn, or
 * -EINVAL if the text is not a pg_lsn; *ret_lsn is untouched on failure.
 */
int lsn_parse(const char *text, size_t len, uint64_t *ret_lsn);

#endif
