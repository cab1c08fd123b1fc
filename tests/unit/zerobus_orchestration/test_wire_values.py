"""Arrays to and from the wire types: the decimal text, zero-copy strings, nested conversions.

Properties (hypothesis) beside the table cases: every DECIMAL(p, s) value becomes the text Python's
exact decimal formatting writes, that text passes the emulator's grammar, and it reads back as the
same value; nested columns survive the trip storage -> wire -> storage unchanged, nulls and slices
included. The real-path proof (the official SDK into Delta and Iceberg) is
tests/integration/emulator/test_wire_contract.py.
"""

from __future__ import annotations

from decimal import Context, Decimal, localcontext

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerobus_orchestration.wire_schema import wire_type_of_arrow
from zerobus_orchestration.wire_values import (
    decimal_from_text,
    decimal_text,
    decimal_text_refusal,
    from_wire,
    to_wire,
)

EXACT = Context(prec=100)


def text_of(value: Decimal | None, scale: int) -> str | None:
    if value is None:
        return None
    with localcontext(EXACT):
        return f"{value:.{scale}f}"


def decimals(precision: int, scale: int, unscaled: list[int | None]) -> pa.Array:
    with localcontext(EXACT):
        values = [None if u is None else Decimal(u).scaleb(-scale) for u in unscaled]
    return pa.array(values, pa.decimal128(precision, scale))


CASES = [
    (5, 2, [150, -1, 0, 99999, -99999, None], ["1.50", "-0.01", "0.00", "999.99", "-999.99", None]),
    (3, 0, [-5, 0, 999], ["-5", "0", "999"]),
    (38, 0, [10**38 - 1, -(10**38 - 1)], ["9" * 38, "-" + "9" * 38]),
    (38, 38, [10**38 - 1, 1], ["0." + "9" * 38, "0." + "0" * 37 + "1"]),
    (38, 18, [1, -(10**20), 0], ["0.000000000000000001", "-100.000000000000000000", "0.000000000000000000"]),
    (1, 1, [-9, 0], ["-0.9", "0.0"]),
]


@pytest.mark.parametrize(("precision", "scale", "unscaled", "text"), CASES)
def test_decimal_text_is_the_declared_scale_without_exponent_sign_only_when_negative(
    precision: int, scale: int, unscaled: list[int | None], text: list[str | None]
) -> None:
    out = decimal_text(decimals(precision, scale, unscaled))
    assert out.type == pa.large_string() and out.to_pylist() == text


@pytest.mark.parametrize("scale", [0, 1, 5, 6, 7, 18])
def test_the_smallest_values_have_no_exponent_at_any_scale(scale: int) -> None:
    """At scales up to 6 the text is Arrow's own cast (no value there takes an exponent); from 7 on
    it is built from the digits, since Arrow would write 1E-7 or 0E-7."""
    column = decimals(scale + 2, scale, [0, 1, -1, 10**scale, None])
    assert decimal_text(column).to_pylist() == [text_of(v, scale) for v in column.to_pylist()]
    assert all("E" not in t for t in decimal_text(column).to_pylist() if t is not None)


def test_decimal_text_of_a_slice_and_of_narrow_decimal_types() -> None:
    column = decimals(10, 3, [1, -2, 3, None, 5]).slice(1, 3)
    assert decimal_text(column).to_pylist() == ["-0.002", "0.003", None]
    narrow = pa.array([Decimal("-1.5")], pa.decimal32(4, 1))
    assert decimal_text(narrow).to_pylist() == ["-1.5"]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_decimal_round_trips_through_its_text_exactly(data: st.DataObject) -> None:
    precision = data.draw(st.integers(1, 38), label="precision")
    scale = data.draw(st.integers(0, precision), label="scale")
    bound = 10**precision - 1
    unscaled = data.draw(st.lists(st.one_of(st.none(), st.integers(-bound, bound)), min_size=1, max_size=20))
    column = decimals(precision, scale, unscaled)
    text = decimal_text(column)
    assert text.to_pylist() == [text_of(v, scale) for v in column.to_pylist()]
    assert decimal_text_refusal(text, precision, scale) is None
    assert decimal_from_text(text, precision, scale).equals(column)


REFUSED_TEXT = [
    "1.234",
    "1000.00",
    "1e2",
    "1E2",
    "+1.00",
    " 1.00",
    "1.00 ",
    "1,00",
    ".5",
    "5.",
    "",
    "-",
    "abc",
    "0x10",
    "NaN",
    "--1",
]


@pytest.mark.parametrize("text", REFUSED_TEXT)
def test_text_that_is_not_decimal_5_2_is_refused_naming_the_first_value(text: str) -> None:
    column = pa.array(["1.50", None, text], pa.large_string())
    refusal = decimal_text_refusal(column, 5, 2)
    assert refusal is not None and (refusal.count, refusal.row, refusal.text) == (1, 2, text)
    assert "DECIMAL(5,2)" in refusal.describe() and repr(text) in refusal.describe()


@pytest.mark.parametrize(
    ("text", "precision", "scale"),
    [("1.5", 5, 2), ("007.50", 5, 2), ("-0", 1, 0), ("0.55", 2, 2), ("00.55", 2, 2), ("-999.99", 5, 2)],
)
def test_fewer_fraction_digits_and_leading_zeros_are_values_of_the_type(
    text: str, precision: int, scale: int
) -> None:
    column = pa.array([text], pa.large_string())
    assert decimal_text_refusal(column, precision, scale) is None
    with localcontext(EXACT):
        assert decimal_from_text(column, precision, scale).to_pylist() == [Decimal(text)]


def test_strings_and_binaries_widen_their_offsets_over_the_same_data_buffer() -> None:
    strings = pa.array(["a", "bb", None, "ccc"]).slice(1, 3)
    wide = to_wire(strings, pa.large_string())
    assert wide.type == pa.large_string() and wide.to_pylist() == ["bb", None, "ccc"]
    assert wide.buffers()[2].address == strings.buffers()[2].address  # data reused, not copied
    binaries = pa.array([b"x", b"yz"])
    assert to_wire(binaries, pa.large_binary()).buffers()[2].address == binaries.buffers()[2].address


NESTED = [
    (
        pa.list_(pa.field("element", pa.decimal128(6, 2))),
        [[Decimal("1.5"), None], None, [], [Decimal("-9999.99")]],
    ),
    (
        pa.map_(pa.string(), pa.decimal128(4, 1)),
        [[("a", Decimal("1.5")), ("b", None)], None, [], [("c", Decimal("-999.9"))]],
    ),
    (
        pa.struct(
            [pa.field("p", pa.decimal128(3, 0), nullable=False), pa.field("tags", pa.list_(pa.string()))]
        ),
        [
            {"p": Decimal(1), "tags": ["x"]},
            None,
            {"p": Decimal(-999), "tags": None},
            {"p": Decimal(0), "tags": []},
        ],
    ),
    (
        pa.list_(pa.struct([pa.field("sku", pa.string()), pa.field("price", pa.decimal128(10, 2))])),
        [[{"sku": "a", "price": Decimal("0.01")}, None], None, [{"sku": None, "price": None}], []],
    ),
    (pa.map_(pa.int32(), pa.list_(pa.int64()).value_type), [[(1, 2)], None, [], [(3, None)]]),
]


@pytest.mark.parametrize(("kind", "rows"), NESTED, ids=[str(k) for k, _ in NESTED])
@pytest.mark.parametrize("sliced", [False, True])
def test_nested_columns_go_to_the_wire_and_back_unchanged(
    kind: pa.DataType, rows: list[object], sliced: bool
) -> None:
    column = pa.array(rows, kind)
    if sliced:
        column = column.slice(1, 3)
    wire = wire_type_of_arrow(kind)
    sent = to_wire(column, wire)
    assert str(sent.type) == str(wire)  # names included: list item, map keys/values
    back = from_wire(sent, kind)
    assert back.type == kind and back.to_pylist() == column.to_pylist()


def test_nested_decimals_go_as_text() -> None:
    kind = pa.struct([pa.field("amounts", pa.list_(pa.decimal128(5, 2)))])
    sent = to_wire(
        pa.array([{"amounts": [Decimal("1.5"), Decimal("-0.01")]}], kind), wire_type_of_arrow(kind)
    )
    assert sent.to_pylist() == [{"amounts": ["1.50", "-0.01"]}]
