"""A loopback TCP proxy in front of a redis-server that can stall a connection mid-pipeline (tests only).

The proxy reads the client's byte stream as RESP commands (arrays of bulk strings, which is all a Redis client
sends). While ``stall_after_first`` is armed, the first connection that sends an ``EVALSHA`` has that command
forwarded and every later byte held back (the store sends a batch's chunks as one pipeline): the server runs the first chunk of a batch and
never hears of the rest, and the client waits for replies that do not come until its socket timeout — a stalled
connection. ``release()`` then forwards the held bytes (after the client gave up on that connection, the late
packets of a stalled connection), waits for the server's replies and closes.
"""

from __future__ import annotations

import socket
import threading
import time


class StallProxy:
    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.port = self.srv.getsockname()[1]
        self.armed = False
        self.sha: bytes | None = None  # stall only after an EVALSHA of this script (None: any)
        self.stalled = threading.Event()  # a connection is being held
        self.released = threading.Event()
        self._held = bytearray()
        self._held_up: socket.socket | None = None
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stall_after_first(self, sha: bytes | None = None) -> None:
        self.sha = sha
        self.armed = True

    def _accept(self) -> None:
        while not self._stop:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            up = socket.create_connection(self.target)
            threading.Thread(target=self._client_to_server, args=(c, up), daemon=True).start()
            threading.Thread(target=self._server_to_client, args=(up, c), daemon=True).start()

    @staticmethod
    def _commands(buf: bytearray) -> list[tuple[int, bytes, bytes]]:
        """Complete RESP commands at the start of ``buf``: (end offset, command name, first argument)."""
        out, pos = [], 0
        while pos < len(buf):
            if buf[pos:pos + 1] != b"*":
                return out  # not a RESP array (inline command): never seen from redis-py
            e = buf.find(b"\r\n", pos)
            if e < 0:
                return out
            n = int(buf[pos + 1:e])
            p = e + 2
            name = arg = b""
            for k in range(n):
                e2 = buf.find(b"\r\n", p)
                if e2 < 0:
                    return out
                ln = int(buf[p + 1:e2])
                if len(buf) < e2 + 2 + ln + 2:
                    return out
                if k == 0:
                    name = bytes(buf[e2 + 2:e2 + 2 + ln]).upper()
                elif k == 1:
                    arg = bytes(buf[e2 + 2:e2 + 2 + ln])
                p = e2 + 2 + ln + 2
            out.append((p, name, arg))
            pos = p
        return out

    def _client_to_server(self, c: socket.socket, up: socket.socket) -> None:
        buf = bytearray()
        holding = False
        try:
            while True:
                data = c.recv(1 << 16)
                if not data:
                    break
                if holding:
                    with self._lock:
                        self._held += data
                    continue
                buf += data
                cmds = self._commands(buf)
                if not cmds:
                    continue
                end = cmds[-1][0]
                evals = [i for i, (_, name, arg) in enumerate(cmds)
                         if name == b"EVALSHA" and (self.sha is None or arg == self.sha)]
                with self._lock:
                    take = self.armed and len(evals) >= 1 and self._held_up is None
                    if take:
                        self.armed = False
                        self._held_up = up
                if take:  # forward up to the end of the first EVALSHA, hold the rest
                    first_end = cmds[evals[0]][0]
                    up.sendall(bytes(buf[:first_end]))
                    with self._lock:
                        self._held += buf[first_end:]
                    holding = True
                    self.stalled.set()
                    buf = bytearray()
                    continue
                up.sendall(bytes(buf[:end]))
                del buf[:end]
        except OSError:
            pass
        finally:
            try:
                c.close()
            except OSError:
                pass
            if not holding:
                try:
                    up.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    def _server_to_client(self, up: socket.socket, c: socket.socket) -> None:
        try:
            while True:
                data = up.recv(1 << 16)
                if not data:
                    break
                try:
                    c.sendall(data)
                except OSError:
                    pass  # the client gave up on this connection: the server's replies go nowhere
        except OSError:
            pass

    def release(self, wait: float = 2.0) -> None:
        """Forward the held bytes to the server on the stalled connection, let it answer, then close it."""
        with self._lock:
            up, held = self._held_up, bytes(self._held)
            self._held.clear()
        self.released.set()
        if up is None:
            return
        up.sendall(held)
        time.sleep(wait)  # the server runs them (their replies go to a client that is gone)
        try:
            up.close()
        except OSError:
            pass

    def close(self) -> None:
        self._stop = True
        try:
            self.srv.close()
        except OSError:
            pass
