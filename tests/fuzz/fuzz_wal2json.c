// SPDX-License-Identifier: Apache-2.0
/*
 * Fuzz target for the wal2json format-version 2 decoder (src/wal2json.c).
 * The input is one line, or several separated by '\n' that the same decoder
 * then decodes in turn, as the relay does. On success every string of the
 * record is walked so that AddressSanitizer sees an overrun, and the record
 * is checked against the header's promises and against cJSON's own parse of
 * the unrewritten line: the number quoting must not change what the line
 * means. The same bytes also go through w2j_parse_timestamp(), compared with
 * a regex and timegm(), and through w2j_escape_table_name(). A record that
 * decodes is written back as the server would write it and must decode the
 * same: that catches valid text misread or refused, which the other checks
 * cannot, since refusing a line is always allowed.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <regex.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include "fuzz.h"
#include "wal2json.h"

/* A JSON number (RFC 8259 section 6), or NaN, Infinity, -Infinity as wal2json writes floats. */
static bool is_number_text(const char *s, size_t len)
{
        size_t i = 0;

        if (len == 3 && memcmp(s, "NaN", 3) == 0)
                return true;
        if (i < len && s[i] == '-')
                i++;
        if (len - i == 8 && memcmp(s + i, "Infinity", 8) == 0)
                return true;
        if (i >= len)
                return false;
        if (s[i] == '0') {
                i++;
        } else if (s[i] >= '1' && s[i] <= '9') {
                while (i < len && s[i] >= '0' && s[i] <= '9')
                        i++;
        } else {
                return false;
        }
        if (i < len && s[i] == '.') {
                i++;
                if (i >= len || s[i] < '0' || s[i] > '9')
                        return false;
                while (i < len && s[i] >= '0' && s[i] <= '9')
                        i++;
        }
        if (i < len && (s[i] == 'e' || s[i] == 'E')) {
                i++;
                if (i < len && (s[i] == '+' || s[i] == '-'))
                        i++;
                if (i >= len || s[i] < '0' || s[i] > '9')
                        return false;
                while (i < len && s[i] >= '0' && s[i] <= '9')
                        i++;
        }
        return i == len;
}

/*
 * A string of the record: readable up to its terminator. Strings are copied
 * verbatim (numbers are marked by structure, as ["N"], not by a byte), so
 * any byte but NUL may appear.
 */
static size_t check_text(const char *s)
{
        FUZZ_CHECK(s != NULL);
        return strlen(s);
}

static void check_value(const struct w2j_value *v, const char *line, size_t len)
{
        if (v->is_null) {
                FUZZ_CHECK(v->ptr == NULL);
                FUZZ_CHECK(v->len == 0);
                FUZZ_CHECK(!v->was_number);
                return;
        }
        FUZZ_CHECK(v->ptr != NULL);
        FUZZ_CHECK(check_text(v->ptr) == v->len);
        FUZZ_CHECK(v->ptr[v->len] == '\0');
        if (v->was_number) {
                /* The differential property: a bare number stays a number, byte for byte. */
                FUZZ_CHECK(is_number_text(v->ptr, v->len));
                FUZZ_CHECK(memmem(line, len, v->ptr, v->len) != NULL);
        }
}

static bool json_ws_only(const char *p, const char *end)
{
        for (; p < end; p++)
                if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
                        return false;
        return true;
}

static void same_string(const cJSON *obj, const char *name, const char *got)
{
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, name);

        FUZZ_CHECK(cJSON_IsString(it));
        FUZZ_CHECK(strcmp(it->valuestring, got) == 0);
}

/*
 * The text of @it if it has the shape of the decoder's rewrite of a bare
 * number, ["N"], with number text: bad input of that shape may be read as
 * the number (see check_arrays()). NULL otherwise.
 */
static const char *rewrite_shape(const cJSON *it)
{
        const cJSON *only = cJSON_IsArray(it) ? it->child : NULL;

        if (!only || only->next || !cJSON_IsString(only))
                return NULL;
        return is_number_text(only->valuestring, strlen(only->valuestring)) ? only->valuestring
                                                                             : NULL;
}

/*
 * Where plain cJSON also accepts the line (it refuses NaN, Infinity and
 * numbers of 64 characters or more), both parses must see the same fields.
 */
static void compare_with_cjson(const char *line, size_t len, const struct w2j_record *rec)
{
        const char *end = NULL;
        cJSON *root = cJSON_ParseWithLengthOpts(line, len, &end, false);
        const cJSON *action, *cols, *col, *xid;
        size_t i = 0;

        if (!root)
                return;
        FUZZ_CHECK(cJSON_IsObject(root));
        FUZZ_CHECK(end != NULL && json_ws_only(end, line + len));
        action = cJSON_GetObjectItemCaseSensitive(root, "action");
        FUZZ_CHECK(cJSON_IsString(action) && action->valuestring[0] == rec->action_code &&
                   action->valuestring[1] == '\0');
        xid = cJSON_GetObjectItemCaseSensitive(root, "xid");
        if (rewrite_shape(xid))
                FUZZ_CHECK(strtoull(rewrite_shape(xid), NULL, 10) == rec->xid);
        else if (xid && !cJSON_IsNull(xid))
                FUZZ_CHECK(cJSON_IsNumber(xid) && xid->valuedouble == (double)rec->xid);
        else
                FUZZ_CHECK(rec->xid == 0);
        if (rec->timestamp)
                same_string(root, "timestamp", rec->timestamp);
        if (rec->schema) {
                same_string(root, "schema", rec->schema);
                same_string(root, "table", rec->table);
        }
        if (rec->action == W2J_MESSAGE) {
                const cJSON *tx = cJSON_GetObjectItemCaseSensitive(root, "transactional");

                FUZZ_CHECK(rec->transactional == cJSON_IsTrue(tx));
                if (rec->prefix)
                        same_string(root, "prefix", rec->prefix);
                if (rec->content)
                        same_string(root, "content", rec->content);
        }
        if (rec->action != W2J_INSERT && rec->action != W2J_UPDATE)
                goto out;
        cols = cJSON_GetObjectItemCaseSensitive(root, "columns");
        FUZZ_CHECK(cJSON_IsArray(cols));
        FUZZ_CHECK((size_t)cJSON_GetArraySize(cols) == rec->ncolumns);
        cJSON_ArrayForEach(col, cols) {
                const struct w2j_column *c = &rec->columns[i++];
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(col, "value");

                same_string(col, "name", c->name);
                if (c->type)
                        same_string(col, "type", c->type);
                if (cJSON_IsNull(v)) {
                        FUZZ_CHECK(c->value.is_null);
                } else if (cJSON_IsNumber(v)) {
                        FUZZ_CHECK(c->value.was_number);
                        FUZZ_CHECK(strtod(c->value.ptr, NULL) == v->valuedouble ||
                                   isnan(v->valuedouble));
                } else if (cJSON_IsString(v)) {
                        FUZZ_CHECK(!c->value.is_null && !c->value.was_number);
                        FUZZ_CHECK(strcmp(c->value.ptr, v->valuestring) == 0);
                } else if (rewrite_shape(v)) {
                        FUZZ_CHECK(c->value.was_number);
                        FUZZ_CHECK(strcmp(c->value.ptr, rewrite_shape(v)) == 0);
                } else {
                        FUZZ_CHECK(cJSON_IsBool(v));
                        FUZZ_CHECK(strcmp(c->value.ptr, cJSON_IsTrue(v) ? "true" : "false") == 0);
                }
        }
out:
        cJSON_Delete(root);
}

static void check_record(const struct w2j_record *rec, const char *line, size_t len)
{
        static const char codes[] = "BCIUDTM";
        const char *known = strchr(codes, rec->action_code);

        if (rec->action_code != '\0' && known)
                FUZZ_CHECK(rec->action == (enum w2j_action)(known - codes));
        else
                FUZZ_CHECK(rec->action == W2J_UNKNOWN);
        if (rec->action == W2J_BEGIN || rec->action == W2J_COMMIT)
                FUZZ_CHECK(rec->next_lsn != 0);
        if (rec->timestamp) {
                size_t n = check_text(rec->timestamp);
                int64_t us = 0;

                FUZZ_CHECK(w2j_parse_timestamp(rec->timestamp, n, &us) == 0);
                FUZZ_CHECK(us == rec->commit_time_us);
        } else {
                FUZZ_CHECK(rec->commit_time_us == 0);
        }
        if (rec->action == W2J_INSERT || rec->action == W2J_UPDATE || rec->action == W2J_DELETE ||
            rec->action == W2J_TRUNCATE) {
                check_text(rec->schema);
                check_text(rec->table);
        } else {
                FUZZ_CHECK(rec->schema == NULL && rec->table == NULL);
        }
        if (rec->action != W2J_INSERT && rec->action != W2J_UPDATE)
                FUZZ_CHECK(rec->ncolumns == 0 && rec->columns == NULL);
        FUZZ_CHECK(rec->ncolumns == 0 || rec->columns != NULL);
        if (rec->action == W2J_MESSAGE) {
                if (rec->content)
                        FUZZ_CHECK(check_text(rec->content) == rec->content_len);
                else
                        FUZZ_CHECK(rec->content_len == 0);
                if (rec->prefix)
                        check_text(rec->prefix);
        } else {
                FUZZ_CHECK(!rec->transactional && !rec->prefix && !rec->content && !rec->suspect);
        }
        for (size_t i = 0; i < rec->ncolumns; i++) {
                check_text(rec->columns[i].name);
                /* include-types gives a name, include-type-oids an OID: one at least */
                if (rec->columns[i].type)
                        check_text(rec->columns[i].type);
                else
                        FUZZ_CHECK(rec->columns[i].typeoid != 0);
                check_value(&rec->columns[i].value, line, len);
        }
        compare_with_cjson(line, len, rec);
}

struct text {
        char *p;
        size_t len, cap;
};

static void put(struct text *t, const char *s, size_t n)
{
        if (t->len + n + 1 > t->cap) {
                t->cap = (t->len + n + 1) * 2;
                t->p = realloc(t->p, t->cap);
                FUZZ_CHECK(t->p != NULL);
        }
        memcpy(t->p + t->len, s, n);
        t->len += n;
        t->p[t->len] = '\0';
}

static void put_str(struct text *t, const char *s)
{
        put(t, s, strlen(s));
}

/* A JSON string as PostgreSQL's escape_json writes it: quote, backslash, controls escaped. */
static void put_json_string(struct text *t, const char *s, size_t n)
{
        put_str(t, "\"");
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                char esc[8];

                if (c == '"' || c == '\\') {
                        esc[0] = '\\';
                        esc[1] = (char)c;
                        put(t, esc, 2);
                } else if (c < 0x20) {
                        snprintf(esc, sizeof(esc), "\\u%04x", c);
                        put(t, esc, 6);
                } else {
                        put(t, (const char *)&c, 1);
                }
        }
        put_str(t, "\"");
}

static void put_field(struct text *t, const char *name, const char *value)
{
        put_str(t, ",\"");
        put_str(t, name);
        put_str(t, "\":");
        put_json_string(t, value, strlen(value));
}

/*
 * Write @rec back as a wal2json line, in the form the server would have
 * sent; or, where @as_array[i] is set, with column i's value as an array of
 * one string, which the server never writes.
 */
static void serialize(const struct w2j_record *rec, const bool *as_array, struct text *t)
{
        char buf[64];

        put_str(t, "{\"action\":");
        put_json_string(t, &rec->action_code, 1);
        snprintf(buf, sizeof(buf), ",\"xid\":%u", rec->xid);
        put_str(t, buf);
        if (rec->timestamp)
                put_field(t, "timestamp", rec->timestamp);
        snprintf(buf, sizeof(buf), "%X/%X", (unsigned)(rec->lsn >> 32), (unsigned)rec->lsn);
        put_field(t, "lsn", buf);
        if (rec->next_lsn) {
                snprintf(buf, sizeof(buf), "%X/%X", (unsigned)(rec->next_lsn >> 32),
                         (unsigned)rec->next_lsn);
                put_field(t, "nextlsn", buf);
        }
        if (rec->schema) {
                put_field(t, "schema", rec->schema);
                put_field(t, "table", rec->table);
        }
        if (rec->action == W2J_MESSAGE) {
                put_str(t, rec->transactional ? ",\"transactional\":true" : ",\"transactional\":false");
                if (rec->prefix)
                        put_field(t, "prefix", rec->prefix);
                if (rec->content) {
                        put_str(t, ",\"content\":");
                        put_json_string(t, rec->content, rec->content_len);
                }
        }
        if (rec->action == W2J_INSERT || rec->action == W2J_UPDATE) {
                put_str(t, ",\"columns\":[");
                for (size_t i = 0; i < rec->ncolumns; i++) {
                        const struct w2j_column *c = &rec->columns[i];

                        put_str(t, i ? ",{\"name\":" : "{\"name\":");
                        put_json_string(t, c->name, strlen(c->name));
                        if (c->type)
                                put_field(t, "type", c->type);
                        if (c->typeoid) {
                                snprintf(buf, sizeof(buf), ",\"typeoid\":%u", (unsigned)c->typeoid);
                                put_str(t, buf);
                        }
                        put_str(t, ",\"value\":");
                        if (as_array && as_array[i]) {
                                put_str(t, "[");
                                put_json_string(t, c->value.ptr, c->value.len);
                                put_str(t, "]");
                        } else if (c->value.is_null)
                                put_str(t, "null");
                        else if (c->value.was_number)
                                put(t, c->value.ptr, c->value.len);
                        else
                                put_json_string(t, c->value.ptr, c->value.len);
                        put_str(t, "}");
                }
                put_str(t, "]");
        }
        put_str(t, "}");
}

static bool same_opt_string(const char *a, const char *b)
{
        return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void check_same(const struct w2j_record *a, const struct w2j_record *b)
{
        FUZZ_CHECK(a->action == b->action && a->action_code == b->action_code);
        FUZZ_CHECK(a->xid == b->xid && a->lsn == b->lsn && a->next_lsn == b->next_lsn);
        FUZZ_CHECK(same_opt_string(a->timestamp, b->timestamp));
        FUZZ_CHECK(a->commit_time_us == b->commit_time_us);
        FUZZ_CHECK(same_opt_string(a->schema, b->schema));
        FUZZ_CHECK(same_opt_string(a->table, b->table));
        FUZZ_CHECK(a->transactional == b->transactional);
        FUZZ_CHECK(same_opt_string(a->prefix, b->prefix));
        FUZZ_CHECK(same_opt_string(a->content, b->content) && a->content_len == b->content_len);
        FUZZ_CHECK(a->ncolumns == b->ncolumns);
        for (size_t i = 0; i < a->ncolumns; i++) {
                const struct w2j_column *x = &a->columns[i], *y = &b->columns[i];

                FUZZ_CHECK(strcmp(x->name, y->name) == 0 && same_opt_string(x->type, y->type));
                FUZZ_CHECK(x->typeoid == y->typeoid);
                FUZZ_CHECK(x->value.is_null == y->value.is_null);
                FUZZ_CHECK(x->value.was_number == y->value.was_number);
                FUZZ_CHECK(x->value.len == y->value.len);
                if (!x->value.is_null)
                        FUZZ_CHECK(memcmp(x->value.ptr, y->value.ptr, x->value.len) == 0);
        }
}

/* Write @rec as the server would, decode that, and compare. */
static void check_reencoded(const struct w2j_record *rec)
{
        struct w2j_decoder *d = w2j_decoder_new();
        struct text t = {0};
        struct w2j_record again;

        FUZZ_CHECK(d != NULL);
        serialize(rec, NULL, &t);
        FUZZ_CHECK(w2j_decode(d, t.p, t.len, &again) == 0);
        check_same(&again, rec);
        w2j_decoder_free(d);
        free(t.p);
}

/*
 * @rec with some values written as ["text"]: the decoder's own rewrite of a
 * bare number, so the one shape of bad input its marking could mistake for a
 * number. A value of the wrong type is -EBADMSG (wal2json.h); where the text
 * is a number, reading it as that number is tolerated too.
 */
static void check_arrays(const struct w2j_record *rec, const bool *as_array)
{
        struct w2j_decoder *d = w2j_decoder_new();
        struct text t = {0};
        struct w2j_record again;
        bool all_numbers = true;
        int r;

        FUZZ_CHECK(d != NULL);
        for (size_t i = 0; i < rec->ncolumns; i++)
                if (as_array[i] && !rec->columns[i].value.was_number)
                        all_numbers = false;
        serialize(rec, as_array, &t);
        r = w2j_decode(d, t.p, t.len, &again);
        if (!all_numbers)
                FUZZ_CHECK(r == -EBADMSG);
        else if (r == 0)
                check_same(&again, rec);
        else
                FUZZ_CHECK(r == -EBADMSG);
        w2j_decoder_free(d);
        free(t.p);
}

#define GEN_MAX_COLUMNS 16

/*
 * A valid line built from the input: the bytes between commas become column
 * values (NUL, which no PostgreSQL text holds, replaced; any other byte
 * kept), bare numbers where they read as one, text otherwise. It must decode
 * to exactly what was written. Lines that merely decode tell nothing about
 * lines that are wrongly refused; this does. Then every other value is
 * written as an array, which must not decode as anything but a number.
 */
static void check_generated(const uint8_t *data, size_t size)
{
        struct w2j_column cols[GEN_MAX_COLUMNS];
        char names[GEN_MAX_COLUMNS][8];
        char *text = malloc(size + 1);
        struct w2j_record rec = {0};
        size_t start = 0;

        FUZZ_CHECK(text != NULL);
        for (size_t i = 0; i < size; i++)
                text[i] = data[i] == 0 ? ' ' : (char)data[i];
        text[size] = '\0';
        for (size_t i = 0; i <= size && rec.ncolumns < GEN_MAX_COLUMNS; i++) {
                struct w2j_column *c = &cols[rec.ncolumns];

                if (i < size && text[i] != ',')
                        continue;
                text[i] = '\0';
                snprintf(names[rec.ncolumns], sizeof(names[0]), "c%zu", rec.ncolumns);
                c->name = names[rec.ncolumns];
                c->value.ptr = text + start;
                c->value.len = i - start;
                c->value.is_null = false;
                c->value.was_number = is_number_text(c->value.ptr, c->value.len);
                c->type = c->value.was_number ? "numeric" : "text";
                rec.ncolumns++;
                start = i + 1;
        }
        rec.action = W2J_INSERT;
        rec.action_code = 'I';
        rec.xid = (uint32_t)size;
        rec.lsn = UINT64_C(0x1551298);
        rec.schema = "public";
        rec.table = cols[0].value.ptr;  /* the first piece names the table too */
        rec.columns = cols;
        check_reencoded(&rec);
        if (rec.ncolumns > 1) {
                bool as_array[GEN_MAX_COLUMNS] = {false};

                for (size_t i = 1; i < rec.ncolumns; i += 2)
                        as_array[i] = true;
                check_arrays(&rec, as_array);
        }
        free(text);
}

static void decode_and_check(struct w2j_decoder *d, const char *line, size_t len)
{
        struct w2j_record rec, untouched;
        int r;

        memset(&rec, 0xa5, sizeof(rec));
        memcpy(&untouched, &rec, sizeof(rec));
        r = w2j_decode(d, line, len, &rec);
        FUZZ_CHECK(r == 0 || r == -EBADMSG);
        if (r < 0) {
                FUZZ_CHECK(memcmp(&rec, &untouched, sizeof(rec)) == 0);
                return;
        }
        check_record(&rec, line, len);
        check_reencoded(&rec);
}

/*
 * The timestamp grammar of wal2json.h, written as a regex so that it is a
 * second, independent reading: date, ' ' or 'T', time, optional fraction,
 * offset hours with optional minutes and seconds.
 */
static const char ts_pattern[] =
        "^([0-9]{4})-([0-9]{2})-([0-9]{2})[ T]([0-9]{2}):([0-9]{2}):([0-9]{2})(\\.[0-9]+)?"
        "([+-])([0-9]{2})(:([0-9]{2})(:([0-9]{2}))?)?$";

static int field(const char *s, const regmatch_t *m)
{
        int v = 0;

        for (regoff_t i = m->rm_so; i < m->rm_eo; i++)
                v = v * 10 + (s[i] - '0');
        return v;
}

static void check_timestamp(const char *text, size_t len)
{
        static regex_t re;
        static bool compiled;
        regmatch_t m[14];
        char *buf;
        int64_t got = 0x5a5a5a5a, want;
        int r = w2j_parse_timestamp(text, len, &got);
        struct tm tm = {0};
        int64_t frac = 0;
        int sign, i;

        FUZZ_CHECK(r == 0 || r == -EINVAL);
        if (r < 0)
                FUZZ_CHECK(got == 0x5a5a5a5a);
        if (!compiled) {
                FUZZ_CHECK(regcomp(&re, ts_pattern, REG_EXTENDED) == 0);
                compiled = true;
        }
        if (memchr(text, '\0', len)) {
                FUZZ_CHECK(r == -EINVAL);
                return;
        }
        buf = strndup(text, len);
        FUZZ_CHECK(buf != NULL);
        if (regexec(&re, buf, 14, m, 0) != 0) {
                FUZZ_CHECK(r == -EINVAL);
                free(buf);
                return;
        }
        tm.tm_year = field(buf, &m[1]) - 1900;
        tm.tm_mon = field(buf, &m[2]) - 1;
        tm.tm_mday = field(buf, &m[3]);
        tm.tm_hour = field(buf, &m[4]);
        tm.tm_min = field(buf, &m[5]);
        tm.tm_sec = field(buf, &m[6]);
        if (tm.tm_mon < 0 || tm.tm_mon > 11 || tm.tm_mday < 1 || tm.tm_mday > 31 ||
            tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60) {
                FUZZ_CHECK(r == -EINVAL);
                free(buf);
                return;
        }
        /* Microseconds: the first six fraction digits, the rest dropped. */
        for (i = 0; i < 6; i++) {
                regoff_t at = m[7].rm_so + 1 + i;

                frac = frac * 10 + (m[7].rm_so >= 0 && at < m[7].rm_eo ? buf[at] - '0' : 0);
        }
        sign = buf[m[8].rm_so] == '-' ? -1 : 1;
        want = ((int64_t)timegm(&tm) - sign * (field(buf, &m[9]) * 3600 +
                (m[11].rm_so >= 0 ? field(buf, &m[11]) * 60 : 0) +
                (m[13].rm_so >= 0 ? field(buf, &m[13]) : 0))) * INT64_C(1000000) + frac;
        free(buf);
        FUZZ_CHECK(r == 0);
        FUZZ_CHECK(got == want);
}

static bool plain_ident_char(unsigned char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c >= 0x80;
}

/*
 * Escape the bytes before the first NUL into heap buffers of every size
 * around the one needed, so that AddressSanitizer sees a write past the end,
 * and undo the escaping.
 */
static void check_escape(const uint8_t *data, size_t size)
{
        char ident[65];
        size_t n = 0, want = 0;

        while (n < size && n < sizeof(ident) - 1 && data[n] != 0) {
                ident[n] = (char)data[n];
                want += plain_ident_char(data[n]) ? 1 : 2;
                n++;
        }
        ident[n] = '\0';
        for (size_t bufsize = want > 1 ? want - 1 : 1; bufsize <= want + 2; bufsize++) {
                char *buf = malloc(bufsize);
                int r;

                FUZZ_CHECK(buf != NULL);
                r = w2j_escape_table_name(ident, buf, bufsize);
                if (r < 0) {
                        FUZZ_CHECK(r == -ENOSPC);
                        /*
                         * The header promises -ENOSPC only for a buffer that is too
                         * small, want + 1 bytes being enough; the code asks for one
                         * spare byte more when the last character needs no
                         * escape. Harmless for relay.c, which allocates twice the
                         * length plus three; see the fuzzing report.
                         */
                        FUZZ_CHECK(bufsize < want + 2);
                } else {
                        size_t o = 0;

                        FUZZ_CHECK((size_t)r == want && bufsize > want && buf[want] == '\0');
                        for (size_t i = 0; i < n; i++) {
                                if (!plain_ident_char((unsigned char)ident[i]))
                                        FUZZ_CHECK(buf[o++] == '\\');
                                FUZZ_CHECK(buf[o++] == ident[i]);
                        }
                        FUZZ_CHECK(o == want);
                }
                free(buf);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *line = (const char *)data;
        struct w2j_decoder *d = w2j_decoder_new();

        FUZZ_CHECK(d != NULL);
        decode_and_check(d, line, size);
        /* Several lines: one decoder for all of them, reusing its buffers. */
        if (memchr(line, '\n', size)) {
                const char *p = line, *end = line + size;

                while (p < end) {
                        const char *nl = memchr(p, '\n', (size_t)(end - p));
                        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);

                        decode_and_check(d, p, n);
                        if (!nl)
                                break;
                        p = nl + 1;
                }
        }
        w2j_decoder_free(d);
        check_generated(data, size);
        check_timestamp(line, size);
        check_escape(data, size);
        return 0;
}
