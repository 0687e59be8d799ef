// SPDX-License-Identifier: Apache-2.0
/*
 * A logical message's envelope -> the columns of the outbox row it stands
 * for. Checked in order: size, UTF-8, PostgreSQL's json grammar, no \u0000,
 * then the shape. See envelope.h. Pure: no I/O.
 */
#include "envelope.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "pgjson.h"

#define TEXT_OID 25
#define JSON_OID 114

#define ENVELOPE_FIX "; write it with outbox_emit() (sql/outbox.sql), or as outbox-relay(7), AN " \
        "OUTBOX WITH NO TABLE, describes"

/* Bytes of the UTF-8 sequence at @p (@left bytes there), or 0 if it is not a valid one. */
static size_t utf8_sequence(const unsigned char *p, size_t left)
{
        uint32_t cp;
        size_t n;

        if (p[0] < 0x80)
                return 1;
        if (p[0] >= 0xc2 && p[0] <= 0xdf) {
                n = 1;
                cp = p[0] & 0x1f;
        } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
                n = 2;
                cp = p[0] & 0x0f;
        } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
                n = 3;
                cp = p[0] & 0x07;
        } else {
                return 0;  /* a continuation byte, an overlong lead (C0, C1) or F5..FF */
        }
        if (left <= n)
                return 0;
        for (size_t k = 1; k <= n; k++) {
                if ((p[k] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (p[k] & 0x3f);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return n + 1;
}

bool envelope_valid_utf8(const char *s, size_t len, size_t *ret_offset)
{
        const unsigned char *p = (const unsigned char *)s;

        for (size_t i = 0, n; i < len; i += n) {
                n = utf8_sequence(p + i, len - i);
                if (n == 0) {
                        if (ret_offset)
                                *ret_offset = i;
                        return false;
                }
        }
        return true;
}

static const char *json_kind(const cJSON *j)
{
        return cJSON_IsObject(j) ? "an object" : cJSON_IsArray(j) ? "an array" :
               cJSON_IsString(j) ? "a string" : cJSON_IsNumber(j) ? "a number" :
               cJSON_IsBool(j) ? "a boolean" : "null";
}

void envelope_clear(struct envelope *env)
{
        cJSON_Delete(env->tree);
        env->tree = NULL;
}

/*
 * Check the members of "columns" and fill env->columns; *@ret_bad_payload
 * when the payload column is not JSON (reason in @err). Returns the count
 * or -EBADMSG.
 */
static int read_columns(struct envelope *env, const cJSON *cols, const char *payload_column,
                        bool *ret_bad_payload, char *err, size_t errlen)
{
        const cJSON *it;
        int n = 0;

        *ret_bad_payload = false;
        cJSON_ArrayForEach(it, cols) {
                struct w2j_column *c = &env->columns[n];
                size_t nlen = strlen(it->string);

                if (n == ENVELOPE_COLUMNS_MAX) {
                        snprintf(err, errlen, "the envelope has more than %d columns",
                                 ENVELOPE_COLUMNS_MAX);
                        return -EBADMSG;
                }
                if (nlen == 0 || nlen > ENVELOPE_NAME_MAX) {
                        snprintf(err, errlen, "the envelope has a column name of %zu bytes "
                                 "(\"%.40s%s\"); names need 1 to %d", nlen, it->string,
                                 nlen > 40 ? "..." : "", ENVELOPE_NAME_MAX);
                        return -EBADMSG;
                }
                for (int k = 0; k < n; k++) {
                        if (strcmp(env->columns[k].name, it->string) == 0) {
                                snprintf(err, errlen, "the envelope names column \"%s\" twice",
                                         it->string);
                                return -EBADMSG;
                        }
                }
                if (!cJSON_IsString(it) && !cJSON_IsNull(it)) {
                        snprintf(err, errlen, "the envelope's column \"%s\" holds %s; a value is "
                                 "the column's text as a JSON string (\"103\", not 103) or null",
                                 it->string, json_kind(it));
                        return -EBADMSG;
                }
                *c = (struct w2j_column){
                        .name = it->string,
                        .type = "text",
                        .typeoid = TEXT_OID,
                        .value = {
                                .ptr = cJSON_IsString(it) ? it->valuestring : NULL,
                                .len = cJSON_IsString(it) ? strlen(it->valuestring) : 0,
                                .is_null = cJSON_IsNull(it),
                        },
                };
                if (payload_column && !c->value.is_null && strcmp(c->name, payload_column) == 0) {
                        const char *why = "";
                        size_t at = 0;

                        if (pgjson_validate(c->value.ptr, c->value.len, &at, &why) == 0) {
                                c->type = "json";
                                c->typeoid = JSON_OID;
                        } else {
                                snprintf(err, errlen, "the envelope's payload column \"%s\" does "
                                         "not hold valid JSON (%s at byte %zu of it; records are "
                                         "sent as application/json)" ENVELOPE_FIX, c->name, why, at);
                                *ret_bad_payload = true;
                        }
                }
                n++;
        }
        return n;
}

int envelope_parse(struct envelope *env, const struct w2j_record *msg, const char *payload_column,
                   struct w2j_record *ret_row, char *err, size_t errlen)
{
        const char *text = msg->content, *why = "", *end = NULL;
        const cJSON *root, *it, *version = NULL, *cols = NULL;
        size_t len = msg->content_len, at = 0;
        struct w2j_record row;
        bool bad_payload;
        int n;

        envelope_clear(env);
        if (!text) {
                snprintf(err, errlen, "the message has no content");
                return -EBADMSG;
        }
        if (msg->suspect) {
                snprintf(err, errlen, "the message's line holds a NUL byte or a raw control "
                         "character, which wal2json never writes: its content may be cut short");
                return -EBADMSG;
        }
        if (len > ENVELOPE_MAX_BYTES) {
                snprintf(err, errlen, "the envelope has %zu bytes, more than the %zu an envelope "
                         "may have; publish larger messages from a table", len, ENVELOPE_MAX_BYTES);
                return -E2BIG;
        }
        if (!envelope_valid_utf8(text, len, &at)) {
                snprintf(err, errlen, "the message's content is not UTF-8 text (byte 0x%02X at "
                         "offset %zu): an envelope is JSON text, not binary content (was it written "
                         "with pg_logical_emit_message(..., bytea)?)" ENVELOPE_FIX,
                         (unsigned)(unsigned char)text[at], at);
                return -EBADMSG;
        }
        if (pgjson_validate(text, len, &at, &why) < 0) {
                snprintf(err, errlen, "the message's content is not valid JSON (%s at byte %zu)"
                         ENVELOPE_FIX, why, at);
                return -EBADMSG;
        }
        if (pgjson_has_nul_escape(text, len)) {
                snprintf(err, errlen, "the envelope holds a \\u0000 escape: a column's text cannot "
                         "hold NUL");
                return -EBADMSG;
        }
        env->tree = cJSON_ParseWithLengthOpts(text, len, &end, false);
        root = env->tree;
        if (!root) {
                snprintf(err, errlen, "the envelope cannot be read: it holds a lone surrogate "
                         "escape (\\uD800 to \\uDFFF) or nests deeper than %d, or memory ran out",
                         CJSON_NESTING_LIMIT);
                return -EBADMSG;
        }
        if (!cJSON_IsObject(root)) {
                snprintf(err, errlen, "the envelope is %s, not an object" ENVELOPE_FIX,
                         json_kind(root));
                return -EBADMSG;
        }
        cJSON_ArrayForEach(it, root) {
                const cJSON **slot = strcmp(it->string, "version") == 0 ? &version :
                                     strcmp(it->string, "columns") == 0 ? &cols : NULL;

                if (!slot) {
                        snprintf(err, errlen, "the envelope has a member \"%.40s\"; version %d "
                                 "has only \"version\" and \"columns\"", it->string, ENVELOPE_VERSION);
                        return -EBADMSG;
                }
                if (*slot) {
                        snprintf(err, errlen, "the envelope has \"%s\" twice", it->string);
                        return -EBADMSG;
                }
                *slot = it;
        }
        if (!version || !cJSON_IsNumber(version) || version->valuedouble != ENVELOPE_VERSION) {
                snprintf(err, errlen, "the envelope's \"version\" is %s; this relay reads version %d",
                         !version ? "missing" : cJSON_IsNumber(version) ? "another number" :
                         json_kind(version), ENVELOPE_VERSION);
                return -EBADMSG;
        }
        if (!cols || !cJSON_IsObject(cols)) {
                snprintf(err, errlen, "the envelope's \"columns\" is %s, not an object of the "
                         "row's columns", cols ? json_kind(cols) : "missing");
                return -EBADMSG;
        }
        n = read_columns(env, cols, payload_column, &bad_payload, err, errlen);
        if (n < 0)
                return n;
        row = *msg;
        row.ncolumns = (size_t)n;
        row.columns = env->columns;
        *ret_row = row;
        return bad_payload ? -EILSEQ : 0;
}
