"""The local cloud on an ``s3://`` warehouse (moto server): Unity Catalog's temporary table credentials are
the emulator's per-table STS keys, which read the table and cannot write it."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from databricks.sdk.service.catalog import TableOperation
from deltalake import DeltaTable

from tests.integration.local_cloud.test_local_cloud import CONFIG, client, sql, succeeded
from tests.integration.s3.test_s3_warehouse import try_write_in_subprocess
from tests.support.emulator_helpers import open_arrow
from zerobus_orchestration.catalog.s3_vending import S3CredentialVendor, S3TableRoleProvisioner
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.storage import CredentialCache
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.moto_s3 import S3Lab

pytestmark = pytest.mark.integration

TABLE = "main.cloud.on_s3"


def test_temporary_table_credentials_are_per_table_read_keys(moto_lab: S3Lab, tmp_path: Path) -> None:
    warehouse = f"s3://{moto_lab.bucket}/cloud_{uuid.uuid4().hex[:8]}"
    S3TableRoleProvisioner(
        moto_lab.client("iam"),
        warehouse=warehouse,
        account_id=moto_lab.account_id,
        trusted_principal_arn=moto_lab.vendor_arn,
    ).provision(TABLE)
    vendor = S3CredentialVendor(
        moto_lab.client("sts", moto_lab.vendor),
        warehouse=warehouse,
        account_id=moto_lab.account_id,
        endpoint_url=moto_lab.endpoint,
    )
    admin = moto_lab.admin_options()
    with Emulator(
        warehouse,
        CONFIG,
        storage_options=admin,
        wal_dir=str(tmp_path / "wal"),
        iceberg=False,
        credentials=CredentialCache(vendor),
    ) as emu:
        w = client(emu)
        succeeded(sql(w, emu, "CREATE SCHEMA main.cloud"))
        succeeded(sql(w, emu, f"CREATE TABLE {TABLE} (id BIGINT)"))
        schema = pa.schema([("id", pa.int64())])
        stream = open_arrow(emu, TABLE, schema)
        stream.wait_for_offset(stream.ingest_batch(pa.record_batch({"id": [1, 2]}, schema=schema)))
        stream.close()
        emu.materialize_now(TABLE)

        info = w.tables.get(TABLE)
        assert info.storage_location == table_uri(warehouse, TABLE)
        assert info.table_id is not None
        vended = w.temporary_table_credentials.generate_temporary_table_credentials(
            table_id=info.table_id, operation=TableOperation.READ
        )
        keys = vended.aws_temp_credentials
        assert keys is not None and keys.access_key_id and keys.session_token
        assert keys.access_key_id != admin["AWS_ACCESS_KEY_ID"]  # the role's, never the warehouse's
        reader = {k: v for k, v in admin.items() if "KEY" not in k} | {
            "AWS_ACCESS_KEY_ID": keys.access_key_id,
            "AWS_SECRET_ACCESS_KEY": str(keys.secret_access_key),
            "AWS_SESSION_TOKEN": keys.session_token,
        }
        assert vended.url is not None
        assert DeltaTable(vended.url, storage_options=reader).to_pyarrow_table().column("id").to_pylist() == [
            1,
            2,
        ]
        # READ only: a write with them is denied (in a subprocess: delta-rs may abort after such errors).
        denied = try_write_in_subprocess(vended.url, reader)
        assert "WROTE" not in denied.stdout
        assert "lacked the necessary privileges" in denied.stderr or "AccessDenied" in denied.stderr
