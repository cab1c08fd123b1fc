"""Hypothesis strategies for Arrow schemas the catalog must accept."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import strategies as st

from zerobus_orchestration.reserved import RESERVED_NAMES

PRIMITIVES = st.sampled_from(
    [
        pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(),
        pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.binary(), pa.large_binary(),
        pa.date32(), pa.timestamp("us"), pa.timestamp("ns", tz="UTC"), pa.decimal128(10, 2),
        pa.dictionary(pa.int32(), pa.string()),
    ]
)  # fmt: skip
# Names with the characters that break naive SQL or path handling, plus plain ones.
NAMES = st.text(alphabet=st.sampled_from("ab_Z9 `'\";.,=é日\n"), min_size=1, max_size=6).filter(
    lambda n: n not in RESERVED_NAMES
)


# What a write can send to a table without column mapping (the local backend's, which cannot have it):
# names in [A-Za-z_][A-Za-z0-9_]*, and no array of arrays or maps, no map of arrays or maps (wire_schema).
# Built, not filtered: a filter that rejects often fails Hypothesis's filter_too_much health check.
SENDABLE_NAMES = st.builds(
    "".join,
    st.tuples(st.sampled_from("ab_Z"), st.text(alphabet=st.sampled_from("ab_Z9"), max_size=5)),
).filter(lambda n: n not in RESERVED_NAMES)


def _schemas(names: st.SearchStrategy[str], *, sendable: bool = False) -> st.SearchStrategy[pa.Schema]:
    def nested(children: st.SearchStrategy[pa.DataType]) -> st.SearchStrategy[pa.DataType]:
        structs = st.lists(
            st.tuples(names, children), min_size=1, max_size=3, unique_by=lambda f: f[0].lower()
        ).map(lambda fs: pa.struct([pa.field(n, t) for n, t in fs]))
        # Sendable: an array's or a map's values are a primitive or a struct (never an array or a map),
        # drawn as such rather than filtered out of ``children``, which rejected most nested draws.
        inner = st.one_of(PRIMITIVES, structs) if sendable else children
        return st.one_of(
            inner.map(pa.list_),
            st.tuples(st.sampled_from([pa.string(), pa.int32()]), inner).map(lambda kv: pa.map_(*kv)),
            structs,
        )

    types = st.recursive(PRIMITIVES, nested, max_leaves=4)
    return st.lists(
        st.tuples(names, types, st.booleans()), min_size=1, max_size=5, unique_by=lambda f: f[0].lower()
    ).map(lambda fs: pa.schema([pa.field(n, t, nullable=nl) for n, t, nl in fs]))


SCHEMAS = _schemas(NAMES)
SENDABLE_SCHEMAS = _schemas(SENDABLE_NAMES, sendable=True)
