// SPDX-License-Identifier: Apache-2.0
/*
 * The replication socket's receive window beside its database
 * (pgstream_socket_cap_receive_window()), on real sockets: a TCP connection
 * over loopback gets the fixed buffer, one farther away than the bound keeps
 * the kernel's, and a Unix-domain socket is left alone.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pgstream.h"
#include "unit_check.h"

/* Not a power of two: twice it is no kernel default. */
#define WANT_BYTES 98304

static int rcvbuf(int fd)
{
        int v = -1;
        socklen_t len = sizeof(v);

        return getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len) < 0 ? -1 : v;
}

/* net.core.rmem_max bounds what SO_RCVBUF takes (socket(7)). */
static int rmem_max(void)
{
        FILE *f = fopen("/proc/sys/net/core/rmem_max", "r");
        int v = -1;

        if (f) {
                if (fscanf(f, "%d", &v) != 1)
                        v = -1;
                fclose(f);
        }
        return v;
}

/* A connected TCP pair over 127.0.0.1: the client end in @c, the server's in @s. Returns 0 or -1. */
static int tcp_pair(int *c, int *s)
{
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t alen = sizeof(a);
        int l = socket(AF_INET, SOCK_STREAM, 0);

        *c = *s = -1;
        if (l < 0)
                return -1;
        if (bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
            getsockname(l, (struct sockaddr *)&a, &alen) < 0 || (*c = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
            connect(*c, (struct sockaddr *)&a, sizeof(a)) < 0 || (*s = accept(l, NULL, NULL)) < 0) {
                close(l);
                return -1;
        }
        close(l);
        return 0;
}

static void test_tcp_loopback(void)
{
        int c, s, rtt = -1, before, want = WANT_BYTES;

        CHECK(tcp_pair(&c, &s) == 0);
        if (rmem_max() > 0 && rmem_max() < want)
                want = rmem_max();
        before = rcvbuf(c);
        CHECK(before > 0 && before != 2 * want);
        /* The handshake measured the round trip: loopback's is well under a second. */
        CHECK_INT(pgstream_socket_cap_receive_window(c, WANT_BYTES, 1000000, &rtt), 1);
        CHECK(rtt > 0 && rtt < 1000000);
        CHECK_INT(rcvbuf(c), 2 * want);

        /* A bound below the round trip leaves the kernel's buffer and says the round trip. */
        before = rcvbuf(s);
        rtt = -1;
        CHECK_INT(pgstream_socket_cap_receive_window(s, WANT_BYTES, 0, &rtt), 0);
        CHECK(rtt > 0);
        CHECK_INT(rcvbuf(s), before);
        close(c);
        close(s);
}

static void test_not_tcp(void)
{
        int sv[2], rtt = -1, before;

        CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
        before = rcvbuf(sv[0]);
        CHECK_INT(pgstream_socket_cap_receive_window(sv[0], WANT_BYTES, 1000000, &rtt), -EOPNOTSUPP);
        CHECK_INT(rtt, 0);
        CHECK_INT(rcvbuf(sv[0]), before);
        close(sv[0]);
        close(sv[1]);

        CHECK_INT(pgstream_socket_cap_receive_window(-1, WANT_BYTES, 1000000, &rtt), -EBADF);
}

int main(void)
{
        test_tcp_loopback();
        test_not_tcp();
        return check_summary();
}
