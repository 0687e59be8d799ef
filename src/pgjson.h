/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Is this text what PostgreSQL's json type would accept? The grammar of
 * json_in() (src/common/jsonapi.c, json_lex() and json_lex_string() without
 * de-escaping): RFC 8259 values with whitespace of space, tab, CR and LF;
 * numbers -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?; strings with the
 * escapes \" \\ \/ \b \f \n \r \t and \uXXXX (any four hex digits: json,
 * unlike jsonb, keeps lone surrogates and \u0000 as written); every byte
 * below 0x20 escaped; literals true, false, null. The relay publishes a
 * payload column of type text only when it passes, so that records marked
 * application/json hold JSON; json and jsonb columns were checked by
 * PostgreSQL on input. cJSON alone accepts some text that is not JSON.
 * Pure: no allocation, no state.
 */
#ifndef RELAY_PGJSON_H
#define RELAY_PGJSON_H

#include <stdbool.h>
#include <stddef.h>

/* Deepest nesting of arrays and objects accepted; PostgreSQL's own limit is its stack depth. */
#define PGJSON_MAX_DEPTH 6400

/*
 * pgjson_validate() - whether the @len bytes at @text (UTF-8, as the server
 * sent them) are one JSON value as json_in() accepts it. Returns 0, or
 * -EILSEQ with the byte offset of the first offending byte in
 * *@ret_offset (when not NULL) and a short reason (static string) in
 * *@ret_reason (when not NULL).
 */
int pgjson_validate(const char *text, size_t len, size_t *ret_offset, const char **ret_reason);

/*
 * pgjson_has_nul_escape() - whether the @len bytes of JSON text at @text hold
 * a \u0000 escape, which json accepts and jsonb refuses (and at which cJSON
 * would cut a string short). Backslashes occur only inside strings, each
 * escaping one character, so the scan needs no JSON state. Valid JSON
 * expected (pgjson_validate() or the server's check); pure.
 */
bool pgjson_has_nul_escape(const char *text, size_t len);

#endif
