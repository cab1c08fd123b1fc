"""Every public exception of the three packages derives from the package base and says ``retriable``.

The walk imports every module of ``zerobus_orchestration``, ``dagster_defs`` and ``airflow_provider``
and collects every exception class defined there, so a new error class that forgets the base fails
here. The field checks pin the facts callers branch on (table, column, parts, counts) as attributes.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType

import pyarrow as pa
import pytest

from zerobus_orchestration.errors import ErrorClass, ZerobusOrchestrationError

PACKAGES = ("zerobus_orchestration", "dagster_defs", "airflow_provider")

# Exceptions defined in the packages that are deliberately not ours to classify, with the reason.
NOT_PACKAGE_ERRORS = {
    # The local Unity Catalog's model (emulator and test fake) of a *service-side* SQL error: it is answered
    # as a FAILED statement, which the client turns into StatementFailedError. Its ``error_class`` is the
    # Databricks error-class text, not our ErrorClass.
    "zerobus_orchestration.emulator.unity.state.StatementFailure",
}


def _modules() -> Iterator[ModuleType]:
    for name in PACKAGES:
        package = importlib.import_module(name)
        yield package
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{name}."):
            if info.name.endswith("__main__"):
                continue  # runs the program on import
            yield importlib.import_module(info.name)


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module in _modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return found


ALL = _exception_classes()
PUBLIC = {
    name: cls
    for name, cls in ALL.items()
    if not cls.__name__.startswith("_") and name not in NOT_PACKAGE_ERRORS
}


def test_the_walk_finds_the_errors_of_every_layer() -> None:
    """The walk itself works: it sees errors of the value layer, the sink, the emulator and an adapter."""
    names = {cls.__name__ for cls in PUBLIC.values()}
    assert {
        "ConfigError",
        "ConfirmationLaneError",
        "DeliveryFailedError",
        "WalCorruptError",
        "ConformError",
        "AuthFailure",
        "ProbeError",
    } <= names


def test_every_public_exception_derives_from_the_package_base() -> None:
    outside = sorted(name for name, cls in PUBLIC.items() if not issubclass(cls, ZerobusOrchestrationError))
    assert outside == [], f"exceptions not deriving from ZerobusOrchestrationError: {outside}"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_public_exception_says_whether_a_retry_can_help(name: str) -> None:
    cls = PUBLIC[name]
    assert isinstance(cls.error_class, ErrorClass)  # type: ignore[attr-defined]
    bare = cls.__new__(cls)  # the class default, without any constructor's arguments
    assert type(bare.retriable) is bool  # type: ignore[attr-defined]


def test_private_exceptions_are_only_control_flow() -> None:
    """An ``_``-prefixed exception is internal control flow; it must stay rare and never be exported."""
    private = sorted(name for name, cls in ALL.items() if cls.__name__.startswith("_"))
    assert private == ["zerobus_orchestration.resume.check._Mismatch"]


@pytest.mark.parametrize(
    ("error_class", "retriable"),
    [
        (ErrorClass.TRANSIENT, True),
        (ErrorClass.CONCURRENCY_REJECT, True),
        (ErrorClass.POISON, True),  # a retry runs on a rebuilt stream
        (ErrorClass.SCHEMA_REJECTED, False),
        (ErrorClass.FATAL, False),
    ],
)
def test_retriable_follows_the_error_class(error_class: ErrorClass, retriable: bool) -> None:
    from zerobus_orchestration.errors import TransportError

    assert error_class.retriable is retriable
    assert TransportError("x", error_class=error_class).retriable is retriable


def test_retriable_of_the_errors_callers_meet() -> None:
    from zerobus_orchestration.errors import (
        ConfigError,
        ReadbackTimeoutError,
        SchemaRejectedError,
        TransientError,
        WriteBoundaryError,
    )
    from zerobus_orchestration.sink.errors import (
        PartialSendError,
        PoisonedBatchError,
        RebuildBudgetExceededError,
    )

    assert TransientError("x").retriable
    assert ReadbackTimeoutError("x").retriable
    assert RebuildBudgetExceededError("x").retriable
    assert not ConfigError("x").retriable
    assert not SchemaRejectedError("x").retriable
    assert not WriteBoundaryError("x", table="t", column="c", kind="k").retriable
    assert not PoisonedBatchError("x").retriable  # the service rejects that batch every time
    # A partial send is as retriable as what stopped it.
    assert PartialSendError("x", [], TransientError("y")).retriable
    assert not PartialSendError("x", [], ConfigError("y")).retriable


@pytest.mark.parametrize(
    ("dotted", "stdlib"),
    [
        ("zerobus_orchestration.sink.errors.ConfirmationLaneError", TypeError),
        ("zerobus_orchestration.sink.errors.DeliveryFailedError", RuntimeError),
        ("zerobus_orchestration.emulator.errors.WalCorruptError", RuntimeError),
        ("zerobus_orchestration.emulator.errors.WalUnusableError", RuntimeError),
        ("zerobus_orchestration.emulator.errors.ConformError", ValueError),
        ("zerobus_orchestration.errors.ConfigError", ValueError),
        ("zerobus_orchestration.errors.TableNameError", ValueError),
        ("zerobus_orchestration.errors.ResumeInputError", ValueError),
        ("zerobus_orchestration.errors.WriteBoundaryError", TypeError),
    ],
)
def test_the_standard_library_base_callers_catch_is_kept(dotted: str, stdlib: type[Exception]) -> None:
    assert issubclass(ALL[dotted], stdlib)
    assert issubclass(ALL[dotted], ZerobusOrchestrationError)


def test_confirmation_lane_error_from_the_sink_constructor_is_a_package_error() -> None:
    from zerobus_orchestration.config import PoolConfig
    from zerobus_orchestration.sink import ConfirmationLaneError, LaneKind, StreamPool, ZerobusSink
    from zerobus_orchestration.transport.memory import MemoryTransport

    pool = StreamPool(MemoryTransport(), "main.raw.t", PoolConfig(min_streams=1), lane=LaneKind.DERIVED)
    with pytest.raises(ZerobusOrchestrationError) as info:
        ZerobusSink(pool, source="s", lane=LaneKind.RAW)
    assert isinstance(info.value, ConfirmationLaneError)
    assert isinstance(info.value, TypeError)
    assert info.value.lane == "derived"
    assert not info.value.retriable


def test_table_name_error_names_the_name_and_the_part() -> None:
    from zerobus_orchestration.errors import TableNameError
    from zerobus_orchestration.tables import TableName

    with pytest.raises(TableNameError) as info:
        TableName.parse("main.raw")
    assert info.value.name == "main.raw"
    assert info.value.part is None
    with pytest.raises(TableNameError) as info:
        TableName.parse("main.r-w.events")
    assert (info.value.name, info.value.part) == ("main.r-w.events", "schema")


def test_plan_refused_and_preconditions_unmet_carry_the_table_and_columns() -> None:
    from zerobus_orchestration.catalog.plan import ReconcilePlan, Refuse
    from zerobus_orchestration.catalog.preconditions import Condition, require_conditions
    from zerobus_orchestration.errors import PlanRefusedError, PreconditionsUnmetError

    plan = ReconcilePlan("main.raw.t", (Refuse("main.raw.t", "small", "narrowing", "BIGINT", "INT"),))
    with pytest.raises(PlanRefusedError) as refused:
        plan.raise_if_refused()
    assert (refused.value.table, refused.value.columns) == ("main.raw.t", ("small",))
    assert len(refused.value.reasons) == 1
    with pytest.raises(PreconditionsUnmetError) as unmet:
        require_conditions("main.raw.t", [Condition("append_only", False, "not set")])
    assert (unmet.value.table, unmet.value.unmet) == ("main.raw.t", ("append_only",))


def test_write_boundary_error_lists_every_failing_column() -> None:
    from zerobus_orchestration.catalog.guard import conform_batch
    from zerobus_orchestration.errors import WriteBoundaryError

    target = pa.schema([pa.field("a", pa.int8()), pa.field("b", pa.int8())])
    batch = pa.record_batch({"a": pa.array([1000], pa.int64()), "b": pa.array([2000], pa.int64())})
    with pytest.raises(WriteBoundaryError) as info:
        conform_batch("main.raw.t", batch, target)
    assert (info.value.table, info.value.column, info.value.columns) == ("main.raw.t", "a", ("a", "b"))


def test_resume_input_error_names_table_and_column() -> None:
    from zerobus_orchestration.errors import ResumeInputError
    from zerobus_orchestration.resume.slices import resume_slices

    batch = pa.record_batch({"offset": pa.array([-1], pa.int64())})
    with pytest.raises(ResumeInputError) as info:
        list(resume_slices([], [batch], offset_column="offset", table="main.raw.t"))
    assert (info.value.table, info.value.column) == ("main.raw.t", "offset")


def test_sdk_schema_rejection_names_the_table() -> None:
    from zerobus_orchestration.transport.sdk import _mismatch

    rejected = _mismatch("main.raw.t", "s1", pa.schema([("b", pa.int64())]), pa.schema([("a", pa.int64())]))
    assert rejected is not None
    assert rejected.table == "main.raw.t"
    assert "MISSING_REQUIRED_COLUMN" in rejected.causes
    assert not rejected.retriable
