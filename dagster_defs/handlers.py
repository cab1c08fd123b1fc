"""One type handler per dataframe library; every write and read goes through Arrow.

pandas and polars are extras: their handlers import the library only when they are asked to convert,
and recognise objects and annotations by looking at ``sys.modules`` (an object cannot be a pandas
DataFrame unless pandas is already imported), so a plain pyarrow install never imports either.
"""

import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, TypeAlias

import pyarrow as pa

from zerobus_orchestration.errors import ConfigError

ArrowData: TypeAlias = pa.Table | pa.RecordBatchReader


class ZerobusTypeHandler(ABC):
    """Converts one library's frames to Arrow for writing, and Arrow read-back into them."""

    name: str = ""

    @abstractmethod
    def handles_output(self, obj: object) -> bool:
        """True when ``obj`` (an asset's return value) is this library's frame."""

    @abstractmethod
    def handles_load(self, load_type: object) -> bool:
        """True when an input annotated ``load_type`` should be produced by this handler."""

    @abstractmethod
    def to_arrow(self, obj: Any) -> ArrowData:
        """The rows of ``obj`` as a Table or a RecordBatchReader (streamed without materialising)."""

    @abstractmethod
    def from_arrow(self, table: pa.Table, load_type: object) -> Any:
        """The read-back ``table`` as ``load_type``."""


class ArrowTypeHandler(ZerobusTypeHandler):
    name = "pyarrow"

    def handles_output(self, obj: object) -> bool:
        return isinstance(obj, pa.Table | pa.RecordBatch | pa.RecordBatchReader)

    def handles_load(self, load_type: object) -> bool:
        return load_type in (pa.Table, pa.RecordBatchReader)

    def to_arrow(self, obj: Any) -> ArrowData:
        if isinstance(obj, pa.RecordBatch):
            return pa.Table.from_batches([obj])
        if isinstance(obj, pa.Table | pa.RecordBatchReader):
            return obj
        raise TypeError(f"pyarrow handler cannot convert {type(obj).__name__}")

    def from_arrow(self, table: pa.Table, load_type: object) -> Any:
        if load_type is pa.RecordBatchReader:
            return _reader_of(table)
        return table


def _reader_of(table: pa.Table) -> Any:
    return pa.RecordBatchReader.from_batches(table.schema, table.to_batches())


def _module_class(name: str, module: str) -> type | None:
    """``module.name`` if the module is already imported, else ``None`` (never imports it)."""
    loaded = sys.modules.get(module)
    found = getattr(loaded, name, None) if loaded is not None else None
    return found if isinstance(found, type) else None


class PandasTypeHandler(ZerobusTypeHandler):
    name = "pandas"

    def handles_output(self, obj: object) -> bool:
        frame = _module_class("DataFrame", "pandas")
        return frame is not None and isinstance(obj, frame)

    def handles_load(self, load_type: object) -> bool:
        frame = _module_class("DataFrame", "pandas")
        return frame is not None and load_type is frame

    def to_arrow(self, obj: Any) -> ArrowData:
        return pa.Table.from_pandas(_named_index_as_columns(obj), preserve_index=False)

    def from_arrow(self, table: pa.Table, load_type: object) -> Any:
        return table.to_pandas()


def _named_index_as_columns(frame: Any) -> Any:
    """``frame`` with its named index levels as leading columns (``reset_index`` of those levels).

    A named index is data (``groupby("currency").sum()`` keeps ``currency`` only there); an unnamed one
    (the default RangeIndex, or what a filter leaves behind) is row numbering and is dropped, rather than
    landing as a ``__index_level_0__`` column.
    """
    named = [name for name in frame.index.names if name is not None]
    if not named:
        return frame
    clash = sorted(str(n) for n in named if n in frame.columns)
    if clash:
        raise ConfigError(
            f"pandas DataFrame: index level(s) {clash} have the same name as a column, so they cannot be "
            "kept as columns; rename the index (df.rename_axis(...)) or drop it (df.reset_index(drop=True))"
        )
    return frame.reset_index(level=named)


class PolarsTypeHandler(ZerobusTypeHandler):
    name = "polars"

    def handles_output(self, obj: object) -> bool:
        kinds = [_module_class(n, "polars") for n in ("DataFrame", "LazyFrame")]
        return any(k is not None and isinstance(obj, k) for k in kinds)

    def handles_load(self, load_type: object) -> bool:
        kinds = [_module_class(n, "polars") for n in ("DataFrame", "LazyFrame")]
        return any(k is not None and load_type is k for k in kinds)

    def to_arrow(self, obj: Any) -> ArrowData:
        import polars as pl

        frame = obj.collect() if isinstance(obj, pl.LazyFrame) else obj
        # The oldest compat level gives large_string rather than string_view; both map to STRING.
        return frame.to_arrow(compat_level=pl.CompatLevel.oldest())

    def from_arrow(self, table: pa.Table, load_type: object) -> Any:
        import polars as pl

        frame = pl.from_arrow(table)
        assert isinstance(frame, pl.DataFrame)  # from_arrow of a Table is always a DataFrame
        return frame.lazy() if load_type is pl.LazyFrame else frame


def default_type_handlers() -> Sequence[ZerobusTypeHandler]:
    return (ArrowTypeHandler(), PandasTypeHandler(), PolarsTypeHandler())


def handler_for_output(
    handlers: Sequence[ZerobusTypeHandler], obj: object, *, where: str
) -> ZerobusTypeHandler:
    for handler in handlers:
        if handler.handles_output(obj):
            return handler
    supported = ", ".join(h.name for h in handlers)
    raise TypeError(
        f"{where}: the Zerobus IO manager cannot write a {type(obj).__module__}.{type(obj).__name__}; "
        f"return a pyarrow Table or RecordBatchReader, or a frame of: {supported}"
    )


def handler_for_load(
    handlers: Sequence[ZerobusTypeHandler], load_type: object, default: ZerobusTypeHandler, *, where: str
) -> ZerobusTypeHandler:
    if load_type in (None, Any, object):
        return default
    for handler in handlers:
        if handler.handles_load(load_type):
            return handler
    supported = ", ".join(h.name for h in handlers)
    raise TypeError(
        f"{where}: the Zerobus IO manager cannot load an input annotated {load_type!r}; "
        f"annotate it as pyarrow.Table / RecordBatchReader or a frame of: {supported}"
    )
