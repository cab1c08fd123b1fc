"""The in-place FlightData parser reads what protobuf's generated class reads, and refuses what it refuses."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message import DecodeError

from zerobus_orchestration.emulator.flight_frame import parse_flight_data
from zerobus_orchestration.emulator.proto import flight_pb2 as _flight_pb2

flight_pb2: Any = _flight_pb2


def fields(message: bytes) -> tuple[bytes, bytes, bytes]:
    frame = parse_flight_data(message)
    return frame.data_header, frame.app_metadata, bytes(frame.data_body)


def reference(message: bytes) -> tuple[bytes, bytes, bytes]:
    parsed = flight_pb2.FlightData.FromString(message)
    return parsed.data_header, parsed.app_metadata, parsed.data_body


MESSAGES = {
    "empty": flight_pb2.FlightData(),
    "schema frame": flight_pb2.FlightData(data_header=b"\x10\x00schema"),
    "batch frame": flight_pb2.FlightData(
        data_header=b"h" * 300, app_metadata=b'{"offset_id": 7}', data_body=bytes(range(256)) * 9000
    ),
    "with a descriptor": flight_pb2.FlightData(
        flight_descriptor=flight_pb2.FlightDescriptor(type=2, cmd=b"c", path=["a", "b"]),
        data_header=b"h",
        data_body=b"b" * 200,
    ),
}


@pytest.mark.parametrize("name", MESSAGES)
def test_fields_match_protobuf(name: str) -> None:
    message = MESSAGES[name].SerializeToString()
    assert fields(message) == reference(message)


def test_the_body_is_a_view_of_the_received_message_not_a_copy() -> None:
    message = flight_pb2.FlightData(data_header=b"h", data_body=b"b" * 1000).SerializeToString()
    body = parse_flight_data(message).data_body
    assert isinstance(body, memoryview) and body.obj is message


def test_unknown_fields_repeated_fields_and_field_order_as_protobuf_reads_them() -> None:
    def tag(field: int, wire: int) -> bytes:
        return bytes(varint((field << 3) | wire))

    def varint(value: int) -> bytearray:
        out = bytearray()
        while True:
            out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
            value >>= 7
            if not value:
                return out

    def length_delimited(field: int, data: bytes) -> bytes:
        return tag(field, 2) + bytes(varint(len(data))) + data

    message = b"".join(
        [
            length_delimited(1000, b"first body"),  # out of order, then repeated: the last wins
            tag(9, 0) + bytes(varint(300)),  # unknown varint
            tag(10, 1) + b"\x00" * 8,  # unknown fixed64
            tag(11, 5) + b"\x00" * 4,  # unknown fixed32
            length_delimited(12, b"unknown bytes"),
            tag(2, 0) + bytes(varint(5)),  # data_header with the wrong wire type: an unknown field
            length_delimited(3, b"meta"),
            length_delimited(1000, b"second body"),
        ]
    )
    assert fields(message) == reference(message) == (b"", b"meta", b"second body")


@pytest.mark.parametrize(
    "message",
    [
        pytest.param(b"\x12\x05abc", id="a field cut short"),
        pytest.param(b"\x12", id="a length missing"),
        pytest.param(b"\xc2", id="a tag cut short"),
        pytest.param(b"\x00\x00", id="field number 0"),
        pytest.param(b"\x13\x00", id="a group start"),
        pytest.param(b"\x51\x00\x00", id="a fixed64 cut short"),
    ],
)
def test_malformed_messages_are_refused_as_protobuf_refuses_them(message: bytes) -> None:
    with pytest.raises(DecodeError):
        reference(message)
    with pytest.raises(ValueError, match="FlightData"):
        parse_flight_data(message)
