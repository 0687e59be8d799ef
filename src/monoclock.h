/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The monotonic clock (CLOCK_MONOTONIC) in ms, for deadlines and intervals;
 * never for wall time (commit timestamps, record times). Header-only so that
 * leaf modules can use it without depending on each other.
 */
#ifndef RELAY_MONOCLOCK_H
#define RELAY_MONOCLOCK_H

#include <stdint.h>
#include <time.h>

/* monoclock_ms() - ms since an unspecified start; never goes back. */
static inline int64_t monoclock_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
