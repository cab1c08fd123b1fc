"""The warehouse of the upgrade test: written by the release before the wire contract, kept as an archive.

``tests/system/runtime/test_upgrade_from_release.py`` resumes and verifies, with the current code, a
warehouse and coverage written by the release before the sink sent the wire schema (the release at
commit 97f595f, which sent ``utf8``, ``binary``, native ``decimal128``, list items named ``element``
and maps of ``key``/``value``). That warehouse is ``tests/fixtures/upgrade-97f595f.tar.gz``, made by this
script. **It must be run with the old release**, never with the current code (which would make a
fixture of itself): check that commit out in a scratch folder outside this repository and run this file
with it first on the import path, e.g.

    git worktree add --detach /tmp/old 97f595f
    PYTHONPATH=/tmp/old .venv/bin/python tests/support/upgrade_fixture.py tests/fixtures/upgrade-97f595f.tar.gz
    git worktree remove /tmp/old

It writes the first ``FIRST_TRY`` rows of ``orders(0, ROWS)`` into ``TABLE`` through the embedded runtime
(the old emulator, in process, materialising to Delta and mirroring to Iceberg), as a first try that
stopped part-way, and archives the warehouse (Delta table, coverage with its content digests, the
emulator's write-ahead log and the local catalog's registry) with paths relative to it. The input is defined here once, for the generator and
the test alike, from pyarrow alone, so the old and the new code build the same rows.
"""

from __future__ import annotations

import datetime as dt
import sys
import tarfile
import tempfile
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

TABLE = "main.upgrade.orders"
SOURCE = "landing/orders"
PARTITION = "2026-11-30"
ROWS = 1_000
FIRST_TRY = 600  # what the old release delivered: the test resumes the rest with the new code
BATCH_ROWS = 150  # the first try's batches (the resume batches its input differently)
RELEASE = "97f595f"

SCHEMA = pa.schema(
    [
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("customer", pa.string()),
        pa.field("amount", pa.decimal128(38, 18)),
        pa.field("fee", pa.decimal128(5, 2)),
        pa.field("receipt", pa.binary()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("prices", pa.list_(pa.decimal128(10, 2))),
        pa.field("attrs", pa.map_(pa.string(), pa.int64())),
        pa.field(
            "ship_to",
            pa.struct(
                [
                    pa.field("city", pa.string()),
                    pa.field("zip", pa.int32()),
                    pa.field("cost", pa.decimal128(9, 3)),
                ]
            ),
        ),
        pa.field("placed_at", pa.timestamp("us", tz="UTC")),
        pa.field("local_time", pa.timestamp("us")),
        pa.field("day", pa.date32()),
    ]
)
_T0 = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def _amount(i: int) -> Decimal | None:
    if i % 11 == 0:
        return None
    digits = f"{(i * 7919) % 10**20:020d}.{(i * 104729) % 10**18:018d}"
    return Decimal(("-" if i % 3 == 0 else "") + digits)


def orders(start: int, n: int) -> pa.Table:
    """Rows ``start .. start + n`` of the test's input: strings, decimals (38 digits, negative, zero,
    NULL), binary, lists, maps, structs, timestamps with and without a zone, dates."""
    ids = range(start, start + n)
    return pa.table(
        [
            pa.array(ids, pa.int64()),
            pa.array([None if i % 13 == 0 else f"c{i % 17}-ü" for i in ids]),
            pa.array([_amount(i) for i in ids], pa.decimal128(38, 18)),
            pa.array([Decimal(i % 100_000 - 50_000).scaleb(-2) for i in ids], pa.decimal128(5, 2)),
            pa.array([None if i % 7 == 0 else i.to_bytes(4, "little") + b"\x00" for i in ids], pa.binary()),
            pa.array(
                [[] if i % 5 == 0 else [f"t{i % 3}", None if i % 2 else "x"] for i in ids],
                pa.list_(pa.string()),
            ),
            pa.array([[Decimal(i).scaleb(-2), Decimal(-i)] for i in ids], pa.list_(pa.decimal128(10, 2))),
            pa.array(
                [None if i % 9 == 0 else [("k", i), ("neg", -i)] for i in ids], SCHEMA.field("attrs").type
            ),
            pa.array(
                [
                    None
                    if i % 8 == 0
                    else {"city": f"town{i % 4}", "zip": 1000 + i, "cost": Decimal(i).scaleb(-3)}
                    for i in ids
                ],
                SCHEMA.field("ship_to").type,
            ),
            pa.array(
                [_T0 + dt.timedelta(microseconds=i * 1_000_003) for i in ids], pa.timestamp("us", tz="UTC")
            ),
            pa.array([dt.datetime(2026, 1, 1) + dt.timedelta(minutes=i) for i in ids], pa.timestamp("us")),
            pa.array([dt.date(2026, 1, 1) + dt.timedelta(days=i % 400) for i in ids], pa.date32()),
        ],
        schema=SCHEMA,
    )


def generate(archive: Path) -> None:
    """Write the first try with whatever ``zerobus_orchestration`` is first on the import path."""
    import importlib

    import zerobus_orchestration
    from zerobus_orchestration import acquire_runtime

    # Module paths of the old release (the layout moved since): looked up by name.
    close_all_runtimes = importlib.import_module("zerobus_orchestration.runtime_registry").close_all_runtimes
    embedded_test_config = importlib.import_module(
        "zerobus_orchestration.testing.settings"
    ).embedded_test_config

    where = Path(zerobus_orchestration.__file__).resolve().parents[1]
    print(f"writing with zerobus_orchestration from {where}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="zerobus-upgrade-") as scratch:
        warehouse = Path(scratch) / "warehouse"
        config = embedded_test_config(warehouse)
        runtime = acquire_runtime(config)
        try:
            first = orders(0, ROWS).slice(0, FIRST_TRY).to_reader(max_chunksize=BATCH_ROWS)
            result = runtime.write(TABLE, first, source=SOURCE, partition=PARTITION)
            assert result.rows_written == FIRST_TRY, result
            runtime.delta_version(TABLE)  # everything acknowledged committed to Delta
        finally:
            close_all_runtimes()  # the emulator stopped, the coverage file closed: a consistent copy
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(warehouse, arcname="warehouse", filter=_kept)
    print(f"wrote {archive} ({archive.stat().st_size:,} bytes)", file=sys.stderr)


# Left out of the archive: the emulator's generated client secret (a new emulator makes its own; a
# secret has no place in the repository) and the Iceberg mirror's catalog, which is derived from the
# Delta log and holds absolute paths (the new emulator mirrors the Delta table again).
_LEFT_OUT = ("_zerobus/emulator.secret", "_zerobus/iceberg.sqlite")


def _kept(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if any(member.name.endswith(path) for path in _LEFT_OUT):
        return None
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    member.mtime = 0  # the same bytes from the same run, whoever makes it
    return member


if __name__ == "__main__":
    generate(Path(sys.argv[1]).resolve())
