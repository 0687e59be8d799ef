// SPDX-License-Identifier: Apache-2.0
/* A PostgreSQL snapshot's text form and visibility: see pgsnapshot.h. */
#include "pgsnapshot.h"

#include <errno.h>
#include <stdlib.h>

/* One unsigned decimal at *@p, moved past it. Returns 0 or -EINVAL. */
static int number(const char **p, uint64_t *ret)
{
        uint64_t v = 0;
        const char *s = *p;

        if (*s < '0' || *s > '9')
                return -EINVAL;
        for (; *s >= '0' && *s <= '9'; s++) {
                if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
                        return -EINVAL;
                v = v * 10 + (uint64_t)(*s - '0');
        }
        *p = s;
        *ret = v;
        return 0;
}

static int ascending(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

int pgsnap_parse(const char *text, struct pg_snapshot *ret)
{
        struct pg_snapshot s = {0};
        const char *p = text;
        size_t cap = 0;

        *ret = (struct pg_snapshot){0};
        if (!p || number(&p, &s.xmin) < 0 || *p++ != ':' || number(&p, &s.xmax) < 0 || *p++ != ':' ||
            s.xmin > s.xmax)
                return -EINVAL;
        while (*p) {
                uint64_t x;

                if ((s.nxip && *p++ != ',') || number(&p, &x) < 0 || x < s.xmin || x >= s.xmax) {
                        free(s.xip);
                        return -EINVAL;
                }
                if (s.nxip == cap) {
                        uint64_t *n = realloc(s.xip, (cap ? 2 * cap : 16) * sizeof(*n));

                        if (!n) {
                                free(s.xip);
                                return -ENOMEM;
                        }
                        s.xip = n;
                        cap = cap ? 2 * cap : 16;
                }
                s.xip[s.nxip++] = x;
        }
        if (s.nxip > 1)
                qsort(s.xip, s.nxip, sizeof(*s.xip), ascending);
        *ret = s;
        return 0;
}

void pgsnap_free(struct pg_snapshot *s)
{
        free(s->xip);
        *s = (struct pg_snapshot){0};
}

bool pgsnap_ended(const struct pg_snapshot *s, uint32_t xid)
{
        /* Assigned before the snapshot: at most 2^32 - 1 IDs before xmax (wraparound keeps 2^31). */
        uint32_t back = (uint32_t)s->xmax - xid;
        uint64_t full;
        size_t lo = 0, hi = s->nxip;

        if (back == 0 || back > s->xmax)
                return false;   /* xmax itself, or before ID 0: not assigned before the snapshot */
        full = s->xmax - back;
        if (full < s->xmin)
                return true;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (s->xip[mid] == full)
                        return false;
                if (s->xip[mid] < full)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return true;
}

bool pgsnap_before_xmin(const struct pg_snapshot *s, uint32_t xid)
{
        if (xid < 3)
                return true;
        return (int32_t)(xid - (uint32_t)s->xmin) < 0;
}
