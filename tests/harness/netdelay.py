# SPDX-License-Identifier: Apache-2.0
"""A TCP proxy that puts distance between the relay and its server.

DelayProxy(host, port) listens on a free loopback port and passes each
connection on to (host, port). What the server sends is held for `delay`
seconds (settable while connections are open) before the client gets it, in
order; what the client sends passes at once. A relay connected through it sees
the server as if it were a region away, or as a relay short of CPU sees it.

With stall_ordinary set, a new connection that is not a replication
connection gets nothing through: the server's backend waits for a startup
packet that never comes (authentication_timeout, 60 s by default), as it does
for a client that stopped in the middle of connecting. The client must connect
with sslmode=disable and gssencmode=disable, so that its startup packet, which
says whether it asks for replication, comes first.

With stall_all set, every new connection is held that way, replication ones
too: a client connecting then waits in its connection attempt until libpq's
connect_timeout, or until cut() closes it. cut() closes every connection open
through the proxy, held or passing, as a network cut does.
"""

import queue
import socket
import threading
import time


class DelayProxy:
    def __init__(self, host, port, delay=0.0):
        self.target = (host, port)
        self.delay = delay
        self.stall_ordinary = False
        self.stall_all = False
        self.stalled = 0        # connections held so far
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.target, timeout=10)
                server.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._socks += [client, server]
            held = queue.Queue()
            threading.Thread(target=self._pump_first, args=(client, server), daemon=True).start()
            threading.Thread(target=self._read_held, args=(server, held), daemon=True).start()
            threading.Thread(target=self._write_held, args=(held, client, server),
                             daemon=True).start()

    @staticmethod
    def _close(*socks):
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    @staticmethod
    def _recv_exactly(sock, n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise OSError("connection closed")
            data += chunk
        return data

    def _pump_first(self, src, dst):
        """Read the startup packet (length, then the rest); hold the connection
        if it is an ordinary one and stall_ordinary is set, else pass it on."""
        try:
            head = self._recv_exactly(src, 4)
            packet = head + self._recv_exactly(src, int.from_bytes(head, "big") - 4)
        except (OSError, ValueError):
            self._close(src, dst)
            return
        if self.stall_all or (self.stall_ordinary and b"replication\x00" not in packet):
            with self._lock:
                self.stalled += 1
            try:
                while src.recv(65536):
                    pass
            except OSError:
                pass
            self._close(src, dst)
            return
        try:
            dst.sendall(packet)
        except OSError:
            self._close(src, dst)
            return
        self._pump(src, dst)

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        self._close(src, dst)

    def _read_held(self, src, held):
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            held.put((time.monotonic() + self.delay, data))
            if not data:
                return

    def _write_held(self, held, dst, src):
        while True:
            due, data = held.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # the delay is the fault under test: time itself is the condition
            if not data:
                break
            try:
                dst.sendall(data)
            except OSError:
                break
        self._close(src, dst)

    def cut(self):
        """Close every connection open through the proxy; new ones are taken as before."""
        with self._lock:
            socks, self._socks = self._socks, []
        self._close(*socks)

    def close(self):
        self._listener.close()
        with self._lock:
            socks, self._socks = self._socks, []
        self._close(*socks)
