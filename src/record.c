// SPDX-License-Identifier: Apache-2.0
/*
 * Outbox row -> Kafka record parts, the --topic template, column headers and
 * the headers column. Pure: no I/O.
 */
#include "record.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pgjson.h"

enum { COL_ID, COL_KEY, COL_PAYLOAD, COL_TYPE, COL_FIXED };

struct segment {
        char *literal;  /* text, or NULL for a column reference */
        size_t len;
        size_t column;  /* index into names[] */
};

struct record_spec {
        char **names;           /* COL_FIXED fixed columns, then template columns */
        size_t nnames;
        struct segment *segs;
        size_t nsegs;
        const struct w2j_value **found; /* per name, scratch */
        const struct w2j_column **found_col; /* per name, scratch */
        uint32_t *json_types;           /* OIDs PostgreSQL checks as JSON: json, jsonb, domains over them */
        size_t njson_types;
        bool allow_null_payload;
        char topic[RECORD_TOPIC_MAX + 2];
        char *headers_column;           /* NULL: no extra headers */
        cJSON *headers_json;            /* the last row's parsed headers column, scratch */
        struct record_header headers[RECORD_HEADERS_MAX];
        char *hcols[RECORD_COLUMN_HEADERS_MAX];   /* column headers: the columns, */
        char *hnames[RECORD_COLUMN_HEADERS_MAX];  /* their header names */
        const struct w2j_value *hfound[RECORD_COLUMN_HEADERS_MAX]; /* per column, scratch */
        size_t nhcols;
};

struct record_spec *record_spec_free(struct record_spec *spec)
{
        if (!spec)
                return NULL;
        for (size_t i = 0; i < spec->nnames; i++)
                free(spec->names[i]);
        for (size_t i = 0; i < spec->nsegs; i++)
                free(spec->segs[i].literal);
        free(spec->names);
        free(spec->segs);
        free(spec->found);
        free(spec->found_col);
        free(spec->json_types);
        free(spec->headers_column);
        cJSON_Delete(spec->headers_json);
        for (size_t i = 0; i < spec->nhcols; i++) {
                free(spec->hcols[i]);
                free(spec->hnames[i]);
        }
        free(spec);
        return NULL;
}

static int add_name(struct record_spec *s, const char *name, size_t len, size_t *ret_idx)
{
        char **nn;

        for (size_t i = COL_FIXED; i < s->nnames; i++) {
                if (strlen(s->names[i]) == len && memcmp(s->names[i], name, len) == 0) {
                        *ret_idx = i;
                        return 0;
                }
        }
        nn = realloc(s->names, (s->nnames + 1) * sizeof(*nn));
        if (!nn)
                return -ENOMEM;
        s->names = nn;
        nn[s->nnames] = strndup(name, len);
        if (!nn[s->nnames])
                return -ENOMEM;
        *ret_idx = s->nnames++;
        return 0;
}

static int add_seg(struct record_spec *s, const char *lit, size_t len, size_t column)
{
        struct segment *ns = realloc(s->segs, (s->nsegs + 1) * sizeof(*ns));

        if (!ns)
                return -ENOMEM;
        s->segs = ns;
        ns[s->nsegs] = (struct segment){NULL, len, column};
        if (lit) {
                ns[s->nsegs].literal = strndup(lit, len);
                if (!ns[s->nsegs].literal)
                        return -ENOMEM;
        }
        s->nsegs++;
        return 0;
}

int record_spec_new(const char *id_column, const char *key_column, const char *payload_column,
                    const char *type_column, const char *template, struct record_spec **ret_spec,
                    char *err, size_t errlen)
{
        struct record_spec *s = calloc(1, sizeof(*s));
        const char *fixed[COL_FIXED] = {id_column, key_column, payload_column, type_column};
        const char *p = template, *lit = template;
        int r = -ENOMEM;

        if (!s)
                return -ENOMEM;
        s->names = calloc(COL_FIXED, sizeof(*s->names));
        if (!s->names)
                goto fail;
        s->nnames = COL_FIXED;
        for (int i = 0; i < COL_FIXED; i++)
                if (!(s->names[i] = strdup(fixed[i])))
                        goto fail;
        while (*p) {
                const char *end;
                size_t idx;

                if (p[0] != '$' || p[1] != '{') {
                        p++;
                        continue;
                }
                end = strchr(p + 2, '}');
                if (!end || end == p + 2) {
                        snprintf(err, errlen,
                                 "invalid --topic \"%s\": \"${\" must be followed by a column "
                                 "name and \"}\", e.g. outbox.${kind}", template);
                        r = -EINVAL;
                        goto fail;
                }
                if (p > lit && add_seg(s, lit, (size_t)(p - lit), 0) < 0)
                        goto fail;
                if (add_name(s, p + 2, (size_t)(end - p - 2), &idx) < 0 || add_seg(s, NULL, 0, idx) < 0)
                        goto fail;
                p = lit = end + 1;
        }
        if (p > lit && add_seg(s, lit, (size_t)(p - lit), 0) < 0)
                goto fail;
        s->found = calloc(s->nnames, sizeof(*s->found));
        s->found_col = calloc(s->nnames, sizeof(*s->found_col));
        if (!s->found || !s->found_col)
                goto fail;
        *ret_spec = s;
        return 0;
fail:
        record_spec_free(s);
        return r;
}

void record_spec_allow_null_payload(struct record_spec *spec, bool allow)
{
        spec->allow_null_payload = allow;
}

int record_spec_set_headers_column(struct record_spec *spec, const char *name)
{
        char *copy = strdup(name);

        if (!copy)
                return -ENOMEM;
        free(spec->headers_column);
        spec->headers_column = copy;
        return 0;
}

int record_spec_add_column_header(struct record_spec *spec, const char *column, const char *header,
                                  char *err, size_t errlen)
{
        size_t n = strlen(header), i = spec->nhcols;

        if (!column[0] || n == 0 || n > RECORD_HEADER_NAME_MAX) {
                if (!column[0])
                        snprintf(err, errlen, "--column-header \"=%.40s%s\": the column name is "
                                 "empty", header, n > 40 ? "..." : "");
                else
                        snprintf(err, errlen, "--column-header \"%s=%.40s%s\": the header name has "
                                 "%zu bytes; names need 1 to %d", column, header,
                                 n > 40 ? "..." : "", n, RECORD_HEADER_NAME_MAX);
                return -EINVAL;
        }
        if (record_header_reserved(header)) {
                snprintf(err, errlen, "--column-header \"%s=%s\": the header name \"%s\" is "
                         "reserved for the relay's own headers (ce_*, outbox_relay_*, "
                         "content-type, in any case); choose another name", column, header, header);
                return -EINVAL;
        }
        for (size_t j = 0; j < spec->nhcols; j++) {
                if (strcmp(spec->hnames[j], header) == 0) {
                        snprintf(err, errlen, "--column-header \"%s=%s\": header \"%s\" is "
                                 "already published from column \"%s\"", column, header, header,
                                 spec->hcols[j]);
                        return -EINVAL;
                }
        }
        if (i == RECORD_COLUMN_HEADERS_MAX) {
                snprintf(err, errlen, "--column-header \"%s=%s\": at most %d columns can be "
                         "published as headers", column, header, RECORD_COLUMN_HEADERS_MAX);
                return -EINVAL;
        }
        spec->hcols[i] = strdup(column);
        spec->hnames[i] = strdup(header);
        if (!spec->hcols[i] || !spec->hnames[i]) {
                free(spec->hcols[i]);
                free(spec->hnames[i]);
                return -ENOMEM;
        }
        spec->nhcols++;
        return 0;
}

/* PostgreSQL's pg_type OIDs of json and jsonb (src/include/catalog/pg_type.dat). */
#define JSON_OID 114
#define JSONB_OID 3802

int record_spec_set_json_types(struct record_spec *spec, const uint32_t *oids, size_t n)
{
        uint32_t *copy = calloc(n ? n : 1, sizeof(*copy));

        if (!copy)
                return -ENOMEM;
        memcpy(copy, oids, n * sizeof(*copy));
        free(spec->json_types);
        spec->json_types = copy;
        spec->njson_types = n;
        return 0;
}

/*
 * json and jsonb text (and a domain's over them) was checked by PostgreSQL
 * on input; other types were not. A domain not told is treated as text: its
 * text passes the check anyway.
 */
static bool is_json_column(const struct record_spec *spec, const struct w2j_column *c)
{
        if (c->typeoid == JSON_OID || c->typeoid == JSONB_OID)
                return true;
        for (size_t i = 0; c->typeoid && i < spec->njson_types; i++)
                if (spec->json_types[i] == c->typeoid)
                        return true;
        return c->type && (strcmp(c->type, "jsonb") == 0 || strcmp(c->type, "json") == 0);
}

/* The column's type for messages: its name, or its OID (pg_type.dat names the built-in ones). */
static const char *type_text(const struct w2j_column *c, char *buf, size_t size)
{
        static const struct {
                uint32_t oid;
                const char *name;
        } names[] = {
                {17, "bytea"}, {18, "\"char\""}, {19, "name"}, {25, "text"}, {114, "json"},
                {142, "xml"}, {1042, "character"}, {1043, "character varying"}, {3802, "jsonb"},
        };

        if (c->type)
                return c->type;
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (names[i].oid == c->typeoid)
                        return names[i].name;
        snprintf(buf, size, "OID %u", (unsigned)c->typeoid);
        return buf;
}

void record_spec_template_columns(const struct record_spec *spec, const char *const **ret_names,
                                  size_t *ret_n)
{
        *ret_names = (const char *const *)spec->names + COL_FIXED;
        *ret_n = spec->nnames - COL_FIXED;
}

static bool valid_topic_char(char c)
{
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
}

/*
 * Render the topic template into spec->topic. Returns 0, -EINVAL for a NULL
 * template column, -EDOM for a name Kafka refuses; sets *ret_len when the
 * text was rendered (also when refused for its characters), else SIZE_MAX.
 */
static int render_topic(struct record_spec *spec, const struct w2j_value **f, size_t *ret_len,
                        char *err, size_t errlen)
{
        size_t o = 0;

        *ret_len = SIZE_MAX;
        for (size_t s = 0; s < spec->nsegs; s++) {
                const struct segment *g = &spec->segs[s];
                const char *text = g->literal;
                size_t len = g->len;

                if (!text) {
                        if (f[g->column]->is_null) {
                                snprintf(err, errlen, "the topic template column \"%s\" is NULL",
                                         spec->names[g->column]);
                                return -EINVAL;
                        }
                        text = f[g->column]->ptr;
                        len = f[g->column]->len;
                }
                if (o + len > RECORD_TOPIC_MAX) {
                        snprintf(err, errlen, "the topic rendered from the template is longer "
                                 "than Kafka's %d bytes", RECORD_TOPIC_MAX);
                        return -EDOM;
                }
                memcpy(spec->topic + o, text, len);
                o += len;
        }
        spec->topic[o] = '\0';
        *ret_len = o;
        for (size_t i = 0; i < o; i++) {
                if (!valid_topic_char(spec->topic[i])) {
                        snprintf(err, errlen, "the topic \"%.*s\" is not a valid Kafka topic name "
                                 "(only letters, digits, '.', '_' and '-' are allowed)",
                                 (int)(o > 300 ? 300 : o), spec->topic);
                        return -EDOM;
                }
        }
        if (o == 0 || (o == 1 && spec->topic[0] == '.') ||
            (o == 2 && spec->topic[0] == '.' && spec->topic[1] == '.')) {
                snprintf(err, errlen, "the topic \"%s\" is not a valid Kafka topic name", spec->topic);
                return -EDOM;
        }
        return 0;
}

static const char *json_kind(const cJSON *j)
{
        return cJSON_IsObject(j) ? "object" : cJSON_IsArray(j) ? "array" :
               cJSON_IsString(j) ? "string" : cJSON_IsNumber(j) ? "number" :
               cJSON_IsBool(j) ? "boolean" : cJSON_IsNull(j) ? "null" : "value";
}

bool record_header_reserved(const char *name)
{
        return strncasecmp(name, "ce_", 3) == 0 || strncasecmp(name, "outbox_relay_", 13) == 0 ||
               strcasecmp(name, "content-type") == 0;
}

#define HEADERS_FIX "; store NULL or a JSON object of string values, e.g. " \
        "{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}"

/*
 * Parse the headers column @v (named @col, of SQL type @type) into
 * spec->headers from index @first on (the row's column headers are before
 * it). Returns the number of pairs, or -EBADMSG with the reason.
 */
static int extract_headers(struct record_spec *spec, const struct w2j_value *v, const char *col,
                           const char *type, size_t first, char *err, size_t errlen)
{
        const cJSON *j, *it;
        const char *end = NULL;
        size_t n = 0;

        cJSON_Delete(spec->headers_json);
        spec->headers_json = NULL;
        if (v->is_null)
                return 0;
        if (pgjson_has_nul_escape(v->ptr, v->len)) {
                snprintf(err, errlen, "the headers column \"%s\" holds a \\u0000 escape, which a "
                         "header cannot carry" HEADERS_FIX, col);
                return -EBADMSG;
        }
        spec->headers_json = cJSON_ParseWithLengthOpts(v->ptr, v->len, &end, false);
        j = spec->headers_json;
        /* cJSON stops after the first value: anything but white space after it is not JSON. */
        while (j && end && end < v->ptr + v->len &&
               (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
                end++;
        if (!j || end != v->ptr + v->len) {
                snprintf(err, errlen, "the headers column \"%s\" of type %s does not hold valid "
                         "JSON" HEADERS_FIX, col, type);
                return -EBADMSG;
        }
        if (!cJSON_IsObject(j)) {
                snprintf(err, errlen, "the headers column \"%s\" holds a JSON %s, not an object"
                         HEADERS_FIX, col, json_kind(j));
                return -EBADMSG;
        }
        cJSON_ArrayForEach(it, j) {
                size_t nlen = strlen(it->string);

                if (first + n == RECORD_HEADERS_MAX && first == 0) {
                        snprintf(err, errlen, "the headers column \"%s\" has more than %d entries, "
                                 "the most a row may carry; keep fewer or put the rest in the "
                                 "payload", col, RECORD_HEADERS_MAX);
                        return -EBADMSG;
                }
                if (first + n == RECORD_HEADERS_MAX) {
                        snprintf(err, errlen, "the headers column \"%s\" has more than %zu "
                                 "entries, the most a row may carry besides its %zu --column-header "
                                 "headers (%d in all); keep fewer or put the rest in the payload",
                                 col, RECORD_HEADERS_MAX - first, first, RECORD_HEADERS_MAX);
                        return -EBADMSG;
                }
                if (nlen == 0 || nlen > RECORD_HEADER_NAME_MAX) {
                        snprintf(err, errlen, "the headers column \"%s\" has a header name of %zu "
                                 "bytes (\"%.40s%s\"); names need 1 to %d bytes", col, nlen,
                                 it->string, nlen > 40 ? "..." : "", RECORD_HEADER_NAME_MAX);
                        return -EBADMSG;
                }
                if (record_header_reserved(it->string)) {
                        snprintf(err, errlen, "the headers column \"%s\" has the header name \"%s\", "
                                 "which is reserved for the relay's own headers (ce_*, "
                                 "outbox_relay_*, content-type, in any case); rename it", col,
                                 it->string);
                        return -EBADMSG;
                }
                if (!cJSON_IsString(it)) {
                        snprintf(err, errlen, "the value of header \"%s\" in the headers column "
                                 "\"%s\" is a JSON %s, not a string" HEADERS_FIX, it->string, col,
                                 json_kind(it));
                        return -EBADMSG;
                }
                spec->headers[first + n++] = (struct record_header){it->string, it->valuestring,
                                                                    strlen(it->valuestring)};
        }
        return (int)n;
}

int record_extract(struct record_spec *spec, const struct w2j_record *rec, struct outbox_row *ret_row,
                   char *err, size_t errlen)
{
        const struct w2j_value **f = spec->found, **hf = spec->hfound;
        char terr[512];
        size_t tlen, nh = 0;
        int trc;

        memset(f, 0, spec->nnames * sizeof(*f));
        memset(hf, 0, sizeof(spec->hfound));
        for (size_t c = 0; c < rec->ncolumns; c++) {
                for (size_t i = 0; i < spec->nnames; i++)
                        if (!f[i] && strcmp(rec->columns[c].name, spec->names[i]) == 0) {
                                f[i] = &rec->columns[c].value;
                                spec->found_col[i] = &rec->columns[c];
                        }
                for (size_t i = 0; i < spec->nhcols; i++)
                        if (!hf[i] && strcmp(rec->columns[c].name, spec->hcols[i]) == 0)
                                hf[i] = &rec->columns[c].value;
        }
        /* What was found is reported on failure too, for the dead-letter topic. */
        *ret_row = (struct outbox_row){f[COL_ID], f[COL_KEY], f[COL_PAYLOAD], f[COL_TYPE], NULL, 0,
                                       NULL, 0};
        for (size_t i = 0; i < spec->nnames; i++) {
                if (!f[i] && i != COL_TYPE) {
                        snprintf(err, errlen, "the row has no column \"%s\"", spec->names[i]);
                        return -ENOENT;
                }
        }
        for (size_t i = 0; i < spec->nhcols; i++) {
                if (!hf[i]) {
                        snprintf(err, errlen, "the row has no column \"%s\" (published as header "
                                 "\"%s\" by --column-header)", spec->hcols[i], spec->hnames[i]);
                        return -ENOENT;
                }
        }
        /* The topic first, so that a row refused for another reason still names it. */
        trc = render_topic(spec, f, &tlen, terr, sizeof(terr));
        if (tlen != SIZE_MAX) {
                ret_row->topic = spec->topic;
                ret_row->topic_len = tlen;
        }
        if (f[COL_ID]->is_null || f[COL_ID]->len == 0) {
                snprintf(err, errlen, "the work ID column \"%s\" is %s", spec->names[COL_ID],
                         f[COL_ID]->is_null ? "NULL" : "empty");
                return -EINVAL;
        }
        if (f[COL_KEY]->is_null || f[COL_KEY]->len == 0) {
                snprintf(err, errlen, "the key column \"%s\" is %s", spec->names[COL_KEY],
                         f[COL_KEY]->is_null ? "NULL" : "empty");
                return -EINVAL;
        }
        if (f[COL_PAYLOAD]->is_null && !spec->allow_null_payload) {
                snprintf(err, errlen, "the payload column \"%s\" is NULL (publish NULL payloads as "
                         "tombstones with --null-payload=tombstone)", spec->names[COL_PAYLOAD]);
                return -EINVAL;
        }
        if (!f[COL_PAYLOAD]->is_null && !is_json_column(spec, spec->found_col[COL_PAYLOAD])) {
                const char *why = "";
                char tbuf[48];
                size_t at = 0;

                /* What PostgreSQL's json type would accept, not what cJSON happens to. */
                if (pgjson_validate(f[COL_PAYLOAD]->ptr, f[COL_PAYLOAD]->len, &at, &why) < 0) {
                        snprintf(err, errlen, "the payload column \"%s\" of type %s does not hold "
                                 "valid JSON (%s at byte %zu; records are sent as application/json); "
                                 "store JSON, or make the column json or jsonb so that PostgreSQL "
                                 "checks it", spec->names[COL_PAYLOAD],
                                 type_text(spec->found_col[COL_PAYLOAD], tbuf, sizeof(tbuf)), why, at);
                        return -EILSEQ;
                }
        }
        /* Column headers first: fewer than RECORD_HEADERS_MAX, so they always fit. */
        for (size_t i = 0; i < spec->nhcols; i++)
                if (!hf[i]->is_null)
                        spec->headers[nh++] = (struct record_header){spec->hnames[i], hf[i]->ptr,
                                                                     hf[i]->len};
        for (size_t c = 0; spec->headers_column && c < rec->ncolumns; c++) {
                char tbuf[48];
                int n;

                if (strcmp(rec->columns[c].name, spec->headers_column) != 0)
                        continue;

                n = extract_headers(spec, &rec->columns[c].value, spec->headers_column,
                                    type_text(&rec->columns[c], tbuf, sizeof(tbuf)), nh, err, errlen);
                if (n < 0)
                        return n;
                nh += (size_t)n;
                break;
        }
        if (nh) {
                ret_row->headers = spec->headers;
                ret_row->nheaders = nh;
        }
        if (trc < 0)
                snprintf(err, errlen, "%s", terr);
        return trc;
}

int record_render_topic(struct record_spec *spec, const char *const *values, const char **ret_topic,
                        char *err, size_t errlen)
{
        size_t nt = spec->nnames - COL_FIXED, len;
        struct w2j_value *v = calloc(nt ? nt : 1, sizeof(*v));
        int r;

        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < nt; i++) {
                v[i] = (struct w2j_value){values[i], values[i] ? strlen(values[i]) : 0, !values[i],
                                          false};
                spec->found[COL_FIXED + i] = &v[i];
        }
        r = render_topic(spec, spec->found, &len, err, errlen);
        if (len != SIZE_MAX)
                *ret_topic = spec->topic;
        for (size_t i = 0; i < nt; i++)
                spec->found[COL_FIXED + i] = NULL;
        free(v);
        return r;
}

static const char *const row_fault_codes[] = {"INVALID_TOPIC", "INVALID_JSON", "INVALID_HEADERS",
                                              "MISSING_COLUMN", "NULL_VALUE"};

const char *record_error_code(int err)
{
        switch (err) {
        case -EDOM:
                return row_fault_codes[0];
        case -EILSEQ:
                return row_fault_codes[1];
        case -EBADMSG:
                return row_fault_codes[2];
        case -ENOENT:
                return row_fault_codes[3];
        default:
                return row_fault_codes[4];
        }
}

bool record_error_code_is_row_fault(const char *code, size_t len)
{
        for (size_t i = 0; i < sizeof(row_fault_codes) / sizeof(row_fault_codes[0]); i++)
                if (strlen(row_fault_codes[i]) == len && memcmp(row_fault_codes[i], code, len) == 0)
                        return true;
        return false;
}
