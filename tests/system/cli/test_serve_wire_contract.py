"""``zerobus-orch serve`` holds the official SDK to the wire schema, as the in-process emulator does.

The SDK, driven directly as a user of a shared emulator would, streams the schema Databricks' Arrow
Flight server builds from the table (written out here: docs/architecture.md#the-wire-contract) and gets
every value back from Delta exactly; ``utf8`` for STRING, a native ``decimal128`` and a list item named
``element`` are refused at stream creation naming the column, the type sent and the type expected.
The full type matrix, Iceberg included, runs in-process: tests/integration/emulator/test_wire_contract.py.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from zerobus import ZerobusSdk
from zerobus.sdk.shared import NonRetriableException

from tests.support.emulator_helpers import arrow_options, create_table, read_table

pytestmark = pytest.mark.integration

TABLE = "main.wire.served"
DECLARED = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.decimal128(38, 18)),
        pa.field("blob", pa.binary()),
        pa.field("tags", pa.list_(pa.string())),
        pa.field("attrs", pa.map_(pa.string(), pa.int32())),
        pa.field("at", pa.timestamp("us", tz="UTC")),
    ]
)
WIRE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.large_string()),
        pa.field("amount", pa.large_string()),
        pa.field("blob", pa.large_binary()),
        pa.field("tags", pa.list_(pa.field("item", pa.large_string()))),
        pa.field(
            "attrs",
            pa.map_(pa.field("keys", pa.large_string(), nullable=False), pa.field("values", pa.int32())),
        ),
        pa.field("at", pa.timestamp("us", tz="UTC")),
    ]
)
AT = dt.datetime(2026, 11, 30, 12, 0, 0, 1, tzinfo=dt.UTC)
ROWS: list[dict[str, Any]] = [
    {"id": 1, "name": "ü", "amount": "-99999999999999999999.999999999999999999", "blob": b"\x00",
     "tags": ["a", None], "attrs": [("k", 1)], "at": AT},
    {"id": 2, "name": None, "amount": "0.000000000000000000", "blob": None, "tags": [], "attrs": None, "at": None},
    {"id": 3, "name": "", "amount": None, "blob": b"", "tags": None, "attrs": [], "at": AT},
]  # fmt: skip


@contextmanager
def served(warehouse: Path) -> Iterator[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("ZEROBUS_")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    cli = Path(sys.executable).with_name("zerobus-orch")
    command = [
        str(cli),
        "serve",
        "--warehouse",
        str(warehouse),
        "--json",
        "--no-iceberg",
        "--token-port",
        "0",
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        yield json.loads(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGTERM)  # commits everything acknowledged to Delta, then exits
        assert proc.wait(timeout=60) == 0


def open_arrow(info: dict[str, Any], schema: pa.Schema) -> Any:
    secret = Path(info["client_secret_file"]).read_text().strip()  # the warehouse's own, owner-only
    sdk = ZerobusSdk(info["endpoint"], info["token_url"])
    return sdk.create_arrow_stream(TABLE, schema, "zerobus-local", secret, arrow_options())


def test_the_wire_schema_is_taken_and_lands_exactly_and_other_types_are_refused(tmp_path: Path) -> None:
    warehouse = tmp_path / "wh"
    create_table(warehouse, TABLE, DECLARED)
    with served(warehouse) as info:
        stream = open_arrow(info, WIRE)
        stream.wait_for_offset(stream.ingest_batch(pa.RecordBatch.from_pylist(ROWS, schema=WIRE)))
        stream.close()
        for column, sent, expected in [
            ("name", pa.string(), "large_string"),
            ("amount", pa.decimal128(38, 18), "large_string"),
            ("tags", pa.list_(pa.field("element", pa.large_string())), "list<item: large_string>"),
        ]:
            schema = pa.schema([WIRE.field("id"), pa.field(column, sent)])
            with pytest.raises(NonRetriableException) as refused:
                open_arrow(info, schema)
            message = str(refused.value)
            assert f"TYPE_INCOMPATIBLE: {TABLE}.{column}: sent {sent}" in message and expected in message
    landed = read_table(warehouse, TABLE).sort_by("id")
    assert landed.schema.equals(DECLARED)  # the table's own types: the decimal text read back exactly
    expected_rows = [
        {**row, "amount": None if row["amount"] is None else Decimal(row["amount"])} for row in ROWS
    ]
    assert landed.to_pylist() == expected_rows
