"""The emulator's value check before the ack: dates a table cannot hold, at any depth, but only values
of the table: what a null struct, list or map still holds in its slot is not looked at."""

from __future__ import annotations

import pyarrow as pa
import pytest

from zerobus_orchestration.emulator.errors import ConformError
from zerobus_orchestration.emulator.value_check import MAX_DAYS, check_values

TABLE = "main.raw.events"
BAD_DAY = MAX_DAYS + 1  # 10000-01-01


def _map_of_dates(*, hidden_in_null_map: bool) -> pa.MapArray:
    """Two maps {"a": day}; the second holds 10000-01-01, and is null when ``hidden_in_null_map``."""
    return pa.MapArray.from_arrays(
        pa.array([0, 1, 2], pa.int32()),
        pa.array(["a", "b"]),
        pa.array([0, BAD_DAY], pa.date32()),
        mask=pa.array([False, hidden_in_null_map]),
    )


def test_a_date_out_of_range_as_a_map_value_is_refused_naming_the_column_path() -> None:
    batch = pa.record_batch({"m": _map_of_dates(hidden_in_null_map=False)})
    with pytest.raises(ConformError, match=r"m\.value") as refused:
        check_values(TABLE, batch)
    assert "0001-01-01..9999-12-31" in str(refused.value)


def test_a_date_out_of_range_as_a_map_key_is_refused() -> None:
    keys = pa.array([0, BAD_DAY], pa.date32())
    maps = pa.MapArray.from_arrays(pa.array([0, 1, 2], pa.int32()), keys, pa.array([1, 2]))
    with pytest.raises(ConformError, match=r"m\.key"):
        check_values(TABLE, pa.record_batch({"m": maps}))


def test_what_a_null_map_still_holds_in_its_slot_is_not_a_value_of_the_table() -> None:
    maps = _map_of_dates(hidden_in_null_map=True)
    assert maps.items.cast(pa.int32()).to_pylist() == [0, BAD_DAY]  # the bad day is there, under the null map
    check_values(TABLE, pa.record_batch({"m": maps}))


def test_a_null_list_and_a_null_struct_hide_their_children_too() -> None:
    days = pa.array([0, BAD_DAY], pa.date32())
    lists = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), days, mask=pa.array([False, True]))
    structs = pa.StructArray.from_arrays([days], names=["d"], mask=pa.array([False, True]))
    check_values(TABLE, pa.record_batch({"l": lists, "s": structs}))
    with pytest.raises(ConformError, match=r"l\.element"):
        check_values(
            TABLE, pa.record_batch({"l": pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), days)})
        )
