/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Telling the service manager how the relay is doing, over systemd's
 * notification protocol (sd_notify(3): READY=1, STATUS=, STOPPING=1,
 * RELOADING=1, WATCHDOG=1 as datagrams to $NOTIFY_SOCKET), with Debian's
 * libsystemd. Built where meson finds no libsystemd (no libsystemd-dev),
 * every function does nothing and returns 0, and meson
 * installs the unit with Type=exec instead of Type=notify. Knows nothing of
 * the relay: the caller says what its state is and when its loop turns.
 */
#ifndef RELAY_SDNOTIFY_H
#define RELAY_SDNOTIFY_H

#include <stdbool.h>
#include <stdint.h>

/* What was told, and when to tell the watchdog again. Zeroed: off (every call does nothing). */
struct sdnotify {
        bool on;                  /* sdnotify_init() ran: this process is the one supervised */
        bool ready;               /* READY=1 was sent */
        bool stopping;            /* STOPPING=1 was sent */
        int64_t watchdog_ms;      /* ping interval: half of $WATCHDOG_USEC, in ms; 0: no watchdog */
        int64_t last_ping_ms;     /* monotonic ms of the last WATCHDOG=1 */
        char status[128];         /* the last STATUS= sent */
};

/* sdnotify_available() - true when built with libsystemd, so the unit can be Type=notify. */
bool sdnotify_available(void);

/*
 * sdnotify_init() - turn @n on and read the watchdog interval the service
 * manager asks for ($WATCHDOG_USEC, and $WATCHDOG_PID when set must be this
 * process: sd_watchdog_enabled(3)). Pings are due every half of it. Returns
 * 0; a malformed $WATCHDOG_USEC is -EINVAL (no watchdog then).
 */
int sdnotify_init(struct sdnotify *n);

/*
 * sdnotify_status() - send STATUS=@status if it differs from the last one
 * sent (a phrase of at most 127 bytes; longer is cut). Returns 0, or the
 * negative errno of sd_notify(3) (-ECONNREFUSED, -ENOENT: nobody listens at
 * $NOTIFY_SOCKET); the status is then sent again on the next call.
 */
int sdnotify_status(struct sdnotify *n, const char *status);

/*
 * sdnotify_ready() - send READY=1 once: the service has started. Later calls
 * send nothing. Errors as sdnotify_status(); a failed READY=1 is tried
 * again on the next call.
 */
int sdnotify_ready(struct sdnotify *n);

/*
 * sdnotify_reloading() / sdnotify_reloaded() - around a reload (SIGHUP):
 * RELOADING=1 with MONOTONIC_USEC= (CLOCK_MONOTONIC, µs), then READY=1 again.
 * Both send nothing before the first READY=1. Errors as sdnotify_status().
 */
int sdnotify_reloading(struct sdnotify *n);
int sdnotify_reloaded(struct sdnotify *n);

/* sdnotify_stopping() - send STOPPING=1 once. Errors as sdnotify_status(). */
int sdnotify_stopping(struct sdnotify *n);

/*
 * sdnotify_watchdog_due_ms() - ms from @now_ms (monotonic) until the next
 * WATCHDOG=1 is due: 0 when due now, -1 without a watchdog. For a poll()
 * timeout.
 */
int64_t sdnotify_watchdog_due_ms(const struct sdnotify *n, int64_t now_ms);

/*
 * sdnotify_watchdog() - send WATCHDOG=1 if one is due at @now_ms (monotonic
 * ms). Call it only from the loop whose turning it vouches for. Returns 0
 * (also when none was due), or sd_notify(3)'s negative errno.
 */
int sdnotify_watchdog(struct sdnotify *n, int64_t now_ms);

#endif
