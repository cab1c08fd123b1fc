"""Unity backend + fake UC whose vended READ credentials are real moto STS keys: the read-back path."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.catalog.base import Access, DesiredTable
from zerobus_orchestration.catalog.unity import StatementPolling, UnityCatalog, workspace_client
from zerobus_orchestration.config import Role
from zerobus_orchestration.storage import CredentialCache, s3_options
from zerobus_orchestration.testing import FakeUnityCatalog
from zerobus_orchestration.testing.moto_s3 import MotoStsIssuer, S3Lab

pytestmark = pytest.mark.integration
TABLE = "main.raw.events"


def test_unity_read_credentials_read_delta_files_and_cannot_write(
    moto_lab: S3Lab, isolated_databricks_env: None
) -> None:
    issuer = MotoStsIssuer(moto_lab)
    with FakeUnityCatalog(storage_root=f"s3://{moto_lab.bucket}/uc", credential_issuer=issuer) as fake:
        client = workspace_client(fake.url, token=fake.pat, retry_timeout_seconds=5)
        unity = UnityCatalog(client, fake.warehouse_id, polling=StatementPolling(poll_initial_s=0.01))
        schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
        state = unity.reconcile(TABLE, DesiredTable.build(TABLE, schema, Role.PRIMARY_RAW)).state
        assert state.location is not None and state.location.startswith(f"s3://{moto_lab.bucket}/uc/tables/")
        # Stand-in for Zerobus landing rows in the managed table's storage.
        rows = pa.table({"id": [1, 2, 3]}, schema=pa.schema([pa.field("id", pa.int64(), nullable=False)]))
        write_deltalake(state.location, rows, storage_options=moto_lab.admin_options())

        cache = CredentialCache(unity)
        base = s3_options(endpoint_url=moto_lab.endpoint, region=moto_lab.region)
        options = cache.storage_options(TABLE, Access.READ, base)
        assert options["AWS_ACCESS_KEY_ID"] != moto_lab.admin.access_key_id
        read = DeltaTable(state.location, storage_options=options).to_pyarrow_table()
        assert sorted(read.column("id").to_pylist()) == [1, 2, 3]
        assert cache.get(TABLE, Access.READ) is cache.get(TABLE, Access.READ)  # cached until near expiry

        script = (
            "import json, sys, pyarrow as pa\n"
            "from deltalake import write_deltalake\n"
            "uri, options = json.loads(sys.argv[1])\n"
            "write_deltalake(uri, pa.table({'id': [9]}), mode='append', storage_options=options)\n"
            "print('WROTE')\n"
        )
        denied = subprocess.run(
            [sys.executable, "-c", script, json.dumps([state.location, options])],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "WROTE" not in denied.stdout and "lacked the necessary privileges" in denied.stderr, (
            denied.stderr
        )
