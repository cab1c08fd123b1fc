"""The pandas handler keeps named index levels as columns and drops unnamed ones (row numbering)."""

import pandas as pd
import pytest

from dagster_defs.handlers import PandasTypeHandler
from zerobus_orchestration.errors import ConfigError


def _names(frame: pd.DataFrame) -> list[str]:
    table = PandasTypeHandler().to_arrow(frame)
    return list(table.schema.names)


def test_unnamed_indexes_are_dropped() -> None:
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    assert _names(frame) == ["a", "b"]
    assert _names(frame[frame["a"] > 1]) == ["a", "b"]  # a filtered, non-range index is not data either


def test_named_levels_become_leading_columns_and_unnamed_levels_are_dropped() -> None:
    frame = pd.DataFrame({"k": ["p", "q"], "n": [1, 2], "v": [0.5, 1.5]})
    assert _names(frame.set_index("k")) == ["k", "n", "v"]
    partly_named = frame.set_index(["k", "n"]).rename_axis(["k", None])
    assert _names(partly_named) == ["k", "v"]


def test_an_index_named_like_a_column_is_refused_with_the_fix() -> None:
    frame = pd.DataFrame({"k": ["p", "q"]}, index=pd.Index(["a", "b"], name="k"))
    with pytest.raises(ConfigError, match=r"\['k'\].*rename_axis"):
        PandasTypeHandler().to_arrow(frame)
