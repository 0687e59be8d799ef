// SPDX-License-Identifier: Apache-2.0
/*
 * wal2json format-version 2 decoder: bare numbers are rewritten into strings
 * (so their text survives), the line is parsed with cJSON, and the fields the
 * relay needs are looked up case-sensitively. See wal2json.h for the format.
 */
#include "wal2json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "civil.h"
#include "lsn.h"

/*
 * cJSON allocates every node and string with malloc, which dominated the
 * relay's profile. While w2j_decode() parses, allocations come from the
 * decoder's arena instead, and the whole tree is dropped at once by
 * resetting it. Every block carries a 16-byte tag so that the free hook
 * tells arena blocks (ignored) from ordinary ones (freed), and cJSON used
 * elsewhere in the process keeps working.
 */
#define ARENA_TAG 16
#define ARENA_MAGIC UINT64_C(0x77326a6172656e61)   /* "w2jarena" */
#define HEAP_MAGIC UINT64_C(0x77326a6865617021)    /* "w2jheap!" */
#define ARENA_CHUNK ((size_t)64 * 1024)
#define ARENA_KEEP ((size_t)4 * 1024 * 1024)       /* shrink back to one chunk above this */

struct arena_chunk {
        struct arena_chunk *next;
        size_t used, cap;
        max_align_t data[];
};

struct w2j_decoder {
        struct arena_chunk *chunks;  /* newest first */
        char *buf;               /* the line with bare numbers quoted */
        size_t cap;
        cJSON *root;
        struct w2j_column *cols;
        size_t cols_cap;
        unsigned char *numflags; /* per column: value was a bare number */
};

static _Thread_local struct w2j_decoder *arena_owner;

static struct arena_chunk *chunk_new(size_t cap, struct arena_chunk *next)
{
        struct arena_chunk *c = malloc(sizeof(*c) + cap);

        if (c) {
                c->next = next;
                c->used = 0;
                c->cap = cap;
        }
        return c;
}

static void *hook_malloc(size_t size)
{
        struct w2j_decoder *d = arena_owner;
        size_t need = ARENA_TAG + ((size + 15) & ~(size_t)15);
        struct arena_chunk *c;
        char *p;

        if (!d) {
                p = malloc(ARENA_TAG + size);
                if (!p)
                        return NULL;
                *(uint64_t *)p = HEAP_MAGIC;
                return p + ARENA_TAG;
        }
        c = d->chunks;
        if (!c || c->cap - c->used < need) {
                size_t cap = ARENA_CHUNK;

                while (cap < need)
                        cap *= 2;
                c = chunk_new(cap, d->chunks);
                if (!c)
                        return NULL;
                d->chunks = c;
        }
        p = (char *)c->data + c->used;
        c->used += need;
        *(uint64_t *)p = ARENA_MAGIC;
        return p + ARENA_TAG;
}

static void hook_free(void *ptr)
{
        char *p;

        if (!ptr)
                return;
        p = (char *)ptr - ARENA_TAG;
        if (*(uint64_t *)p == HEAP_MAGIC)
                free(p);
        /* Arena blocks go with arena_reset(). */
}

/* Drop everything the last parse allocated; keep one chunk big enough for the next. */
static void arena_reset(struct w2j_decoder *d)
{
        size_t total = 0;
        struct arena_chunk *c, *next;

        if (!d->chunks)
                return;
        if (!d->chunks->next && d->chunks->cap <= ARENA_KEEP) {
                d->chunks->used = 0;
                return;
        }
        for (c = d->chunks; c; c = next) {
                next = c->next;
                total += c->cap;
                free(c);
        }
        d->chunks = chunk_new(total > ARENA_KEEP ? ARENA_CHUNK : total, NULL);
}

/*
 * The hooks are process-wide, and hook_free() reads the tag in front of every
 * block: a block cJSON allocated before they were installed has none. So they
 * go in before main() runs, in every program that links this module, and no
 * cJSON block ever predates them.
 */
__attribute__((constructor)) static void install_hooks(void)
{
        static cJSON_Hooks hooks = {hook_malloc, hook_free};

        cJSON_InitHooks(&hooks);
}

struct w2j_decoder *w2j_decoder_new(void)
{
        return calloc(1, sizeof(struct w2j_decoder));
}

struct w2j_decoder *w2j_decoder_free(struct w2j_decoder *d)
{
        struct arena_chunk *c, *next;

        if (!d)
                return NULL;
        for (c = d->chunks; c; c = next) {
                next = c->next;
                free(c);
        }
        free(d->buf);
        free(d->cols);
        free(d);
        return NULL;
}

static bool is_digit(char c)
{
        return c >= '0' && c <= '9';
}

/*
 * Length of the JSON number (RFC 8259 section 6) at @p, or of the words
 * NaN, Infinity, -Infinity that a float column may hold; 0 if none.
 */
static size_t number_token(const char *p, const char *end)
{
        const char *s = p;

        if (s < end && *s == '-')
                s++;
        if ((size_t)(end - s) >= 8 && memcmp(s, "Infinity", 8) == 0)
                return (size_t)(s + 8 - p);
        if (s == p && (size_t)(end - s) >= 3 && memcmp(s, "NaN", 3) == 0)
                return 3;
        if (s >= end || !is_digit(*s))
                return 0;
        if (*s == '0')
                s++;
        else
                while (s < end && is_digit(*s))
                        s++;
        if (s < end && *s == '.') {
                s++;
                if (s >= end || !is_digit(*s))
                        return 0;
                while (s < end && is_digit(*s))
                        s++;
        }
        if (s < end && (*s == 'e' || *s == 'E')) {
                s++;
                if (s < end && (*s == '+' || *s == '-'))
                        s++;
                if (s >= end || !is_digit(*s))
                        return 0;
                while (s < end && is_digit(*s))
                        s++;
        }
        return (size_t)(s - p);
}

/*
 * Copy @line into d->buf with every bare number N rewritten as ["N"]: a JSON
 * array holding the number's text as a string. wal2json writes no array
 * where a scalar belongs, so after parsing an array of one string is a
 * number whose text survived (a real array starting with a string is refused,
 * so the shape cannot be forged), and strings keep every byte: they are copied
 * verbatim, escapes included, whatever they hold (a binary logical message
 * carries raw non-UTF-8 bytes). Sets *ret_suspect if a string holds a NUL
 * byte or a \u0000 escape, at which cJSON would cut it short, or a raw
 * control character, which PostgreSQL's escape_json never writes (RFC 8259
 * section 7 requires them escaped).
 * Returns the length of the rewritten text or a negative errno.
 */
static int quote_numbers(struct w2j_decoder *d, const char *line, size_t len, bool *ret_suspect)
{
        static const unsigned char string_stop[256] = {
                1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  /* 0x00-0x0f */
                1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  /* 0x10-0x1f */
                ['"'] = 1, ['\\'] = 1,
        };
        const char *p = line, *end = line + len;
        bool has_nul = false;
        size_t need, o = 0;

        /*
         * Worst case: every byte a number token of its own ("00" is two tokens:
         * a leading zero ends one), each becoming five bytes: [ " digit " ].
         */
        need = len * 5 + 1;
        if (need > d->cap) {
                char *nb = realloc(d->buf, need);

                if (!nb)
                        return -ENOMEM;
                d->buf = nb;
                d->cap = need;
        }
        while (p < end) {
                char c = *p;

                if (c == '"') {
                        /* A string: copy plain runs in bulk, look at what stops them. */
                        d->buf[o++] = *p++;
                        for (;;) {
                                const char *q = p;

                                while (q < end && !string_stop[(unsigned char)*q])
                                        q++;
                                memcpy(d->buf + o, p, (size_t)(q - p));
                                o += (size_t)(q - p);
                                p = q;
                                if (p >= end)
                                        return -EBADMSG;  /* unterminated */
                                if (*p == '"') {
                                        d->buf[o++] = *p++;
                                        break;
                                }
                                if ((unsigned char)*p < 0x20) {
                                        has_nul = true;
                                        d->buf[o++] = *p++;
                                        continue;
                                }
                                if (p + 1 >= end)
                                        return -EBADMSG;
                                if (p[1] == 'u' && end - p >= 6 && memcmp(p + 2, "0000", 4) == 0)
                                        has_nul = true;
                                d->buf[o++] = p[0];
                                d->buf[o++] = p[1];
                                p += 2;
                        }
                        continue;
                }
                if (c == '-' || is_digit(c) || c == 'N' || c == 'I') {
                        size_t n = number_token(p, end);

                        if (n == 0)
                                return -EBADMSG;
                        d->buf[o++] = '[';
                        d->buf[o++] = '"';
                        memcpy(d->buf + o, p, n);
                        o += n;
                        d->buf[o++] = '"';
                        d->buf[o++] = ']';
                        p += n;
                        continue;
                }
                if (c == '[') {
                        /* wal2json's arrays hold objects; ["..."] would pass for a number. */
                        const char *q = p + 1;

                        while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
                                q++;
                        if (q < end && *q == '"')
                                return -EBADMSG;
                }
                if (c == '\0')
                        return -EBADMSG;
                d->buf[o++] = c;
                p++;
        }
        d->buf[o] = '\0';
        *ret_suspect = has_nul;
        return (int)o;
}

/* The text of a number rewritten by quote_numbers(), or NULL if @it is not one. */
static const char *number_text(const cJSON *it)
{
        const cJSON *only = cJSON_IsArray(it) ? it->child : NULL;
        size_t n;

        if (!only || only->next || !cJSON_IsString(only))
                return NULL;
        n = strlen(only->valuestring);
        return n && number_token(only->valuestring, only->valuestring + n) == n ? only->valuestring
                                                                                 : NULL;
}

/*
 * One pass over @obj's members: @ret[i] is the first member named @names[i]
 * (case-sensitive, as cJSON_GetObjectItemCaseSensitive() finds it), or
 * NULL. A lookup per name would compare every member before it, and a
 * missing one all of them: per row, most of the decoder's strcmp() calls.
 */
static void members(const cJSON *obj, const char *const *names, size_t n, const cJSON **ret)
{
        for (size_t i = 0; i < n; i++)
                ret[i] = NULL;
        for (const cJSON *it = obj->child; it; it = it->next) {
                const char *k = it->string;

                if (!k)
                        continue;
                for (size_t i = 0; i < n; i++) {
                        if (!ret[i] && k[0] == names[i][0] && strcmp(k, names[i]) == 0) {
                                ret[i] = it;
                                break;
                        }
                }
        }
}

static const char *string_of(const cJSON *it)
{
        return cJSON_IsString(it) ? it->valuestring : NULL;
}

static int lsn_of(const cJSON *it, uint64_t *ret)
{
        if (!it || cJSON_IsNull(it))
                return 0;
        if (!cJSON_IsString(it))
                return -EBADMSG;
        return lsn_parse(it->valuestring, strlen(it->valuestring), ret) < 0 ? -EBADMSG : 0;
}

static int decode_columns(struct w2j_decoder *d, const cJSON *arr, struct w2j_record *rec)
{
        size_t n = 0, i = 0;
        const cJSON *col;

        if (!cJSON_IsArray(arr))
                return -EBADMSG;
        cJSON_ArrayForEach(col, arr)
                n++;
        if (n > d->cols_cap) {
                struct w2j_column *nc = realloc(d->cols, n * sizeof(*nc));

                if (!nc)
                        return -ENOMEM;
                d->cols = nc;
                d->cols_cap = n;
        }
        cJSON_ArrayForEach(col, arr) {
                static const char *const names[] = {"name", "typeoid", "value", "type"};
                enum { NAME, TYPEOID, VALUE, TYPE };
                const cJSON *m[4];
                struct w2j_column *c = &d->cols[i++];
                const cJSON *v;
                const char *oid;

                if (!cJSON_IsObject(col))
                        return -EBADMSG;
                members(col, names, 4, m);
                c->name = string_of(m[NAME]);
                c->type = string_of(m[TYPE]);
                c->typeoid = 0;
                oid = number_text(m[TYPEOID]);
                if (oid) {
                        char *end;
                        unsigned long num;

                        errno = 0;
                        num = strtoul(oid, &end, 10);
                        if (*end || errno || num == 0 || num > UINT32_MAX || oid[0] == '-')
                                return -EBADMSG;
                        c->typeoid = (uint32_t)num;
                }
                /* include-types gives "type", include-type-oids "typeoid": one of them, at least. */
                if (!c->name || (!c->type && !c->typeoid))
                        return -EBADMSG;
                v = m[VALUE];
                c->value.was_number = false;
                if (cJSON_IsNull(v)) {
                        c->value.ptr = NULL;
                        c->value.len = 0;
                        c->value.is_null = true;
                } else if (cJSON_IsString(v)) {
                        c->value.ptr = v->valuestring;
                        c->value.len = strlen(c->value.ptr);
                        c->value.is_null = false;
                } else if ((c->value.ptr = number_text(v)) != NULL) {
                        c->value.was_number = true;
                        c->value.len = strlen(c->value.ptr);
                        c->value.is_null = false;
                } else if (cJSON_IsBool(v)) {
                        c->value.ptr = cJSON_IsTrue(v) ? "true" : "false";
                        c->value.len = strlen(c->value.ptr);
                        c->value.is_null = false;
                } else {
                        /* Absent (unchanged TOAST in an UPDATE) or a nested value. */
                        return -EBADMSG;
                }
        }
        rec->ncolumns = n;
        rec->columns = d->cols;
        return 0;
}

int w2j_decode(struct w2j_decoder *d, const char *line, size_t len, struct w2j_record *ret_rec)
{
        /* In the order wal2json writes them (wal2json.c, format-version 2). */
        static const char *const root_names[] = {
                "action", "xid", "lsn", "nextlsn", "timestamp", "schema", "table", "columns",
                "transactional", "prefix", "content",
        };
        enum { ACTION, XID, LSN, NEXTLSN, TIMESTAMP, SCHEMA, TABLE, COLUMNS, TRANSACTIONAL, PREFIX, CONTENT,
               ROOT_NAMES };
        const cJSON *m[ROOT_NAMES];
        struct w2j_record rec = {0};
        const char *action, *xid, *parse_end = NULL;
        const cJSON *it;
        bool has_nul = false;
        int r;

        if (len > W2J_MAX_LINE)
                return -E2BIG;
        d->root = NULL;
        arena_reset(d);
        r = quote_numbers(d, line, len, &has_nul);
        if (r < 0)
                return r;
        arena_owner = d;
        d->root = cJSON_ParseWithLengthOpts(d->buf, (size_t)r, &parse_end, false);
        arena_owner = NULL;
        if (!d->root)
                return -EBADMSG;
        /* Only whitespace may follow the object. */
        while (parse_end && parse_end < d->buf + r &&
               (*parse_end == ' ' || *parse_end == '\n' || *parse_end == '\t' || *parse_end == '\r'))
                parse_end++;
        if (!cJSON_IsObject(d->root) || parse_end != d->buf + r)
                return -EBADMSG;

        members(d->root, root_names, ROOT_NAMES, m);
        action = string_of(m[ACTION]);
        if (!action || strlen(action) != 1)
                return -EBADMSG;
        rec.action_code = action[0];
        switch (action[0]) {
        case 'B': rec.action = W2J_BEGIN; break;
        case 'C': rec.action = W2J_COMMIT; break;
        case 'I': rec.action = W2J_INSERT; break;
        case 'U': rec.action = W2J_UPDATE; break;
        case 'D': rec.action = W2J_DELETE; break;
        case 'T': rec.action = W2J_TRUNCATE; break;
        case 'M': rec.action = W2J_MESSAGE; break;
        default: rec.action = W2J_UNKNOWN; break;
        }

        /* A non-transactional logical message has "xid":null and "timestamp":null. */
        it = m[XID];
        if (it && !cJSON_IsNull(it)) {
                char *e;
                unsigned long long v;

                xid = number_text(it);
                if (!xid || !is_digit(xid[0]))
                        return -EBADMSG;
                errno = 0;
                v = strtoull(xid, &e, 10);
                if (errno || *e || v > UINT32_MAX)
                        return -EBADMSG;
                rec.xid = (uint32_t)v;
        }
        if (lsn_of(m[LSN], &rec.lsn) < 0 || lsn_of(m[NEXTLSN], &rec.next_lsn) < 0)
                return -EBADMSG;
        it = m[TIMESTAMP];
        if (it && !cJSON_IsNull(it)) {
                rec.timestamp = string_of(it);
                if (!rec.timestamp ||
                    w2j_parse_timestamp(rec.timestamp, strlen(rec.timestamp), &rec.commit_time_us) < 0)
                        return -EBADMSG;
        }
        if (rec.action == W2J_BEGIN || rec.action == W2J_COMMIT) {
                if (rec.next_lsn == LSN_INVALID)
                        return -EBADMSG;
        }
        if (rec.action == W2J_INSERT || rec.action == W2J_UPDATE || rec.action == W2J_DELETE ||
            rec.action == W2J_TRUNCATE) {
                rec.schema = string_of(m[SCHEMA]);
                rec.table = string_of(m[TABLE]);
                /* No name or value of a table holds a NUL or raw control: the line is broken. */
                if (!rec.schema || !rec.table || has_nul)
                        return -EBADMSG;
        }
        if (rec.action == W2J_MESSAGE) {
                it = m[TRANSACTIONAL];
                if (it && !cJSON_IsBool(it))
                        return -EBADMSG;
                rec.transactional = cJSON_IsTrue(it);
                it = m[PREFIX];
                if (it && !cJSON_IsString(it))
                        return -EBADMSG;
                rec.prefix = it ? it->valuestring : NULL;
                it = m[CONTENT];
                if (it && !cJSON_IsString(it))
                        return -EBADMSG;
                rec.content = it ? it->valuestring : NULL;
                rec.content_len = it ? strlen(it->valuestring) : 0;
                /* Decoded all the same: only a message the relay publishes must be whole. */
                rec.suspect = has_nul;
        }
        if (rec.action == W2J_INSERT || rec.action == W2J_UPDATE) {
                r = decode_columns(d, m[COLUMNS], &rec);
                if (r < 0)
                        return r;
        }
        *ret_rec = rec;
        return 0;
}

static int parse_digits(const char **p, const char *end, int n, int *ret)
{
        int v = 0;

        for (int i = 0; i < n; i++, (*p)++) {
                if (*p >= end || !is_digit(**p))
                        return -EINVAL;
                v = v * 10 + (**p - '0');
        }
        *ret = v;
        return 0;
}

int w2j_parse_timestamp(const char *text, size_t len, int64_t *ret_us)
{
        const char *p = text, *end = text + len;
        int y, mo, d, h, mi, s, oh = 0, om = 0, os = 0, sign;
        int64_t frac = 0, us;
        int fdigits = 0;

        if (parse_digits(&p, end, 4, &y) < 0 || p >= end || *p++ != '-' ||
            parse_digits(&p, end, 2, &mo) < 0 || p >= end || *p++ != '-' ||
            parse_digits(&p, end, 2, &d) < 0 || p >= end || (*p != ' ' && *p != 'T'))
                return -EINVAL;
        p++;
        if (parse_digits(&p, end, 2, &h) < 0 || p >= end || *p++ != ':' ||
            parse_digits(&p, end, 2, &mi) < 0 || p >= end || *p++ != ':' ||
            parse_digits(&p, end, 2, &s) < 0)
                return -EINVAL;
        if (p < end && *p == '.') {
                p++;
                while (p < end && is_digit(*p)) {
                        if (fdigits < 6) {
                                frac = frac * 10 + (*p - '0');
                                fdigits++;
                        }
                        p++;
                }
                if (fdigits == 0)
                        return -EINVAL;
                for (; fdigits < 6; fdigits++)
                        frac *= 10;
        }
        if (p >= end || (*p != '+' && *p != '-'))
                return -EINVAL;
        sign = *p++ == '-' ? -1 : 1;
        if (parse_digits(&p, end, 2, &oh) < 0)
                return -EINVAL;
        if (p < end && *p == ':') {
                p++;
                if (parse_digits(&p, end, 2, &om) < 0)
                        return -EINVAL;
                if (p < end && *p == ':') {
                        p++;
                        if (parse_digits(&p, end, 2, &os) < 0)
                                return -EINVAL;
                }
        }
        if (p != end || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60)
                return -EINVAL;
        us = ((civil_days(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) -
              sign * (oh * 3600 + om * 60 + os)) * INT64_C(1000000) + frac;
        *ret_us = us;
        return 0;
}

int w2j_escape_table_name(const char *ident, char *buf, size_t size)
{
        size_t o = 0;

        for (const unsigned char *p = (const unsigned char *)ident; *p; p++) {
                bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                             (*p >= '0' && *p <= '9') || *p == '_' || *p >= 0x80;

                /* This byte (escaped or not) and the terminator must fit. */
                if (o + (plain ? 1 : 2) + 1 > size)
                        return -ENOSPC;
                if (!plain)
                        buf[o++] = '\\';
                buf[o++] = (char)*p;
        }
        if (o + 1 > size)
                return -ENOSPC;
        buf[o] = '\0';
        return (int)o;
}

/* pg_type OIDs (PostgreSQL src/include/catalog/pg_type.dat). */
enum {
        OID_BOOL = 16, OID_BYTEA = 17, OID_INT8 = 20, OID_INT2 = 21, OID_INT4 = 23, OID_OID = 26,
        OID_FLOAT4 = 700, OID_FLOAT8 = 701, OID_NUMERIC = 1700,
};

void w2j_value_from_text(uint32_t typeoid, const char *text, size_t len, bool is_null,
                         struct w2j_value *ret_val)
{
        *ret_val = (struct w2j_value){text, len, false, false};
        if (is_null) {
                *ret_val = (struct w2j_value){NULL, 0, true, false};
                return;
        }
        switch (typeoid) {
        case OID_BOOL:
                /* wal2json: "t" is true, anything else false */
                ret_val->ptr = strcmp(text, "t") == 0 ? "true" : "false";
                ret_val->len = strlen(ret_val->ptr);
                return;
        case OID_BYTEA:
                /* wal2json writes the hex form without its "\x" */
                if (len >= 2 && text[0] == '\\' && text[1] == 'x') {
                        ret_val->ptr = text + 2;
                        ret_val->len = len - 2;
                }
                return;
        case OID_INT2:
        case OID_INT4:
        case OID_INT8:
        case OID_OID:
        case OID_FLOAT4:
        case OID_FLOAT8:
        case OID_NUMERIC:
                /* NaN and the infinities are not JSON numbers: wal2json writes null */
                if (strncasecmp(text, "NaN", 3) == 0 || strncasecmp(text, "Infinity", 8) == 0 ||
                    strncasecmp(text, "-Infinity", 9) == 0)
                        *ret_val = (struct w2j_value){NULL, 0, true, false};
                else
                        ret_val->was_number = true;
                return;
        default:
                return;
        }
}
