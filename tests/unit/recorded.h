/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reading the recordings under tests/data/, for the unit tests and the
 * decoder benchmark (tests/bench/decode_bench.c): a whole file, and a
 * recorded pgoutput stream split into its frames. The frame format is
 * capture_pgoutput.py's: a big-endian Int32 length, a big-endian Int64 LSN
 * (what pg_logical_slot_peek_binary_changes() reports), then the message.
 */
#ifndef OUTBOX_RELAY_TESTS_RECORDED_H
#define OUTBOX_RELAY_TESTS_RECORDED_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

struct recorded_frame {
        uint64_t lsn;
        size_t len;                /* bytes of the message */
        char *data;                /* borrowed from the buffer the frames were split from */
};

/*
 * recorded_slurp() - the whole file @path, NUL-terminated, its length (bytes)
 * in *@ret_len. The caller frees it. Returns NULL if it cannot be read or
 * memory runs out.
 */
static inline char *recorded_slurp(const char *path, size_t *ret_len)
{
        FILE *f = fopen(path, "rb");
        char *buf = NULL;
        size_t cap = 0, len = 0, n;

        if (!f)
                return NULL;
        do {
                if (len + 65536 > cap) {
                        char *nb;

                        cap = cap ? cap * 2 : 65536;
                        nb = realloc(buf, cap + 1);
                        if (!nb) {
                                free(buf);
                                fclose(f);
                                return NULL;
                        }
                        buf = nb;
                }
                n = fread(buf + len, 1, cap - len, f);
                len += n;
        } while (n > 0);
        fclose(f);
        buf[len] = '\0';
        *ret_len = len;
        return buf;
}

/*
 * recorded_frames() - split the @len bytes of @buf into at most @max frames
 * in @out, which borrow from @buf. Returns how many; *@ret_used is the bytes
 * they span: @len when the recording is whole, less when a frame is cut
 * short or @max is reached.
 */
static inline size_t recorded_frames(char *buf, size_t len, struct recorded_frame *out, size_t max,
                                     size_t *ret_used)
{
        size_t off = 0, n = 0;

        while (off + 12 <= len && n < max) {
                const unsigned char *p = (const unsigned char *)buf + off;
                size_t flen = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
                uint64_t lsn = 0;

                if (flen > len - off - 12)
                        break;
                for (int i = 4; i < 12; i++)
                        lsn = lsn << 8 | p[i];
                out[n].lsn = lsn;
                out[n].len = flen;
                out[n].data = buf + off + 12;
                off += 12 + flen;
                n++;
        }
        *ret_used = off;
        return n;
}

#endif
