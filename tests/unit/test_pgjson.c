// SPDX-License-Identifier: Apache-2.0
/*
 * Unit tests of the PostgreSQL json grammar check (pgjson.c). Every case's
 * verdict was taken from PostgreSQL 15's own json input ('...'::json);
 * tests/integration/test_rows_values.py compares the two on a real server.
 */
#include <errno.h>
#include <string.h>

#include "unit_check.h"
#include "pgjson.h"

static const struct {
        const char *text;
        int ok;
} cases[] = {
        {"\"\\u0000\"", 1}, {"\"\\ud83d\"", 1}, {"\"\\udc00\"", 1}, {"\"\\ud83d\\ude00\"", 1},
        {"\"\\ud83dx\"", 1}, {"01", 0}, {"1.", 0}, {".5", 0}, {"-0", 1}, {"1e5", 1}, {"1E+5", 1},
        {"1e", 0}, {"[1,]", 0}, {"{\"a\":1,}", 0}, {"true", 1}, {"True", 0}, {"nul", 0},
        {"\"a\tb\"", 0}, {" {\"a\" : [ ] } ", 1}, {"\"\\x\"", 0}, {"\"\\/\"", 1}, {"1 2", 0},
        {"", 0}, {"  ", 0}, {"[", 0}, {"\"\\u00e9\"", 1}, {"\"\\uD83D\\uDE00\"", 1}, {"-", 0},
        {"+1", 0}, {"NaN", 0}, {"[1]x", 0}, {"\"abc", 0}, {"{\"a\"}", 0}, {"{1:2}", 0},
        {"\"\\u12\"", 0}, {"\"a\x7f" "b\"", 1}, {"1.5.2", 0}, {"-01", 0}, {"[true,false,null]", 1},
        {"{\"a\":{\"b\":[1,{\"c\":\"d\"}]}}", 1}, {"{\"a\" 1}", 0}, {"[1 2]", 0}, {"truex", 0},
        {"1e+", 0}, {"0.0e-0", 1}, {"\"\xc3\xa9\"", 1}, {"\n\r\t[]\n", 1}, {"\f[]", 0},
        {"[]]", 0}, {"{}}", 0}, {"{,}", 0}, {"[,]", 0}, {"1_", 0}, {"1\xc3\xa9", 0},
};

static void test_cases(void)
{
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                int r = pgjson_validate(cases[i].text, strlen(cases[i].text), NULL, NULL);

                if ((r == 0) != cases[i].ok)
                        fprintf(stderr, "case %zu: %s\n", i, cases[i].text);
                CHECK((r == 0) == cases[i].ok);
        }
}

static void test_offset_and_reason(void)
{
        size_t at = 99;
        const char *why = NULL;

        CHECK_INT(pgjson_validate("{\"a\": 01}", 9, &at, &why), -EILSEQ);
        CHECK_INT(at, 7);
        CHECK(why && strstr(why, "number"));
        CHECK_INT(pgjson_validate("[1] x", 5, &at, &why), -EILSEQ);
        CHECK_INT(at, 4);
        CHECK_STR(why, "text after the JSON value");
        /* not NUL-terminated: only @len bytes count */
        CHECK_INT(pgjson_validate("[1]garbage", 3, NULL, NULL), 0);
}

static void test_depth(void)
{
        static char deep[2 * (PGJSON_MAX_DEPTH + 1)];

        memset(deep, '[', PGJSON_MAX_DEPTH);
        memset(deep + PGJSON_MAX_DEPTH, ']', PGJSON_MAX_DEPTH);
        CHECK_INT(pgjson_validate(deep, 2 * PGJSON_MAX_DEPTH, NULL, NULL), 0);
        memset(deep, '[', PGJSON_MAX_DEPTH + 1);
        memset(deep + PGJSON_MAX_DEPTH + 1, ']', PGJSON_MAX_DEPTH + 1);
        CHECK_INT(pgjson_validate(deep, 2 * (PGJSON_MAX_DEPTH + 1), NULL, NULL), -EILSEQ);
}

static void test_nul_escape(void)
{
        CHECK(pgjson_has_nul_escape("{\"a\": \"x\\u0000y\"}", 16));
        CHECK(pgjson_has_nul_escape("\"\\u0000\"", 8));
        /* an escaped backslash, then "u0000": no escape */
        CHECK(!pgjson_has_nul_escape("\"\\\\u0000\"", 9));
        CHECK(!pgjson_has_nul_escape("\"\\u0001\"", 8));
        /* cut short: only @len bytes count */
        CHECK(!pgjson_has_nul_escape("\"\\u0000\"", 6));
}

int main(void)
{
        test_cases();
        test_nul_escape();
        test_offset_and_reason();
        test_depth();
        return check_summary();
}
