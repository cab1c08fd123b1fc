"""The decimal text built from 64-bit unscaled integers is Arrow's own text, value for value.

``decimal_digits.int64_text`` replaces Arrow's decimal-to-string cast for the values whose unscaled
integer fits in 64 bits; ``wire_values.decimal_text`` sends the rest through the cast as before. These
tests hold the two to the same text on every path: signs, values below one (whose units digit the
trim would otherwise eat), the widest and narrowest rows, nulls, slices, and batches that mix values
that fit with values that do not. tests/unit/zerobus_orchestration/test_wire_values.py checks the text
against Python's exact decimal formatting.
"""

from __future__ import annotations

from decimal import Context, Decimal, localcontext

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerobus_orchestration.decimal_digits import MAX_SCALE, int64_text
from zerobus_orchestration.wire_values import _arrow_text, decimal_text

EXACT = Context(prec=100)
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def column(precision: int, scale: int, unscaled: list[int | None]) -> pa.Array:
    with localcontext(EXACT):
        values = [None if u is None else Decimal(u).scaleb(-scale) for u in unscaled]
    return pa.array(values, pa.decimal128(precision, scale))


@pytest.mark.parametrize("scale", range(MAX_SCALE + 1))
def test_every_scale_writes_arrows_text_at_the_edges_of_64_bits(scale: int) -> None:
    edges = [0, 1, -1, 9, -9, 10, -10, 10**scale, -(10**scale), 10**scale - 1, INT64_MAX, INT64_MIN + 1, None]
    values = column(38, scale, edges)
    built = int64_text(values)
    assert built.fits is None
    assert built.text.to_pylist() == _arrow_text(values).to_pylist()


def test_values_beyond_64_bits_are_left_to_the_cast_and_still_come_out_right() -> None:
    values = column(38, 2, [150, INT64_MIN, 10**30, -(10**30), None, -7])
    built = int64_text(values)
    assert built.fits is not None and built.fits.tolist() == [True, False, False, False, True, True]
    assert decimal_text(values).to_pylist() == [
        "1.50",
        "-92233720368547758.08",
        f"{10**28}.00",
        f"-{10**28}.00",
        None,
        "-0.07",
    ]


def test_a_slice_with_nulls_keeps_its_rows_and_its_nulls() -> None:
    values = column(12, 3, [None, 1, -2000, None, 123456789, 0, -1]).slice(1, 5)
    text = int64_text(values).text
    assert text.to_pylist() == ["0.001", "-2.000", None, "123456.789", "0.000"]
    assert text.null_count == 1 and text.offset == 0


def test_a_column_above_the_largest_scale_is_refused_not_misprinted() -> None:
    with pytest.raises(ValueError, match=r"scale 0\.\.18"):
        int64_text(column(38, MAX_SCALE + 1, [1]))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_batch_is_written_as_arrows_cast_writes_it(data: st.DataObject) -> None:
    precision = data.draw(st.integers(1, 38), label="precision")
    scale = data.draw(st.integers(0, min(precision, MAX_SCALE)), label="scale")
    bound = 10**precision - 1
    small = st.integers(max(-bound, INT64_MIN), min(bound, INT64_MAX))
    value = st.one_of(st.none(), small, st.integers(-bound, bound))
    unscaled = data.draw(st.lists(value, min_size=1, max_size=40), label="unscaled")
    start = data.draw(st.integers(0, len(unscaled) - 1), label="slice start")
    values = column(precision, scale, unscaled).slice(start)
    assert decimal_text(values).to_pylist() == _arrow_text(values).to_pylist()
