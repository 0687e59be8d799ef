// SPDX-License-Identifier: Apache-2.0
/*
 * The service manager's notification protocol through libsystemd's
 * sd_notify(3) and sd_watchdog_enabled(3), or nothing without libsystemd.
 * See sdnotify.h. Keeps what was sent, so that a status is sent once per
 * change and a ping once per interval; knows nothing of the relay.
 */
#include "sdnotify.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>

bool sdnotify_available(void)
{
        return true;
}

static int send_state(const char *state)
{
        int r = sd_notify(0, state);

        return r < 0 ? r : 0;
}

int sdnotify_init(struct sdnotify *n)
{
        uint64_t usec = 0;
        int r;

        *n = (struct sdnotify){.on = true};
        r = sd_watchdog_enabled(0, &usec);
        if (r < 0)
                return r;
        if (r > 0 && usec > 0)
                n->watchdog_ms = (int64_t)(usec / 2000) > 0 ? (int64_t)(usec / 2000) : 1;
        return 0;
}
#else
bool sdnotify_available(void)
{
        return false;
}

static int send_state(const char *state)
{
        (void)state;
        return 0;
}

int sdnotify_init(struct sdnotify *n)
{
        *n = (struct sdnotify){0};
        return 0;
}
#endif

int sdnotify_status(struct sdnotify *n, const char *status)
{
        char buf[sizeof(n->status) + 8];
        int r;

        if (!n->on || strncmp(n->status, status, sizeof(n->status) - 1) == 0)
                return 0;
        snprintf(buf, sizeof(buf), "STATUS=%.*s", (int)sizeof(n->status) - 1, status);
        r = send_state(buf);
        if (r == 0)
                snprintf(n->status, sizeof(n->status), "%s", status);
        return r;
}

int sdnotify_ready(struct sdnotify *n)
{
        int r;

        if (!n->on || n->ready)
                return 0;
        r = send_state("READY=1");
        n->ready = r == 0;
        return r;
}

int sdnotify_reloading(struct sdnotify *n)
{
        struct timespec ts;
        char buf[64];

        if (!n->on || !n->ready)
                return 0;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        snprintf(buf, sizeof(buf), "RELOADING=1\nMONOTONIC_USEC=%llu",
                 (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000);
        return send_state(buf);
}

int sdnotify_reloaded(struct sdnotify *n)
{
        if (!n->on || !n->ready)
                return 0;
        return send_state("READY=1");
}

int sdnotify_stopping(struct sdnotify *n)
{
        int r;

        if (!n->on || n->stopping)
                return 0;
        r = send_state("STOPPING=1");
        n->stopping = r == 0;
        return r;
}

int64_t sdnotify_watchdog_due_ms(const struct sdnotify *n, int64_t now_ms)
{
        int64_t due;

        if (!n->on || n->watchdog_ms <= 0)
                return -1;
        due = n->last_ping_ms + n->watchdog_ms - now_ms;
        return due > 0 ? due : 0;
}

int sdnotify_watchdog(struct sdnotify *n, int64_t now_ms)
{
        if (sdnotify_watchdog_due_ms(n, now_ms) != 0)
                return 0;
        n->last_ping_ms = now_ms;
        return send_state("WATCHDOG=1");
}
