"""``xxh3-128/arrow-buffers-v2`` digests pinned across every layout it reads (the planned fast path and the
general one), with nulls, slices at an offset, empty batches and an offset order: the values the release
before the per-schema plan computed. A digest recorded by an earlier release must verify after an
upgrade, so a change here needs a new ``ALGORITHM`` name, not new pins."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from zerobus_orchestration.coverage.digest import rows_digest

PINNED = {
    "ints_of_every_width": "ad8668623ca529f440935e96925a8710",
    "ints_of_every_width/slice": "a8a2de620bd218eda7492f305a1cd683",
    "ints_of_every_width/empty": "8e0959873908e27dcbcc100f3483496a",
    "floats_and_bools": "5715f83a9acb8667e6a7bfd305a091bd",
    "floats_and_bools/slice": "2de55c694cf1d0b72a0c5be9204596bc",
    "floats_and_bools/empty": "8351ba206ffd5f4be14bd72ddf8c7f37",
    "strings_and_binary": "636964e3c02e3824f3108451a35ca072",
    "strings_and_binary/slice": "c17c26da4c407b249717b5bd07ff5b92",
    "strings_and_binary/empty": "8d76c6820f2d1e249e2e9c638c9a73f1",
    "views": "9784d4ae7191fcc284f67e37f549cd6a",
    "views/slice": "d35abf53867956ca71818e831aa63743",
    "views/empty": "0dc40381123be39c8f71238b713fdb37",
    "dictionary": "1bc367cd47d4d3043daded017bc56ed8",
    "dictionary/slice": "9c67d9d16be2c2d318e9de33231f820c",
    "dictionary/empty": "ed45bfb9c9f83f579b6ab7d263500a15",
    "temporal_and_decimal": "784b5cbfe12829434f2e5098af45c253",
    "temporal_and_decimal/slice": "bc888fcdc601c70be076173d79295628",
    "temporal_and_decimal/empty": "032a91fe3ba9bf7d5f076a1211e375da",
    "fixed_size_binary": "dad4b82de44146922a5669afe9244dd4",
    "fixed_size_binary/slice": "4c9b4fca5ba9705b371b00744da40088",
    "fixed_size_binary/empty": "3ffcf3667c131b1b0cd4859b18bc7236",
    "nested": "6431518fb53cdde416c5e5d760919a27",
    "nested/slice": "c67d5d1cfc6b718476518efa3afdf518",
    "nested/empty": "356131301729babbefd533de19543d08",
    "all_null_and_empty": "ffe7e77906adb6849c8a16668c9a4717",
    "all_null_and_empty/slice": "ba85e0312b344fe82858284151eef057",
    "all_null_and_empty/empty": "837977e7049fb3468fef0ceadef113c8",
    "ordered_by_i64": "f227a555f39e518c1c27e3412f4c7ccd",
}


def cases() -> dict[str, pa.RecordBatch]:
    n = 37
    ints = [None if i % 5 == 0 else i * 7 - 50 for i in range(n)]
    out: dict[str, pa.RecordBatch] = {}
    out["ints_of_every_width"] = pa.record_batch(
        {
            f"i{w}": pa.array([None if v is None else v % 100 for v in ints], getattr(pa, f"int{w}")())
            for w in (8, 16, 32, 64)
        }
        | {"u8": pa.array([i % 200 for i in range(n)], pa.uint8())}
    )
    out["floats_and_bools"] = pa.record_batch(
        {
            "f": pa.array([None if i % 4 == 0 else i / 3 for i in range(n)], pa.float64()),
            "g": pa.array([i / 7 for i in range(n)], pa.float32()),
            "b": pa.array([None if i % 6 == 0 else i % 3 == 0 for i in range(n)]),
            "c": pa.array([i % 2 == 0 for i in range(n)]),
        }
    )
    out["strings_and_binary"] = pa.record_batch(
        {
            "s": pa.array([None if i % 7 == 0 else "x" * (i % 5) + str(i) for i in range(n)]),
            "ls": pa.array([f"large-{i}" for i in range(n)], pa.large_string()),
            "bin": pa.array([bytes([i]) * (i % 3) for i in range(n)], pa.binary()),
            "lb": pa.array([None if i % 3 == 0 else b"ab" for i in range(n)], pa.large_binary()),
        }
    )
    out["views"] = pa.record_batch(
        {
            "sv": pa.array(
                [None if i % 4 == 0 else f"view-value-{i:020d}" for i in range(n)], pa.string_view()
            ),
            "bv": pa.array([b"q" * i for i in range(n)], pa.binary_view()),
        }
    )
    out["dictionary"] = pa.record_batch(
        {
            "d": pa.array(
                [None if i % 5 == 0 else ["red", "green", "blue"][i % 3] for i in range(n)]
            ).dictionary_encode(),
            "v": pa.array(range(n), pa.int64()),
        }
    )
    out["temporal_and_decimal"] = pa.record_batch(
        {
            "ts": pa.array(
                [
                    dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=i) if i % 9 else None
                    for i in range(n)
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "ntz": pa.array(
                [dt.datetime(2020, 5, 1) + dt.timedelta(days=i) for i in range(n)], pa.timestamp("ms")
            ),
            "d32": pa.array([dt.date(2000, 1, 1) + dt.timedelta(days=i) for i in range(n)], pa.date32()),
            "dec": pa.array(
                [None if i % 8 == 0 else decimal.Decimal(i) / 4 for i in range(n)], pa.decimal128(12, 2)
            ),
            "dec256": pa.array([decimal.Decimal(i) for i in range(n)], pa.decimal256(40, 0)),
        }
    )
    out["fixed_size_binary"] = pa.record_batch(
        {"fsb": pa.array([None if i % 3 == 0 else bytes([i % 256]) * 4 for i in range(n)], pa.binary(4))}
    )
    out["nested"] = pa.record_batch(
        {
            "l": pa.array(
                [None if i % 5 == 0 else list(range(i % 4)) for i in range(n)], pa.list_(pa.int32())
            ),
            "st": pa.array([{"a": i, "b": None if i % 2 else str(i)} for i in range(n)]),
            "m": pa.array([[("k", i)] for i in range(n)], pa.map_(pa.string(), pa.int64())),
        }
    )
    out["all_null_and_empty"] = pa.record_batch(
        {
            "nul": pa.array([None] * n, pa.null()),
            "allnull": pa.array([None] * n, pa.int64()),
            "e": pa.array([""] * n),
        }
    )
    return out


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_digest_of_every_layout_is_what_the_earlier_release_computed(name: str) -> None:
    base, _, variant = name.partition("/")
    if name == "ordered_by_i64":
        assert rows_digest(cases()["ints_of_every_width"].slice(1, 30), "i64").hex() == PINNED[name]
        return
    batch = cases()[base]
    if variant == "slice":
        batch = batch.slice(3, 29)
    elif variant == "empty":
        batch = batch.slice(5, 0)
    assert rows_digest(batch).hex() == PINNED[name]


def test_batches_of_one_schema_hash_alike_whichever_was_planned_first() -> None:
    """The per-schema plan is kept aside between batches: another schema in between changes nothing."""
    batches = cases()
    first = {name: rows_digest(batch).hex() for name, batch in batches.items()}
    again = {name: rows_digest(batch).hex() for name, batch in reversed(list(batches.items()))}
    assert first == again
