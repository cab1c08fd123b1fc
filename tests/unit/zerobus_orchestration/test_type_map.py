"""Arrow <-> Delta type map and the widening lattice: table-driven cases plus properties."""

from __future__ import annotations

import re
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerobus_orchestration.errors import UnsupportedType
from zerobus_orchestration.type_map import (
    arrow_storage_type,
    arrow_type_of_delta,
    can_widen_to,
    delta_json_type,
    delta_type,
    iceberg_legal_widening,
)

DELTA_TYPES = [
    (pa.bool_(), "BOOLEAN"),
    (pa.int8(), "TINYINT"),
    (pa.int16(), "SMALLINT"),
    (pa.int32(), "INT"),
    (pa.int64(), "BIGINT"),
    (pa.uint8(), "SMALLINT"),
    (pa.uint16(), "INT"),
    (pa.uint32(), "BIGINT"),
    (pa.float32(), "FLOAT"),
    (pa.float64(), "DOUBLE"),
    (pa.decimal128(38, 10), "DECIMAL(38,10)"),
    (pa.decimal32(5, 2), "DECIMAL(5,2)"),
    (pa.decimal64(18, 0), "DECIMAL(18,0)"),
    (pa.string(), "STRING"),
    (pa.large_string(), "STRING"),
    (pa.string_view(), "STRING"),
    (pa.dictionary(pa.int32(), pa.string()), "STRING"),
    (pa.dictionary(pa.int8(), pa.large_string()), "STRING"),
    (pa.run_end_encoded(pa.int32(), pa.int64()), "BIGINT"),
    (pa.binary(), "BINARY"),
    (pa.large_binary(), "BINARY"),
    (pa.binary_view(), "BINARY"),
    (pa.binary(16), "BINARY"),
    (pa.date32(), "DATE"),
    (pa.date64(), "DATE"),
    (pa.timestamp("s", tz="UTC"), "TIMESTAMP"),
    (pa.timestamp("ns", tz="Europe/Paris"), "TIMESTAMP"),
    (pa.timestamp("us"), "TIMESTAMP_NTZ"),
    (pa.timestamp("ms"), "TIMESTAMP_NTZ"),
    (pa.list_(pa.int32()), "ARRAY<INT>"),
    (pa.large_list(pa.string()), "ARRAY<STRING>"),
    (pa.list_(pa.float64(), 3), "ARRAY<DOUBLE>"),
    (pa.list_view(pa.int8()), "ARRAY<TINYINT>"),
    (pa.map_(pa.string(), pa.int64()), "MAP<STRING, BIGINT>"),
    (pa.map_(pa.int32(), pa.list_(pa.uint8())), "MAP<INT, ARRAY<SMALLINT>>"),
    (pa.struct([("a", pa.int32()), ("b", pa.string())]), "STRUCT<a: INT, b: STRING>"),
    (
        pa.struct([("odd name", pa.int32()), ("tick`s", pa.bool_()), ("from", pa.date32())]),
        "STRUCT<`odd name`: INT, `tick``s`: BOOLEAN, `from`: DATE>",
    ),
    (
        pa.struct([("inner", pa.struct([("x", pa.map_(pa.string(), pa.timestamp("us", tz="UTC")))]))]),
        "STRUCT<inner: STRUCT<x: MAP<STRING, TIMESTAMP>>>",
    ),
]


@pytest.mark.parametrize(("arrow", "expected"), DELTA_TYPES, ids=[str(a) for a, _ in DELTA_TYPES])
def test_delta_type(arrow: pa.DataType, expected: str) -> None:
    assert delta_type(arrow) == expected


UNSUPPORTED = [
    (pa.float16(), "float32"),
    (pa.time32("s"), "timestamp"),
    (pa.time64("us"), "timestamp"),
    (pa.duration("ms"), "int64"),
    (pa.month_day_nano_interval(), "int64"),
    (pa.null(), "concrete type"),
    (pa.decimal256(40, 2), "precision"),
    (pa.decimal256(20, 2), "decimal128"),
    (pa.uint64(), "decimal128(20, 0)"),
    (pa.decimal128(5, -2), "decimal128(7, 0)"),
    (pa.decimal256(30, -2), "decimal128(32, 0)"),
    (pa.decimal128(38, -1), "float64"),
    (pa.decimal128(5, 10), "decimal128(10, 10)"),
    (pa.list_(pa.decimal128(5, -2)), "decimal128(7, 0)"),
    (pa.struct([]), "at least one field"),
    (pa.dense_union([pa.field("a", pa.int32())]), "cast"),
    (pa.list_(pa.float16()), "float32"),
    (pa.struct([("t", pa.time64("ns"))]), "timestamp"),
    (pa.dictionary(pa.int8(), pa.null()), "concrete"),
]


@pytest.mark.parametrize(("arrow", "hint"), UNSUPPORTED, ids=[str(a) for a, _ in UNSUPPORTED])
def test_unsupported_types_name_type_and_cast(arrow: pa.DataType, hint: str) -> None:
    with pytest.raises(UnsupportedType) as info:
        delta_type(arrow)
    assert hint in str(info.value)
    assert "cannot be stored" in str(info.value)


STORAGE = [
    (pa.uint8(), pa.int16()),
    (pa.uint16(), pa.int32()),
    (pa.uint32(), pa.int64()),
    (pa.dictionary(pa.int16(), pa.string()), pa.string()),
    (pa.large_string(), pa.string()),
    (pa.binary(4), pa.binary()),
    (pa.date64(), pa.date32()),
    (pa.timestamp("ns", tz="America/New_York"), pa.timestamp("us", tz="UTC")),
    (pa.timestamp("ns"), pa.timestamp("us")),
    (pa.large_list(pa.uint8()), pa.list_(pa.int16())),
]


@pytest.mark.parametrize(("arrow", "storage"), STORAGE, ids=[str(a) for a, _ in STORAGE])
def test_arrow_storage_type(arrow: pa.DataType, storage: pa.DataType) -> None:
    assert arrow_storage_type(arrow) == storage


def test_inverse_reads_delta_log_json() -> None:
    assert arrow_type_of_delta("decimal(10,2)") == pa.decimal128(10, 2)
    assert arrow_type_of_delta("timestamp") == pa.timestamp("us", tz="UTC")
    assert arrow_type_of_delta("timestamp_ntz") == pa.timestamp("us")
    nested = {
        "type": "struct",
        "fields": [
            {"name": "a", "type": {"type": "array", "elementType": "short", "containsNull": False},
             "nullable": False, "metadata": {}},
        ],
    }  # fmt: skip
    got = arrow_type_of_delta(nested)
    assert got == pa.struct([pa.field("a", pa.list_(pa.field("element", pa.int16(), nullable=False)),
                                      nullable=False)])  # fmt: skip
    with pytest.raises(UnsupportedType):
        arrow_type_of_delta("void")


WIDEN = [
    (pa.int32(), pa.int64(), True),
    (pa.int8(), pa.int16(), True),
    (pa.uint8(), pa.int16(), True),
    (pa.uint32(), pa.int64(), True),
    (pa.float32(), pa.float64(), True),
    (pa.decimal128(10, 2), pa.decimal128(12, 2), True),
    (pa.int64(), pa.int64(), True),
    (pa.string(), pa.string(), True),
    (pa.int64(), pa.int32(), False),
    (pa.int32(), pa.float64(), False),
    (pa.int64(), pa.float64(), False),
    (pa.int8(), pa.float32(), False),
    (pa.float64(), pa.float32(), False),
    (pa.decimal128(10, 2), pa.decimal128(12, 3), False),
    (pa.decimal128(12, 2), pa.decimal128(10, 2), False),
    (pa.int8(), pa.uint16(), False),
    (pa.uint32(), pa.int32(), False),
    (pa.int32(), pa.string(), False),
    (pa.timestamp("us"), pa.timestamp("us", tz="UTC"), False),
    (pa.int32(), pa.decimal128(38, 0), False),
]


@pytest.mark.parametrize(("src", "dst", "ok"), WIDEN, ids=[f"{s}->{d}" for s, d, _ in WIDEN])
def test_can_widen_to(src: pa.DataType, dst: pa.DataType, ok: bool) -> None:
    assert can_widen_to(src, dst) is ok


ICEBERG = [
    (pa.int32(), pa.int64(), True),
    (pa.int16(), pa.int32(), True),
    (pa.float32(), pa.float64(), True),
    (pa.decimal128(9, 2), pa.decimal128(18, 2), True),
    (pa.int32(), pa.float64(), False),
    (pa.int64(), pa.int32(), False),
    (pa.decimal128(9, 2), pa.decimal128(18, 3), False),
]


@pytest.mark.parametrize(("src", "dst", "ok"), ICEBERG, ids=[f"{s}->{d}" for s, d, _ in ICEBERG])
def test_iceberg_legal_widening(src: pa.DataType, dst: pa.DataType, ok: bool) -> None:
    assert iceberg_legal_widening(src, dst) is ok


# --- properties --------------------------------------------------------------------------------------

_PRIMITIVES = st.sampled_from(
    [
        pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
        pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.string_view(), pa.binary(),
        pa.large_binary(), pa.binary(8), pa.date32(), pa.date64(), pa.timestamp("s"), pa.timestamp("ns"),
        pa.timestamp("us", tz="UTC"), pa.timestamp("ms", tz="Asia/Tokyo"),
        pa.dictionary(pa.int32(), pa.string()),
    ]
)  # fmt: skip
_DECIMALS = st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: pa.decimal128(p, s)))
# Arrow also accepts scales Delta's DECIMAL(p,s) cannot declare (it needs 0 <= s <= p <= 38): negative
# ones (counted in powers of ten) and ones above the precision.
_NEGATIVE_SCALE_DECIMALS = st.builds(
    lambda make, p, s: make(p, s), st.sampled_from([pa.decimal128, pa.decimal256]), st.integers(1, 38),
    st.integers(-45, -1),
)  # fmt: skip
_SCALE_ABOVE_PRECISION = st.integers(1, 37).flatmap(
    lambda p: st.integers(p + 1, 38).map(lambda s: pa.decimal128(p, s))
)
_ANY_DECIMALS = st.one_of(_DECIMALS, _NEGATIVE_SCALE_DECIMALS, _SCALE_ABOVE_PRECISION)
_NAMES = st.text(min_size=1, max_size=8)
_LEAVES = st.one_of(_PRIMITIVES, _DECIMALS)


def _nested(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
    return st.one_of(
        children.map(pa.list_),
        children.map(pa.large_list),
        st.tuples(st.sampled_from([pa.string(), pa.int32()]), children).map(lambda kv: pa.map_(*kv)),
        st.lists(
            st.tuples(_NAMES, children, st.booleans()), min_size=1, max_size=3, unique_by=lambda x: x[0]
        ).map(lambda fs: pa.struct([pa.field(n, t, nullable=nl) for n, t, nl in fs])),
    )


SUPPORTED = st.recursive(_LEAVES, _nested, max_leaves=6)
WITH_ANY_DECIMAL = st.recursive(st.one_of(_PRIMITIVES, _ANY_DECIMALS), _nested, max_leaves=6)
_NUMERIC = st.one_of(
    st.sampled_from(
        [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
         pa.float32(), pa.float64(), pa.string()]
    ),
    _ANY_DECIMALS,
)  # fmt: skip


@settings(max_examples=300)
@given(SUPPORTED)
def test_delta_type_is_total_and_inverse_round_trips(t: pa.DataType) -> None:
    text = delta_type(t)
    assert text and text == text.strip()
    storage = arrow_storage_type(t)
    assert arrow_type_of_delta(delta_json_type(t)) == storage
    assert arrow_storage_type(storage) == storage  # canonical is a fixed point
    assert delta_type(storage) == text


_DECIMAL_TEXT = re.compile(r"DECIMAL\((-?\d+),(-?\d+)\)")


@settings(max_examples=300)
@given(WITH_ANY_DECIMAL)
def test_delta_type_declares_only_legal_decimals_or_refuses(t: pa.DataType) -> None:
    try:
        text = delta_type(t)
    except UnsupportedType as exc:
        assert "cannot be stored" in str(exc) and "Delta DECIMAL needs a scale" in str(exc)
        return
    for precision, scale in _DECIMAL_TEXT.findall(text):
        assert 0 <= int(scale) <= int(precision) <= 38, text


@settings(deadline=None)  # the first decimal cast loads Arrow's compute kernels
@given(_NEGATIVE_SCALE_DECIMALS)
def test_negative_scale_is_refused_with_a_cast_that_keeps_every_value(t: pa.DataType) -> None:
    with pytest.raises(UnsupportedType) as info:
        delta_type(t)
    message = str(info.value)
    assert str(t) in message and "scale of 0 or more" in message
    digits = t.precision - t.scale
    if digits > 38:
        assert "float64" in message
        return
    fix = pa.decimal128(digits, 0)
    assert f"decimal128({digits}, 0)" in message and delta_type(fix) == f"DECIMAL({digits},0)"
    # t's extremes, built at scale 0 (pyarrow infers the wrong precision from a Decimal with an exponent)
    largest = (10**t.precision - 1) * 10**-t.scale
    values = pa.array([largest, -largest, 0], type=fix).cast(t)
    assert values.cast(fix).to_pylist() == [Decimal(largest), Decimal(-largest), Decimal(0)]


@given(_NUMERIC)
def test_widening_is_reflexive(t: pa.DataType) -> None:
    assert can_widen_to(t, t)
    assert iceberg_legal_widening(t, t)


@given(_NUMERIC, _NUMERIC)
def test_widening_is_antisymmetric(a: pa.DataType, b: pa.DataType) -> None:
    if a != b:
        assert not (can_widen_to(a, b) and can_widen_to(b, a))


@given(_NUMERIC, _NUMERIC, _NUMERIC)
def test_widening_is_transitive(a: pa.DataType, b: pa.DataType, c: pa.DataType) -> None:
    if can_widen_to(a, b) and can_widen_to(b, c):
        assert can_widen_to(a, c)


@given(_NUMERIC, _NUMERIC)
def test_never_widens_integer_to_float_and_iceberg_is_a_subset(a: pa.DataType, b: pa.DataType) -> None:
    if pa.types.is_integer(a) and pa.types.is_floating(b):
        assert not can_widen_to(a, b)
    if iceberg_legal_widening(a, b):
        assert can_widen_to(a, b)


@given(SUPPORTED, SUPPORTED)
def test_distinct_nested_types_never_widen(a: pa.DataType, b: pa.DataType) -> None:
    nested = pa.types.is_nested(a) or pa.types.is_nested(b)
    if nested and a != b:
        assert not can_widen_to(a, b)
