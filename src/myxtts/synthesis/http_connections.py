"""The server's connections below HTTP (uvicorn's h11 protocol, subclassed): a deadline on each request's head, a
fixed kernel send buffer, and the connection's abort offered to the application (``myxtts.synthesis.http``)."""

from __future__ import annotations

import asyncio
import logging
import socket

LOG = logging.getLogger("myxtts.serve")

# the kernel's send buffer of every accepted connection, in bytes (Linux doubles it for its bookkeeping): left to
# itself the kernel grows it to megabytes (net.ipv4.tcp_wmem), which would take a slow reader's whole stream out of the
# process at once, outside max_unsent_bytes' count and unseen by send_timeout and request_timeout
CONNECTION_SEND_BUFFER_BYTES = 65536
# the scope extension under which head_deadline_protocol offers the connection's abort (uvicorn's transport.abort)
ABORT_EXTENSION = "myxtts.abort_connection"


def head_deadline_protocol(header_timeout: float) -> type:
    """uvicorn's h11 protocol with a deadline on each request's head (``ServerLimits.header_timeout``), offering
    each request's application the connection's abort (``ABORT_EXTENSION`` in the scope's extensions).

    uvicorn has no timeout covering a request's arrival: its keep-alive timer only runs between requests and is
    reset by every byte received, so a client sending its headers one byte a second holds a connection for as long
    as it likes (slowloris). The deadline starts when the connection opens and again when a response ends; the
    complete head (h11's ``Request`` event, which starts a request-response cycle) disarms it; the body has its own
    limit (``body_timeout``, where ``http.create_app``'s speech route reads the body)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol  # uvicorn is the serve extra

    class HeadDeadlineProtocol(H11Protocol):
        head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            connection = transport.get_extra_info("socket")
            if connection is not None:  # a fixed size also stops the kernel's autotuning of it
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, CONNECTION_SEND_BUFFER_BYTES)
            self.arm_head_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self.arm_head_deadline()

        def handle_events(self) -> None:
            super().handle_events()
            if not self.waiting_for_head():
                self.disarm_head_deadline()
            if self.cycle is not None:  # the response of a client too slow to read aborts the connection with it
                self.cycle.scope.setdefault("extensions", {})[ABORT_EXTENSION] = self.transport.abort

        def connection_lost(self, exc: Exception | None) -> None:
            self.disarm_head_deadline()
            super().connection_lost(exc)

        def waiting_for_head(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def arm_head_deadline(self) -> None:
            self.disarm_head_deadline()
            self.head_deadline = self.loop.call_later(header_timeout, self.head_expired)

        def disarm_head_deadline(self) -> None:
            if self.head_deadline is not None:
                self.head_deadline.cancel()
                self.head_deadline = None

        def head_expired(self) -> None:
            self.head_deadline = None
            if self.waiting_for_head() and not self.transport.is_closing():
                LOG.warning("closed a connection from %s: no complete request head within %s s",
                            "%s:%d" % self.client if self.client else "?", header_timeout)
                self.transport.close()

    return HeadDeadlineProtocol
