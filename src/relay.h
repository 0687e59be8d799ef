/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The orchestrator: joins the replication stream, the decoder (wal2json or pgoutput), the
 * Kafka producer and the LSN ledger in one poll() loop. The only module that
 * knows all the others, and the only one that logs what they report.
 */
#ifndef RELAY_RELAY_H
#define RELAY_RELAY_H

#include <signal.h>

#include "config.h"

/*
 * struct relay_reload - what relay_run() does on SIGHUP. The signal handler
 * sets *@requested and writes a byte to relay_run()'s @stop_fd; the relay
 * loop, woken by it, empties the pipe, clears the flag and calls @fn(@ctx),
 * on the main thread between two poll() calls.
 */
struct relay_reload {
        volatile sig_atomic_t *requested;
        void (*fn)(void *ctx);
        void *ctx;
};

/*
 * relay_run() - preflight, connect, stream and publish until @stop becomes
 * nonzero (a signal handler sets it and writes a byte to @stop_fd, which
 * relay_run() polls), or until a failure. A byte without @stop set is a
 * reload request: see struct relay_reload (@reload may be NULL). On stop: reading ends, outstanding
 * acknowledgements are awaited for at most conf->shutdown_timeout_ms, a last
 * standby status update reports the ledger's flush LSN, the copy is ended.
 *
 * Returns an enum relay_exit code: RELAY_EXIT_OK after a requested stop;
 * RELAY_EXIT_RETRY for a lost connection, a failed delivery or a fatal
 * producer error; RELAY_EXIT_ENVIRONMENT for a failed preflight check;
 * RELAY_EXIT_DATA for a row or stream line that cannot be published. Every
 * failure has been logged once.
 */
int relay_run(const struct relay_config *conf, int stop_fd, volatile sig_atomic_t *stop,
              const struct relay_reload *reload);

/*
 * relay_checkpoint_new_slot() - after `slot create` (or --create-slot) made
 * the slot of @conf at consistent point @lsn: write its first checkpoint
 * record (topic conf->checkpoint_topic, created if missing) and wait for
 * Kafka's acknowledgement, so that a relay does not take the new slot for
 * one moved by someone else, nor one whose checkpoint was lost. A newest
 * checkpoint below @lsn (a slot of that name was published and dropped:
 * what was committed in between was decoded by no slot) is not overwritten
 * when @refuse_older (the relay's --create-slot) unless
 * conf->accept_slot_position is @lsn; `slot create`, the runbook's step,
 * overwrites it with a warning. Logs what fails. Returns 0; -EINVAL when
 * no retry cures it (that older checkpoint, a checkpoint topic that cannot
 * be trusted or created); -EIO; the reason in @err (@errlen bytes).
 */
int relay_checkpoint_new_slot(const struct relay_config *conf, uint64_t lsn, bool refuse_older, char *err,
                              size_t errlen);

#endif
