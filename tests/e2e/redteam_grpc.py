"""A gRPC receiver for the red-team tests whose connection is cut after the call took
effect: a real ``GrpcReceiver`` behind a TCP proxy (as an L4 load balancer would sit)
that resets the client's connection once the server has done the work, before its answer
could go back. What the client sees is what it sees when a receiver's host or its
balancer goes away mid-call."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from typing import Any

import grpc

from tests.reach.peers import LOCALHOST, GrpcReceiver


class ResettingProxy:
    """Forwards TCP 127.0.0.1:<port> to ``upstream``; ``reset()`` cuts every client
    connection with a RST (SO_LINGER 0)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server((LOCALHOST, 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._clients: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> ResettingProxy:
        self._thread.start()
        return self

    def _accept(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            with self._lock:
                self._clients.append(client)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()

    def reset(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            with contextlib.suppress(OSError):
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                # shutdown wakes the pump blocked in recv on it; its close then resets.
                client.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        self._stop.set()
        self.reset()
        self._listener.close()
        self._thread.join(5)


class CutAfterEffect(GrpcReceiver):
    """Every call takes effect (it is recorded in ``calls``), then the proxy in front
    resets the connection before the answer goes out."""

    proxy: ResettingProxy

    def start(self) -> CutAfterEffect:
        super().start()
        self.proxy = ResettingProxy((LOCALHOST, self.port)).start()
        return self

    def stop(self) -> None:
        if getattr(self, "proxy", None) is not None:
            self.proxy.stop()
        super().stop()

    @property
    def target(self) -> str:
        return f"{LOCALHOST}:{self.proxy.port}"

    def _assign(self, request: Any, context: grpc.ServicerContext) -> Any:
        answer = super()._assign(request, context)  # the effect: recorded
        self.proxy.reset()
        self._stopping.wait(0.5)
        return answer
