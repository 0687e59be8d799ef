/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A minimal test helper: CHECK() records a failure with file and line and
 * goes on; check_summary() prints "N passed, N failed" and returns the exit
 * status for meson (0 only if nothing failed and something was checked).
 * Not named check.h: that is src/check.h, the `outbox-relay check` module,
 * which a unit test including "check.h" must get.
 */
#ifndef RELAY_UNIT_CHECK_H
#define RELAY_UNIT_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                          \
        do {                                                                                 \
                if (cond) {                                                                  \
                        check_passed++;                                                      \
                } else {                                                                     \
                        check_failed++;                                                      \
                        fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
                }                                                                            \
        } while (0)

#define CHECK_STR(got, want)                                                                 \
        do {                                                                                 \
                const char *g_ = (got), *w_ = (want);                                        \
                if (g_ && w_ && strcmp(g_, w_) == 0) {                                       \
                        check_passed++;                                                      \
                } else {                                                                     \
                        check_failed++;                                                      \
                        fprintf(stderr, "%s:%d: %s is \"%s\", want \"%s\"\n", __FILE__, __LINE__, \
                                #got, g_ ? g_ : "(null)", w_ ? w_ : "(null)");               \
                }                                                                            \
        } while (0)

#define CHECK_INT(got, want)                                                                 \
        do {                                                                                 \
                long long g_ = (long long)(got), w_ = (long long)(want);                     \
                if (g_ == w_) {                                                              \
                        check_passed++;                                                      \
                } else {                                                                     \
                        check_failed++;                                                      \
                        fprintf(stderr, "%s:%d: %s is %lld, want %lld\n", __FILE__, __LINE__, #got, \
                                g_, w_);                                                     \
                }                                                                            \
        } while (0)

static inline int check_summary(void)
{
        printf("%d passed, %d failed\n", check_passed, check_failed);
        return check_failed || !check_passed ? 1 : 0;
}

#endif
