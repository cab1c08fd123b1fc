"""A DoPut ``FlightData`` message read in place: the Arrow body stays a view of the received bytes.

Decoding with the generated protobuf class copies the body twice before the emulator sees it (into
the message's arena while parsing, then into a new ``bytes`` on each read of ``data_body``), for
frames of ~2 MiB at hundreds of MB/s, in the gRPC handler threads. The emulator reads three fields of
``FlightData`` (flight.proto): this parser finds them in the wire bytes and keeps the body as a
``memoryview`` of the message grpcio handed over, so its one copy is the write-ahead log's buffer
(``records.frame_stream``).

Wire format as protobuf defines it: fields in any order, the last occurrence of a field wins, unknown
fields (a later FlightData, the ``flight_descriptor`` the emulator does not use) are skipped, and a
field of the wrong wire type is an unknown field (as protobuf's own parser treats it), and a
message cut short or with an invalid tag is refused with ``ValueError`` (grpcio then fails the call,
as it would for a protobuf ``DecodeError``).
"""

from __future__ import annotations

from dataclasses import dataclass

_DATA_HEADER = 2
_APP_METADATA = 3
_DATA_BODY = 1000
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_MAX_VARINT_BYTES = 10


@dataclass(frozen=True, slots=True)
class FlightFrame:
    """The fields of a ``FlightData`` the emulator reads; ``data_body`` is a view of the message."""

    data_header: bytes
    app_metadata: bytes
    data_body: memoryview


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the offset just past it."""
    value = 0
    shift = 0
    end = min(len(data), pos + _MAX_VARINT_BYTES)
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ValueError("FlightData: truncated or overlong varint")


def parse_flight_data(message: bytes) -> FlightFrame:
    """The emulator's fields of a serialized ``FlightData`` (grpcio's ``request_deserializer``)."""
    data = memoryview(message)
    size = len(data)
    spans = {_DATA_HEADER: (0, 0), _APP_METADATA: (0, 0), _DATA_BODY: (0, 0)}
    pos = 0
    while pos < size:
        key, pos = _varint(data, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise ValueError("FlightData: field number 0")
        if wire == _LEN:
            length, pos = _varint(data, pos)
            end = pos + length
            if end > size:
                raise ValueError(f"FlightData: field {field} runs past the end of the message")
            if field in spans:
                spans[field] = (pos, end)
            pos = end
        elif wire == _VARINT:
            _, pos = _varint(data, pos)
        elif wire == _I64:
            pos += 8
        elif wire == _I32:
            pos += 4
        else:  # groups (3, 4) are not in FlightData; 6 and 7 are invalid
            raise ValueError(f"FlightData: unsupported wire type {wire} (field {field})")
    if pos > size:
        raise ValueError("FlightData: the last field runs past the end of the message")
    header, metadata, body = (spans[f] for f in (_DATA_HEADER, _APP_METADATA, _DATA_BODY))
    return FlightFrame(
        bytes(data[header[0] : header[1]]), bytes(data[metadata[0] : metadata[1]]), data[body[0] : body[1]]
    )
