"""A TCP proxy per directed link between two servers, that a test can cut and heal.

Only loopback: it listens on 127.0.0.1 and forwards to 127.0.0.1.  Cutting closes the
live connections and refuses new ones until healed, which is what a partition looks like to
the servers (connections break, reconnects fail).  A black hole instead keeps the connections
and drops what they carry, so that the servers notice only by their timeouts; healing one
closes the connections it spoiled.
"""

from __future__ import annotations

import socket
import threading

from zabby.local import free_port


class LinkProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.cut = False
        self.blackhole = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.cut:
                client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, source: socket.socket, dest: socket.socket) -> None:
        try:
            while not self.cut:
                data = source.recv(65536)
                if not data:
                    break
                if not self.blackhole:
                    dest.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, dest):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def set_cut(self, cut: bool) -> None:
        self.cut = cut
        if cut:
            with self._lock:
                sockets, self._sockets = self._sockets, []
            for sock in sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                    sock.close()
                except OSError:
                    pass

    def set_blackhole(self, on: bool) -> None:
        if on or not self.blackhole:
            self.blackhole = on
            return
        self.set_cut(True)  # the streams lost bytes: start over
        self.blackhole = False
        self.set_cut(False)

    def close(self) -> None:
        self._closed = True
        self.set_cut(True)
        self._listener.close()
