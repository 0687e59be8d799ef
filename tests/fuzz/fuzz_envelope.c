// SPDX-License-Identifier: Apache-2.0
/*
 * Fuzz target for the logical message envelope (src/envelope.c). Input: the
 * content of a transactional logical message, as any application may write
 * it with pg_logical_emit_message() (wal2json cuts content at a NUL, so an
 * input holding one is not tried). The result is compared with a model
 * written from envelope.h on top of plain cJSON: accepted only when the
 * content is UTF-8, PostgreSQL's json (pgjson.h), without a \u0000 escape,
 * and an object of exactly "version" 1 and "columns", an object of at most
 * ENVELOPE_COLUMNS_MAX string or null members with names of 1 to
 * ENVELOPE_NAME_MAX bytes, each once; then the row's columns are the
 * members, byte for byte and in order, -EILSEQ exactly when the payload
 * column is not JSON, and record_extract() takes the row without harm.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "envelope.h"
#include "fuzz.h"
#include "pgjson.h"
#include "record.h"
#include "wal2json.h"

#define ERRLEN 1024

static bool model_nul_escape(const char *p, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                if (p[i] != '\\')
                        continue;
                if (i + 5 < n && p[i + 1] == 'u' && memcmp(p + i + 2, "0000", 4) == 0)
                        return true;
                i++;
        }
        return false;
}

/* The "columns" object if @root is an envelope of the right shape, else NULL. */
static const cJSON *model_columns(const cJSON *root)
{
        const cJSON *it, *version = NULL, *cols = NULL;
        int n = 0;

        if (!cJSON_IsObject(root))
                return NULL;
        cJSON_ArrayForEach(it, root) {
                if (strcmp(it->string, "version") == 0 && !version)
                        version = it;
                else if (strcmp(it->string, "columns") == 0 && !cols)
                        cols = it;
                else
                        return NULL;
        }
        if (!version || !cJSON_IsNumber(version) || version->valuedouble != 1 || !cJSON_IsObject(cols))
                return NULL;
        cJSON_ArrayForEach(it, cols) {
                size_t len = strlen(it->string);

                if (++n > ENVELOPE_COLUMNS_MAX || len == 0 || len > ENVELOPE_NAME_MAX ||
                    (!cJSON_IsString(it) && !cJSON_IsNull(it)))
                        return NULL;
                for (const cJSON *o = cols->child; o != it; o = o->next)
                        if (strcmp(o->string, it->string) == 0)
                                return NULL;
        }
        return cols;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct record_spec *spec = NULL;
        struct envelope env = {0};
        struct w2j_record msg = {0}, row;
        struct outbox_row out;
        const cJSON *cols = NULL, *it;
        cJSON *root = NULL;
        char *text, err[ERRLEN] = "";
        bool bad_payload = false;
        size_t i = 0;
        int r;

        if (memchr(data, '\0', size))
                return 0;
        text = strndup((const char *)data, size);
        FUZZ_CHECK(text != NULL);
        msg = (struct w2j_record){.action = W2J_MESSAGE, .action_code = 'M', .xid = 1, .lsn = 16,
                                  .transactional = true, .prefix = "outbox", .content = text,
                                  .content_len = size};
        r = envelope_parse(&env, &msg, "payload", &row, err, sizeof(err));
        FUZZ_CHECK(r == 0 || r == -EBADMSG || r == -EILSEQ || r == -E2BIG);
        if (r < 0)
                FUZZ_CHECK(err[0] != '\0');
        if (size <= ENVELOPE_MAX_BYTES && envelope_valid_utf8(text, size, NULL) &&
            pgjson_validate(text, size, NULL, NULL) == 0 && !model_nul_escape(text, size)) {
                root = cJSON_ParseWithLength(text, size);
                cols = root ? model_columns(root) : NULL;
        }
        if (!cols) {
                FUZZ_CHECK(r == -EBADMSG || r == -E2BIG);
                goto out;
        }
        FUZZ_CHECK(r == 0 || r == -EILSEQ);
        FUZZ_CHECK(row.action == W2J_MESSAGE && row.lsn == 16 && row.prefix == msg.prefix);
        cJSON_ArrayForEach(it, cols) {
                const struct w2j_column *c;

                FUZZ_CHECK(i < row.ncolumns);
                c = &row.columns[i++];
                FUZZ_CHECK(strcmp(c->name, it->string) == 0);
                FUZZ_CHECK(c->value.is_null == cJSON_IsNull(it));
                if (cJSON_IsNull(it)) {
                        FUZZ_CHECK(c->value.ptr == NULL && c->value.len == 0);
                        continue;
                }
                FUZZ_CHECK(c->value.len == strlen(it->valuestring));
                FUZZ_CHECK(strcmp(c->value.ptr, it->valuestring) == 0);
                if (strcmp(c->name, "payload") == 0) {
                        bool json = pgjson_validate(c->value.ptr, c->value.len, NULL, NULL) == 0;

                        bad_payload = !json;
                        FUZZ_CHECK(c->typeoid == (json ? 114u : 25u));
                } else {
                        FUZZ_CHECK(c->typeoid == 25);
                }
        }
        FUZZ_CHECK(i == row.ncolumns);
        FUZZ_CHECK(r == (bad_payload ? -EILSEQ : 0));
        /* The row goes on to the mapping: whatever it holds, no harm. */
        FUZZ_CHECK(record_spec_new("work_id", "work_id", "payload", "kind", "outbox.${kind}", &spec,
                                   err, sizeof(err)) == 0);
        FUZZ_CHECK(record_spec_set_headers_column(spec, "headers") == 0);
        r = record_extract(spec, &row, &out, err, sizeof(err));
        FUZZ_CHECK(r == 0 || r == -ENOENT || r == -EINVAL || r == -EILSEQ || r == -EBADMSG ||
                   r == -EDOM);
        record_spec_free(spec);
out:
        envelope_clear(&env);
        cJSON_Delete(root);
        free(text);
        return 0;
}
