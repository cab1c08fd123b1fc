"""Derived tables do not lock in their first run's inferred types (issue 16 item 5), through ``dg.materialize``
on the embedded emulator:

- a pandas column of ``Decimal`` values is inferred with the least precision its first rows need; the
  table is created with ``DECIMAL(38, s)``, so the next run's larger values fit;
- an integer column that grows from int32 to int64 is refused naming the setting, and with
  ``catalog.allow_widening`` the embedded backend widens the table by rewriting it, keeping earlier rows.
"""

from collections.abc import Iterator
from decimal import Decimal

import dagster as dg
import numpy as np
import pandas as pd
import pytest

from dagster_defs import ZerobusIOManager, ZerobusResource
from zerobus_orchestration.config import ZerobusConfig

KEY = dg.AssetKey(["derived", "totals"])
TABLE = "main.derived.totals"


def _asset(totals: list[str], counts: np.ndarray) -> dg.AssetsDefinition:
    @dg.asset(key=KEY, metadata={"zerobus/role": "derived", "zerobus/write_mode": "append"})  # runs add up
    def totals_asset() -> pd.DataFrame:
        return pd.DataFrame({"total": [Decimal(t) for t in totals], "n": counts})

    return totals_asset


RUN_1 = _asset(["12.50", "3.25"], np.array([1, 2], np.int32))
RUN_2 = _asset(["1234567.89"], np.array([2**40], np.int64))


def _widening(cfg: ZerobusConfig) -> ZerobusConfig:
    return cfg.model_copy(update={"catalog": cfg.catalog.model_copy(update={"allow_widening": True})})


@pytest.fixture
def widening_resources(zb_config: ZerobusConfig) -> Iterator[dict[str, object]]:
    zerobus = ZerobusResource.from_config(_widening(zb_config))
    yield {"zerobus": zerobus, "io_manager": ZerobusIOManager(zerobus=zerobus, catalog="main")}


def _messages(exc: BaseException | None) -> str:
    seen = []
    while exc is not None:
        seen.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(seen)


def test_without_the_setting_the_failure_names_catalog_allow_widening(resources: dict) -> None:
    assert dg.materialize([RUN_1], resources=resources).success
    with pytest.raises(Exception) as info:
        dg.materialize([RUN_2], resources=resources)
    text = _messages(info.value)
    assert "totals.n" in text and "ZEROBUS_CATALOG__ALLOW_WIDENING=true" in text
    assert "allow_widening=True" not in text


def test_inferred_decimals_leave_room_and_an_opted_in_widening_rewrites_the_table(
    widening_resources: dict,
) -> None:
    assert dg.materialize([RUN_1], resources=widening_resources).success
    zerobus = widening_resources["zerobus"]
    assert isinstance(zerobus, ZerobusResource)
    state = zerobus.runtime.catalog.describe(TABLE)
    assert state is not None and state.column("total").delta_type == "DECIMAL(38,2)"  # type: ignore[union-attr]
    assert state.column("n").delta_type == "INT"  # type: ignore[union-attr]

    assert dg.materialize([RUN_2], resources=widening_resources).success
    assert zerobus.runtime.verify(TABLE).verified
    rows = zerobus.runtime.read_rows(TABLE).sort_by("n")
    assert rows.column("n").to_pylist() == [1, 2, 2**40]  # the first run's rows survived the rewrite
    assert rows.column("total").to_pylist() == [Decimal("12.50"), Decimal("3.25"), Decimal("1234567.89")]
    after = zerobus.runtime.catalog.describe(TABLE)
    assert after is not None and after.column("n").delta_type == "BIGINT"  # type: ignore[union-attr]
