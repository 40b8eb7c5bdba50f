"""The abusers of ``benchmarks/serve_faults.py``: raw-socket requests to a ``myxtts serve`` process on 127.0.0.1 and
``Abusers``, one thread (or a few) per abuse kind, each kind bounded in count (the kinds and what each expects are
listed in ``serve_faults.py``'s docstring). Every abuser connects from one loopback address, ``ABUSER_ADDRESS``: one
abusive host, as the server tells clients apart by address (the well-behaved clients have addresses of their own).

Raw sockets, not urllib: an abuser must send what no well-behaved client library sends (a false Content-Length, a
foreign Host, headers one byte a second) and see exactly what the server answers, or that it answered nothing.
"""

from __future__ import annotations

import json
import selectors
import socket
import threading
import time

ABUSER_ADDRESS = "127.0.0.2"
LONG_TEXT = " ".join(["The committee met again in the morning, and the report was read aloud."] * 12)
BURST_SIZE = 80  # requests at once: past the requests-in-flight limit (64 by default)
# every abuse kind the abused phases run (``serve_faults.py --skip-abuse`` takes these names)
KINDS = ("huge_content_length", "input_100kb", "malformed_json", "unknown_voice", "nan_speed", "cross_site_origin",
         "foreign_host", "text_plain", "burst", "disconnect", "stop_reading", "slowloris", "slow_readers",
         "idle_connections")
SLOW_READERS = 8  # streams at once, each read SLOW_READ_BYTES every SLOW_READ_PAUSE seconds
SLOW_READ_BYTES, SLOW_READ_PAUSE = 2048, 0.5
# a slow reader's receive buffer (the kernel doubles it): small, so the server's sends block soon, as they would for
# a slow network, and the client sees the server's end within a few reads of it
SLOW_READER_BUFFER = 8192
# a slow reader still open this long after the server's request_timeout gives up (closes it itself): a client this
# slow takes each piece within send_timeout, so request_timeout is what ends its stream
SLOW_READER_GRACE = 30.0
# the most connections the kinds other than idle_connections hold at once: the burst, the slow readers and about
# one for each other kind; idle_connections stays below the limit by this much besides the clients and a margin
OTHER_ABUSER_CONNECTIONS = BURST_SIZE + SLOW_READERS + 10
CHUNKED_END = b"0\r\n\r\n"  # the final chunk: only a stream taken to its end gets it


def speech_body(text: str, **extra) -> bytes:
    return json.dumps({"input": text, "voice": "voice", "response_format": "pcm", **extra}).encode()


def connect(port: int, timeout: float, receive_buffer: int | None = None) -> socket.socket:
    """A TCP connection to the server; ``receive_buffer``: SO_RCVBUF, set before connecting so the window the
    client offers is that small from the start."""
    connection = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    connection.settimeout(timeout)
    try:
        connection.bind((ABUSER_ADDRESS, 0))
        connection.connect(("127.0.0.1", port))
    except OSError:
        connection.close()
        raise
    return connection


def raw_request(port: int, body: bytes, declared: int | None = None, timeout: float = 30.0,
                headers: dict[str, str] | None = None, receive_buffer: int | None = None) -> socket.socket:
    """A POST to /v1/audio/speech on a raw socket (``declared``: the Content-Length to claim; ``headers``: replace
    or add to the default Host 127.0.0.1 and Content-Type application/json, e.g. a foreign Host or an Origin)."""
    fields = {"Host": "127.0.0.1", "Content-Type": "application/json"}
    for name, value in (headers or {}).items():  # header names are case-insensitive: a given one replaces its default
        fields = {key: old for key, old in fields.items() if key.lower() != name.lower()}
        fields[name] = value
    fields["Content-Length"] = str(len(body) if declared is None else declared)
    head = "POST /v1/audio/speech HTTP/1.1\r\n" + "".join(f"{key}: {value}\r\n" for key, value in fields.items())
    connection = connect(port, timeout, receive_buffer)
    connection.sendall(head.encode() + b"\r\n" + body)
    return connection


def status_of(connection: socket.socket, size: int = 65536) -> tuple[int | None, bytes]:
    """(status code or None when the server closed without one, what was read up to the end of the headers, and
    whatever of the body came with them), reading ``size`` bytes at a time."""
    answer = b""
    try:
        while b"\r\n\r\n" not in answer:
            chunk = connection.recv(size)
            if not chunk:
                break
            answer += chunk
    except OSError:
        pass
    line = answer.split(b"\r\n", 1)[0].split()
    return (int(line[1]) if len(line) > 1 and line[1].isdigit() else None), answer


def read_until_end(connection: socket.socket, already: bytes, size: int, pause: float,
                   give_up_at: float) -> tuple[int, str]:
    """Read a response sent with ``Connection: close`` to its end, ``size`` bytes every ``pause`` seconds: (body bytes
    read, how it ended). "clean_end": closed after the final chunk; "cut": closed without it (the server ended the
    stream); "reset": the connection was reset (the server aborted it); "gave_up": still open at ``give_up_at``
    (perf_counter), closed here."""
    count, tail = len(already), already[-len(CHUNKED_END):]
    while time.perf_counter() < give_up_at:
        try:
            chunk = connection.recv(size)
        except socket.timeout:
            continue  # the server is between pieces
        except OSError:  # ECONNRESET: an aborted connection
            return count, "reset"
        if not chunk:
            return count, "clean_end" if tail.endswith(CHUNKED_END) else "cut"
        count, tail = count + len(chunk), (tail + chunk)[-len(CHUNKED_END):]
        if pause:
            time.sleep(pause)
    return count, "gave_up"


def open_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` TCP connections that send nothing (fewer if the machine refuses more)."""
    sockets = []
    for _ in range(count):
        try:
            sockets.append(connect(port, timeout=5))
        except OSError:
            break
    return sockets


class Abusers:
    """The abuse kinds, looping until ``stop``; every attempt recorded as (kind, status, seconds, extras).

    ``idle_count``: the idle sockets of idle_connections (0: that kind is not run); ``request_timeout``: the server's,
    a slow reader giving up SLOW_READER_GRACE seconds after it (``slow_reader_cap``)."""

    def __init__(self, port: int, idle_count: int = 0, request_timeout: float = 300.0):
        self.port, self.idle_count = port, idle_count
        self.slow_reader_cap = request_timeout + SLOW_READER_GRACE
        self.records, self.lock, self.stop = [], threading.Lock(), threading.Event()

    def record(self, kind: str, status: int | None, seconds: float, **extra) -> None:
        with self.lock:
            self.records.append({"kind": kind, "status": status, "seconds": round(seconds, 3), **extra})

    def simple(self, kind: str, body: bytes, declared: int | None = None, headers: dict | None = None) -> None:
        """One request whose answer should come at once (a refusal): its status and answer time."""
        started = time.perf_counter()
        with raw_request(self.port, body, declared, timeout=10, headers=headers) as connection:
            status, _ = status_of(connection)
        self.record(kind, status, time.perf_counter() - started)

    def burst(self) -> None:
        started, connections = time.perf_counter(), []
        for _ in range(BURST_SIZE):
            connections.append(raw_request(self.port, speech_body(LONG_TEXT)))
        for connection in connections:
            status, answer = status_of(connection)
            retry_after = b"retry-after" in answer.lower()
            connection.close()
            self.record("burst", status, time.perf_counter() - started, retry_after=retry_after)

    def leave_early(self, kind: str, stall: float) -> None:
        """Read the headers and the first audio bytes; then close (``stall`` 0) or stop reading for ``stall`` s."""
        started = time.perf_counter()
        connection = raw_request(self.port, speech_body(LONG_TEXT))
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a full window comes soon
        status, answer = status_of(connection)
        if status == 200 and not answer.partition(b"\r\n\r\n")[2]:
            connection.recv(4096)
        self.record(kind, status, time.perf_counter() - started)
        if stall:
            self.stop.wait(stall)
        connection.close()

    def slowloris(self) -> None:
        """Headers one byte a second; returns when the server closes the connection or the phase ends."""
        started = time.perf_counter()
        head = b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 10_000
        with socket.create_connection(("127.0.0.1", self.port), timeout=5,
                                      source_address=(ABUSER_ADDRESS, 0)) as connection:
            closed = False
            for byte in head:
                if self.stop.is_set():
                    break
                try:
                    connection.sendall(bytes([byte]))
                    connection.settimeout(1.0)
                    if connection.recv(1024) == b"":
                        closed = True
                        break
                except socket.timeout:
                    continue
                except OSError:
                    closed = True
                    break
        self.record("slowloris", None, time.perf_counter() - started, closed_by_server=closed)

    def slow_reader(self) -> None:
        """One stream of LONG_TEXT read SLOW_READ_BYTES every SLOW_READ_PAUSE s until the server ends it (the phase's
        end does not stop it: the phase waits, so the next phase's clients do not share the server with it)."""
        started = time.perf_counter()
        connection = raw_request(self.port, speech_body(LONG_TEXT), timeout=30.0, headers={"Connection": "close"},
                                 receive_buffer=SLOW_READER_BUFFER)
        with connection:
            status, answer = status_of(connection, SLOW_READ_BYTES)
            body = answer.partition(b"\r\n\r\n")[2]
            if status == 200:
                count, ended = read_until_end(connection, body, SLOW_READ_BYTES, SLOW_READ_PAUSE,
                                              started + self.slow_reader_cap)
            else:
                count, ended = len(body), "refused" if status else "no_status"
        self.record("slow_readers", status, time.perf_counter() - started, bytes_read=count, ended=ended)
        if status != 200:
            self.stop.wait(2.0)  # refused (429 under the burst): try again a little later

    def idle_connections(self) -> None:
        """``idle_count`` sockets that send nothing, held until the server closes them (its header_timeout), then
        opened again, until the phase ends; each wave recorded: opened, closed by the server, first and last close."""
        started = time.perf_counter()
        sockets = open_idle(self.port, self.idle_count)
        closed_after: list[float] = []
        with selectors.DefaultSelector() as selector:  # epoll: hundreds of sockets, any file descriptor number
            for connection in sockets:
                selector.register(connection, selectors.EVENT_READ)
            while len(closed_after) < len(sockets) and not self.stop.is_set():
                for key, _ in selector.select(timeout=0.5):
                    try:
                        data = key.fileobj.recv(1024)
                    except OSError:
                        data = b""
                    if not data:  # the server closed it (a 408 or any other answer would be data: not expected)
                        closed_after.append(time.perf_counter() - started)
                        selector.unregister(key.fileobj)
        held = time.perf_counter() - started
        for connection in sockets:
            connection.close()
        # seconds: until the server's last close, or as long as the wave was held when the phase ended first
        self.record("idle_connections", None, max(closed_after) if len(closed_after) == len(sockets) else held,
                    opened=len(sockets), closed_by_server=len(closed_after),
                    first_closed_seconds=round(min(closed_after), 3) if closed_after else None,
                    ended_by_phase=len(closed_after) < len(sockets))

    def loop(self, kind: str, attempt, pause: float, limit: int) -> None:
        for _ in range(limit):
            if self.stop.is_set():
                return
            try:
                attempt()
            except OSError as err:
                self.record(kind, None, 0.0, error=str(err)[:120])
            self.stop.wait(pause)

    def start(self, skip: tuple[str, ...] = ()) -> list[threading.Thread]:
        """One thread per abuse kind (eight for the slow readers) but the kinds in ``skip``."""
        self.stop.clear()
        hello = speech_body("Hello.")
        kinds = {
            "huge_content_length": (lambda: self.simple("huge_content_length", b'{"input": "', 1_000_000_000), 2),
            "input_100kb": (lambda: self.simple("input_100kb", speech_body("a" * 100_000)), 2),
            "malformed_json": (lambda: self.simple("malformed_json", b'{"input": "Hello.", "voice": '), 2),
            "unknown_voice": (lambda: self.simple("unknown_voice", hello.replace(
                b'"voice": "voice"', b'"voice": "nobody"')), 2),
            "nan_speed": (lambda: self.simple("nan_speed", hello[:-1] + b', "speed": NaN}'), 2),
            "cross_site_origin": (lambda: self.simple("cross_site_origin", hello,
                                                      headers={"Origin": "http://evil.example"}), 2),
            "foreign_host": (lambda: self.simple("foreign_host", hello, headers={"Host": "evil.example"}), 2),
            "text_plain": (lambda: self.simple("text_plain", hello, headers={"Content-Type": "text/plain"}), 2),
            "burst": (self.burst, 20),
            "disconnect": (lambda: self.leave_early("disconnect", 0.0), 3),
            "stop_reading": (lambda: self.leave_early("stop_reading", 40.0), 1),
            "slowloris": (self.slowloris, 1),
        }
        workers = [(kind, attempt, pause) for kind, (attempt, pause) in kinds.items()]
        workers += [("slow_readers", self.slow_reader, 0.0)] * SLOW_READERS
        if self.idle_count:
            workers.append(("idle_connections", self.idle_connections, 0.0))
        threads = [threading.Thread(target=self.loop, args=(kind, attempt, pause, 200), daemon=True)
                   for kind, attempt, pause in workers if kind not in skip]
        for thread in threads:
            thread.start()
        return threads

    def summary(self) -> dict:
        kinds: dict[str, dict] = {}
        for record in self.records:
            entry = kinds.setdefault(record["kind"], {"attempts": 0, "statuses": {}, "slowest_seconds": 0.0})
            entry["attempts"] += 1
            key = str(record["status"])
            entry["statuses"][key] = entry["statuses"].get(key, 0) + 1
            entry["slowest_seconds"] = max(entry["slowest_seconds"], record["seconds"])
            if "closed_by_server" in record and record["kind"] == "slowloris":
                entry["closed_by_server"] = entry.get("closed_by_server", 0) + int(record["closed_by_server"])
            if record.get("retry_after"):
                entry["with_retry_after"] = entry.get("with_retry_after", 0) + 1
            if record["kind"] == "slow_readers":  # every stream: its status, bytes read, seconds, how it ended
                entry.setdefault("streams", []).append({key: record.get(key) for key in
                                                        ("status", "bytes_read", "seconds", "ended", "error")
                                                        if key in record})
                ended = record.get("ended", "error")
                entry.setdefault("ended", {})[ended] = entry.get("ended", {}).get(ended, 0) + 1
            if record["kind"] == "idle_connections":  # every wave of idle sockets
                entry.setdefault("waves", []).append({key: record.get(key) for key in
                                                      ("opened", "closed_by_server", "first_closed_seconds",
                                                       "seconds", "ended_by_phase", "error") if key in record})
        return kinds
