// SPDX-License-Identifier: Apache-2.0
/* Unit tests of log.c: the text and JSON line formats, levels, the log file. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "unit_check.h"
#include "log.h"

static char path[] = "/tmp/test_log.XXXXXX";

/* The log file's content, then emptied. */
static const char *take(void)
{
        static char buf[8192];
        FILE *f = fopen(path, "r");
        size_t n = 0;

        if (f) {
                n = fread(buf, 1, sizeof(buf) - 1, f);
                fclose(f);
        }
        buf[n] = '\0';
        if (truncate(path, 0) < 0)
                perror("truncate");
        return buf;
}

/* @line with its "2026-01-02T03:04:05.678Z" timestamp replaced by "TS". */
static const char *no_ts(const char *line, size_t at)
{
        static char buf[8192];

        if (strlen(line) < at + 24 || line[at + 4] != '-' || line[at + 10] != 'T' ||
            line[at + 19] != '.' || line[at + 23] != 'Z')
                return line;
        snprintf(buf, sizeof(buf), "%.*sTS%s", (int)at, line, line + at + 24);
        return buf;
}

int main(void)
{
        enum log_level level;
        int fd = mkstemp(path);

        if (fd < 0) {
                perror("mkstemp");
                return 1;
        }
        close(fd);
        CHECK_INT(log_open(path), 0);

        /* Text in a file: a timestamp first; below the level: nothing. */
        log_set_level(LOG_LEVEL_INFO);
        log_msg(LOG_LEVEL_INFO, "streaming from slot \"%s\"", "s");
        log_debug("not %s", "written");
        const char *text = take();
        CHECK_STR(no_ts(text, 0), "TS outbox-relay: info: streaming from slot \"s\"\n");

        /*
         * Text stays one line per message whatever the data says: a work ID
         * (or a libpq error) with line breaks cannot forge a line of its own.
         */
        log_msg(LOG_LEVEL_ERROR, "work ID \"%s\": x", "a\noutbox-relay: info: stopped\r\x01\x7f\tb");
        text = take();
        CHECK_STR(no_ts(text, 0), "TS outbox-relay: error: work ID \"a\\noutbox-relay: info: stopped"
                  "\\r\\x01\\x7f\tb\": x\n");

        /* JSON: escapes, control characters, bytes that are not UTF-8. */
        log_set_format(LOG_FORMAT_JSON);
        log_msg(LOG_LEVEL_WARNING, "a\"b\\c\td\x01" "e\x7f \xff \xc3\xa9 \xe2\x82\xac \xed\xa0\x80 \xe2\x82");
        const char *json = take();
        CHECK_STR(no_ts(json, 7), "{\"ts\":\"TS\",\"level\":\"warning\",\"msg\":\"a\\\"b\\\\c\\td\\u0001"
                  "e\\u007f \\ufffd \xc3\xa9 \xe2\x82\xac \\ufffd\\ufffd\\ufffd \\ufffd\\ufffd\"}\n");

        /* Truncation keeps one line, and valid JSON. */
        {
                char big[5000];

                memset(big, 'x', sizeof(big) - 1);
                big[sizeof(big) - 1] = '\0';
                log_msg(LOG_LEVEL_ERROR, "%s", big);
                json = take();
                CHECK(strlen(json) > 4096 && strlen(json) < 4200);
                CHECK(strstr(json, "xxx...\"}\n") != NULL);
        }

        /* Back to stderr: the file gets nothing more. */
        CHECK_INT(log_open(NULL), 0);
        log_set_format(LOG_FORMAT_TEXT);
        CHECK_STR(take(), "");

        CHECK_INT(log_level_parse("warning", &level), 0);
        CHECK_INT(level, LOG_LEVEL_WARNING);
        CHECK_INT(log_level_parse("verbose", &level), -EINVAL);
        CHECK_INT(log_open("/nonexistent/dir/x.log"), -ENOENT);
        unlink(path);
        return check_summary();
}
