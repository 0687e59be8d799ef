// SPDX-License-Identifier: Apache-2.0
/*
 * Replication connection over libpq: connect, IDENTIFY_SYSTEM,
 * START_REPLICATION, non-blocking CopyData reads, standby status updates,
 * CopyDone. Knows nothing of wal2json's content, Kafka or the ledger.
 */
#include "pgstream.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <poll.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lsn.h"
#include "monoclock.h"
#include "pgconn.h"
#include "replmsg.h"

struct pgstream {
        PGconn *conn;
        char *copybuf;  /* last PQgetCopyData() buffer */
};

static void trim_copy(char *err, size_t errlen, const char *msg)
{
        size_t n;

        snprintf(err, errlen, "%s", msg ? msg : "");
        n = strlen(err);
        while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' '))
                err[--n] = '\0';
}

static void result_error(const PGresult *res, PGconn *conn, char *err, size_t errlen, char sqlstate[6])
{
        const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
        const char *msg = res ? PQresultErrorMessage(res) : NULL;

        if (!msg || !*msg)
                msg = PQerrorMessage(conn);
        trim_copy(err, errlen, msg);
        if (sqlstate)
                snprintf(sqlstate, 6, "%s", st ? st : "");
}

int pgstream_connect(const char *conninfo, struct pgstream **ret_stream, struct pgstream_system *ret_sys,
                     char *err, size_t errlen)
{
        struct pgstream *s;
        PGresult *res;
        struct pgstream_system sys = {0};
        int r;

        s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        r = pgconn_open(conninfo, PGCONN_REPLICATION, 0, 0, &s->conn, err, errlen);
        if (r < 0) {
                free(s);
                return r;
        }
        res = PQexec(s->conn, "IDENTIFY_SYSTEM");
        if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) < 4) {
                char state[6] = "";

                result_error(res, s->conn, err, errlen, state);
                PQclear(res);
                pgstream_free(s);
                /*
                 * A syntax error: the backend took IDENTIFY_SYSTEM as SQL, so the
                 * replication parameter never reached it (a pooler ignoring it).
                 */
                return strcmp(state, "42601") == 0 ? -EPROTONOSUPPORT : -EPROTO;
        }
        snprintf(sys.system_id, sizeof(sys.system_id), "%s", PQgetvalue(res, 0, 0));
        sys.timeline = (uint32_t)strtoul(PQgetvalue(res, 0, 1), NULL, 10);
        r = lsn_parse(PQgetvalue(res, 0, 2), strlen(PQgetvalue(res, 0, 2)), &sys.xlogpos);
        snprintf(sys.dbname, sizeof(sys.dbname), "%s", PQgetvalue(res, 0, 3));
        PQclear(res);
        if (r < 0) {
                snprintf(err, errlen, "IDENTIFY_SYSTEM returned a malformed xlogpos");
                pgstream_free(s);
                return -EPROTO;
        }
        *ret_sys = sys;
        *ret_stream = s;
        return 0;
}

/* Append @v as a replication-command string literal ('' doubles a quote). */
static void append_literal(char *buf, size_t size, size_t *o, const char *v)
{
        if (*o < size)
                buf[(*o)++] = '\'';
        for (; *v && *o + 2 < size; v++) {
                if (*v == '\'')
                        buf[(*o)++] = '\'';
                buf[(*o)++] = *v;
        }
        if (*o < size)
                buf[(*o)++] = '\'';
}

int pgstream_timeline_history(struct pgstream *s, uint32_t tli, char **ret_content, size_t *ret_len,
                              char *err, size_t errlen)
{
        char cmd[64];
        PGresult *res;
        size_t len;

        snprintf(cmd, sizeof(cmd), "TIMELINE_HISTORY %u", tli);
        res = PQexec(s->conn, cmd);
        if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) != 2) {
                result_error(res, s->conn, err, errlen, NULL);
                PQclear(res);
                return -EPROTO;
        }
        /* The walsender sends the file's bytes as the text of its content column. */
        len = (size_t)PQgetlength(res, 0, 1);
        *ret_content = malloc(len + 1);
        if (!*ret_content) {
                PQclear(res);
                return -ENOMEM;
        }
        memcpy(*ret_content, PQgetvalue(res, 0, 1), len);
        (*ret_content)[len] = '\0';
        *ret_len = len;
        PQclear(res);
        return 0;
}

int pgstream_start(struct pgstream *s, const struct pgstream_start *start, char *err, size_t errlen,
                   char sqlstate[6])
{
        size_t size = 1024, o;
        char *cmd;
        PGresult *res;
        int r = 0;

        for (size_t i = 0; i < start->noptions * 2; i++)
                size += 2 * strlen(start->options[i]) + 8;
        cmd = malloc(size);
        if (!cmd)
                return -ENOMEM;
        o = (size_t)snprintf(cmd, size, "START_REPLICATION SLOT \"%s\" LOGICAL 0/0", start->slot);
        for (size_t i = 0; i < start->noptions; i++) {
                o += (size_t)snprintf(cmd + o, size - o, "%s\"%s\" ", i == 0 ? " (" : ", ",
                                      start->options[2 * i]);
                append_literal(cmd, size, &o, start->options[2 * i + 1]);
        }
        if (start->noptions)
                cmd[o++] = ')';
        cmd[o] = '\0';
        res = PQexec(s->conn, cmd);
        free(cmd);
        if (PQresultStatus(res) != PGRES_COPY_BOTH) {
                result_error(res, s->conn, err, errlen, sqlstate);
                r = -EPROTO;
        } else if (PQsetnonblocking(s->conn, 1) != 0) {
                trim_copy(err, errlen, PQerrorMessage(s->conn));
                r = -EIO;
        }
        PQclear(res);
        return r;
}

PGconn *pgstream_conn(struct pgstream *s)
{
        return s->conn;
}

int pgstream_backend_pid(const struct pgstream *s)
{
        return PQbackendPID(s->conn);
}

int pgstream_socket(const struct pgstream *s)
{
        return PQsocket(s->conn);
}

int pgstream_want_write(struct pgstream *s)
{
        return PQflush(s->conn) == 1;
}

int pgstream_flush(struct pgstream *s)
{
        return PQflush(s->conn) < 0 ? -EIO : 0;
}

int pgstream_set_read_batch(struct pgstream *s, int bytes)
{
        struct sockaddr_storage a;
        socklen_t alen = sizeof(a);
        int fd = PQsocket(s->conn);

        /* A Unix-domain socket's poll() ignores SO_RCVLOWAT (af_unix.c): it would only add the timer. */
        if (getsockname(fd, (struct sockaddr *)&a, &alen) < 0)
                return -errno;
        if (a.ss_family != AF_INET && a.ss_family != AF_INET6)
                return -EOPNOTSUPP;
        if (setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &bytes, sizeof(bytes)) < 0)
                return -errno;
        return 0;
}

int pgstream_consume(struct pgstream *s, char *err, size_t errlen)
{
        if (!PQconsumeInput(s->conn)) {
                trim_copy(err, errlen, PQerrorMessage(s->conn));
                return -EIO;
        }
        return 0;
}

int pgstream_read(struct pgstream *s, const char **ret_buf, size_t *ret_len, char *err, size_t errlen,
                  char sqlstate[6])
{
        PGresult *res;
        int n;

        if (s->copybuf) {
                PQfreemem(s->copybuf);
                s->copybuf = NULL;
        }
        n = PQgetCopyData(s->conn, &s->copybuf, 1);
        if (n > 0) {
                *ret_buf = s->copybuf;
                *ret_len = (size_t)n;
                return 1;
        }
        if (n == 0)
                return 0;
        if (n == -2) {
                trim_copy(err, errlen, PQerrorMessage(s->conn));
                sqlstate[0] = '\0';
                return -EIO;
        }
        /* -1: the copy ended; the result says why. */
        res = PQgetResult(s->conn);
        if (res && PQresultStatus(res) == PGRES_COMMAND_OK) {
                snprintf(err, errlen, "the server ended the replication stream");
                sqlstate[0] = '\0';
        } else {
                result_error(res, s->conn, err, errlen, sqlstate);
        }
        PQclear(res);
        return -ENODATA;
}

int pgstream_send_status(struct pgstream *s, uint64_t write_lsn, uint64_t flush_lsn, int64_t now_us,
                         char *err, size_t errlen)
{
        char buf[REPLMSG_STATUS_LEN];

        replmsg_status_update(buf, write_lsn, flush_lsn, flush_lsn, now_us, 0);
        if (PQputCopyData(s->conn, buf, sizeof(buf)) <= 0 || PQflush(s->conn) < 0) {
                trim_copy(err, errlen, PQerrorMessage(s->conn));
                return -EIO;
        }
        return 0;
}

int pgstream_finish(struct pgstream *s, int timeout_ms, char *err, size_t errlen)
{
        int64_t deadline = monoclock_ms() + timeout_ms;
        bool copy_done = false;
        int r = 0;

        if (s->copybuf) {
                PQfreemem(s->copybuf);
                s->copybuf = NULL;
        }
        /*
         * The answer (CopyDone, CommandComplete, ReadyForQuery) is a few dozen
         * bytes, and the poll() below has no read timer: reads unbatched first,
         * or it would sleep to the deadline (pgstream_set_read_batch()).
         */
        pgstream_set_read_batch(s, 1);
        if (PQputCopyEnd(s->conn, NULL) <= 0) {
                trim_copy(err, errlen, PQerrorMessage(s->conn));
                return -EIO;
        }
        for (;;) {
                struct pollfd pfd = {PQsocket(s->conn), POLLIN, 0};
                int64_t left;
                int f = PQflush(s->conn);

                if (f < 0 || !PQconsumeInput(s->conn)) {
                        trim_copy(err, errlen, PQerrorMessage(s->conn));
                        return -EIO;
                }
                while (!copy_done) {
                        char *buf = NULL;
                        int n = PQgetCopyData(s->conn, &buf, 1);

                        if (n > 0) {
                                /* CopyData the server sent before it saw our CopyDone. */
                                PQfreemem(buf);
                                continue;
                        }
                        if (n == -2) {
                                trim_copy(err, errlen, PQerrorMessage(s->conn));
                                return -EIO;
                        }
                        copy_done = n == -1;
                        break;
                }
                while (copy_done && !PQisBusy(s->conn)) {
                        PGresult *res = PQgetResult(s->conn);

                        if (!res)
                                return r;
                        if (PQresultStatus(res) == PGRES_FATAL_ERROR) {
                                trim_copy(err, errlen, PQresultErrorMessage(res));
                                r = -EPROTO;
                        }
                        PQclear(res);
                }
                left = deadline - monoclock_ms();
                if (left <= 0) {
                        snprintf(err, errlen, "timed out waiting for the server to end the copy");
                        return -ETIMEDOUT;
                }
                if (f == 1)
                        pfd.events |= POLLOUT;
                if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR)
                        return -EIO;
        }
}

struct pgstream *pgstream_free(struct pgstream *s)
{
        if (!s)
                return NULL;
        if (s->copybuf)
                PQfreemem(s->copybuf);
        PQfinish(s->conn);
        free(s);
        return NULL;
}
