"""Ask a Zerobus endpoint one gRPC question over HTTP/2, without grpcio: does anything answer?

A TCP connection proves only that something listens: a silent listener, a port forward whose far side
is gone, a stopped process whose socket the kernel still holds all accept one, and the official SDK then
waits its whole connection and recovery budget before failing without naming the URL. What the SDK
needs is an HTTP/2 server speaking gRPC, so the probe sends what every gRPC client sends first: the
HTTP/2 connection preface and SETTINGS, then one unary call of the standard health service,
``/grpc.health.v1.Health/Check`` with an empty request
(https://github.com/grpc/grpc/blob/master/doc/health-checking.md), and waits for the server's response
HEADERS (or a reset) on that call. A gRPC server answers it with the health status or with
``UNIMPLEMENTED``; either is an answer of its gRPC layer, which is all the probe asks. Nothing is
authorised, opened or written.

Transport as the SDK chooses it from the URL's scheme
(docs/architecture.md#the-zerobus-service-and-the-official-sdk): TLS with ALPN ``h2`` for ``https://``
(system CAs; ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` are honoured as the SDK honours them), cleartext
HTTP/2 with prior knowledge for ``http://`` (RFC 9113 section 3.3).

grpcio is not a dependency of a production install (only the emulator extra brings it), and the SDK has
no call that reaches an endpoint without opening a stream for a table: hence these few frames by hand
(RFC 9113 framing, RFC 7541 literal header fields without Huffman coding).
"""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass

from zerobus_orchestration.errors import ErrorClass, ZerobusOrchestrationError

HEALTH_CHECK_PATH = "/grpc.health.v1.Health/Check"

_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _PING, _GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
_END_STREAM, _ACK, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
_STREAM = 1
_FRAME_HEADER = 9
# ``:status`` values the HPACK static table holds whole (RFC 7541 Appendix A, indices 8-14).
_INDEXED_STATUS = {0x88: 200, 0x89: 204, 0x8A: 206, 0x8B: 304, 0x8C: 400, 0x8D: 404, 0x8E: 500}


class NoGrpcAnswer(ZerobusOrchestrationError):
    """The endpoint did not answer the gRPC call; the text says what happened instead (no URL in it).

    ``silent``: nothing came back before the deadline (as opposed to a wrong answer or a closed
    connection).
    """

    error_class = ErrorClass.TRANSIENT  # the endpoint may answer later; the caller words the failure

    def __init__(self, message: str, *, silent: bool = False) -> None:
        super().__init__(message)
        self.silent = silent


@dataclass(frozen=True)
class GrpcAnswer:
    """How the endpoint answered: the HTTP status of the response (None where it was not decoded, or the
    call was reset), and the stream reset code (None for a response)."""

    status: int | None
    reset_code: int | None = None

    def describe(self) -> str:
        if self.reset_code is not None:
            return f"answered the gRPC health check over HTTP/2 (stream reset, code {self.reset_code})"
        shown = "" if self.status is None else f" (HTTP {self.status})"
        return f"answered the gRPC health check over HTTP/2{shown}"


def ask(sock: socket.socket, *, scheme: str, authority: str, host: str, deadline: float) -> GrpcAnswer:
    """Send the health check on ``sock`` (connected to the endpoint; TLS is added here for ``https``)
    and read until the answer, at most until ``deadline`` (``time.monotonic()``). Closes ``sock``."""
    try:
        sock.settimeout(_remaining(deadline))
        if scheme == "https":
            sock = _tls(sock, host)
        sock.sendall(_request(scheme, authority))
        return _read_answer(sock, deadline)
    except TimeoutError:
        raise NoGrpcAnswer("no answer to an HTTP/2 (gRPC) request", silent=True) from None
    finally:
        sock.close()


def _tls(sock: socket.socket, host: str) -> socket.socket:
    context = ssl.create_default_context()
    context.set_alpn_protocols(["h2"])
    try:
        wrapped = context.wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as exc:
        raise NoGrpcAnswer(
            f"its TLS certificate is not trusted ({exc.verify_message}); a private CA goes in SSL_CERT_FILE"
        ) from None
    except ssl.SSLError as exc:
        raise NoGrpcAnswer(
            f"the TLS handshake failed ({exc.reason or exc}); is it an https endpoint?"
        ) from None
    if wrapped.selected_alpn_protocol() != "h2":
        wrapped.close()
        raise NoGrpcAnswer("its TLS server does not offer HTTP/2 (ALPN h2), which gRPC needs")
    return wrapped


def _request(scheme: str, authority: str) -> bytes:
    headers = b"".join(
        (
            b"\x83",  # :method POST (static table index 3)
            b"\x86" if scheme == "http" else b"\x87",  # :scheme http / https (indices 6 / 7)
            _literal(":path", HEALTH_CHECK_PATH),
            _literal(":authority", authority),
            _literal("content-type", "application/grpc"),
            _literal("te", "trailers"),
        )
    )
    empty_message = b"\x00\x00\x00\x00\x00"  # gRPC length prefix: not compressed, 0 bytes
    return (
        _PREFACE
        + _frame(_SETTINGS, 0, 0)
        + _frame(_HEADERS, _END_HEADERS, _STREAM, headers)
        + _frame(_DATA, _END_STREAM, _STREAM, empty_message)
    )


def _read_answer(sock: socket.socket, deadline: float) -> GrpcAnswer:
    buffer = b""
    while True:
        while len(buffer) >= _FRAME_HEADER:
            length = int.from_bytes(buffer[:3], "big")
            if len(buffer) < _FRAME_HEADER + length:
                break
            kind, flags = buffer[3], buffer[4]
            stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
            payload = buffer[_FRAME_HEADER : _FRAME_HEADER + length]
            buffer = buffer[_FRAME_HEADER + length :]
            if kind == _SETTINGS and not flags & _ACK:
                sock.sendall(_frame(_SETTINGS, _ACK, 0))
            elif kind == _HEADERS and stream == _STREAM:
                return GrpcAnswer(_status(payload, flags))
            elif kind == _RST_STREAM and stream == _STREAM:
                return GrpcAnswer(None, reset_code=int.from_bytes(payload[:4], "big"))
            elif kind == _GOAWAY:
                code = int.from_bytes(payload[4:8], "big")
                raise NoGrpcAnswer(
                    f"it closed the HTTP/2 connection before answering (GOAWAY, error code {code})"
                )
        if buffer.startswith(b"HTTP/1.") or (buffer and buffer[:1] == b"\x15"):
            # An HTTP/1.x server's status line, or a TLS alert record: not cleartext HTTP/2.
            what = "HTTP/1.x" if buffer.startswith(b"HTTP/") else "TLS (is the URL https://?)"
            raise NoGrpcAnswer(f"it answered {what}, not HTTP/2, which gRPC needs")
        sock.settimeout(_remaining(deadline))
        chunk = sock.recv(65536)
        if not chunk:
            raise NoGrpcAnswer("it closed the connection without an HTTP/2 answer")
        buffer += chunk


def _status(payload: bytes, flags: int) -> int | None:
    """The response's ``:status`` where the server sent it as a whole static-table entry (as a server
    answering 200 does); None otherwise (the probe does not decode Huffman-coded header blocks)."""
    start, end = 0, len(payload)
    if flags & _PADDED and payload:
        start, end = 1, len(payload) - payload[0]
    if flags & _PRIORITY:
        start += 5
    return _INDEXED_STATUS.get(payload[start]) if start < end else None


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((kind, flags)) + stream.to_bytes(4, "big") + payload


def _literal(name: str, value: str) -> bytes:
    """A literal header field without indexing, new name, no Huffman coding (RFC 7541 §6.2.2)."""
    raw_name, raw_value = name.encode(), value.encode()
    return b"\x00" + _integer(len(raw_name)) + raw_name + _integer(len(raw_value)) + raw_value


def _integer(value: int) -> bytes:
    """An HPACK string length: 7-bit prefix, Huffman bit clear (RFC 7541 §5.1)."""
    if value < 0x7F:
        return bytes((value,))
    out, value = bytearray((0x7F,)), value - 0x7F
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left
