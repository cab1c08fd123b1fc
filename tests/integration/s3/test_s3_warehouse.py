"""An s3:// warehouse on a real moto server: deltalake writes and reads, per-table vended credentials."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from zerobus_orchestration.catalog.base import Access, DesiredTable
from zerobus_orchestration.catalog.local import LocalCatalog
from zerobus_orchestration.catalog.s3_vending import (
    S3CredentialVendor,
    S3TableRoleProvisioner,
    role_name,
    table_policy,
)
from zerobus_orchestration.config import Role
from zerobus_orchestration.errors import CatalogError
from zerobus_orchestration.storage import CredentialCache, reveal
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.moto_s3 import S3Lab

pytestmark = pytest.mark.integration


def warehouse(lab: S3Lab) -> str:
    return f"s3://{lab.bucket}/wh"


def vendor(lab: S3Lab) -> S3CredentialVendor:
    return S3CredentialVendor(
        lab.client("sts", lab.vendor),
        warehouse=warehouse(lab),
        account_id=lab.account_id,
        endpoint_url=lab.endpoint,
    )


def provision(lab: S3Lab, *tables: str) -> None:
    provisioner = S3TableRoleProvisioner(
        lab.client("iam"),
        warehouse=warehouse(lab),
        account_id=lab.account_id,
        trusted_principal_arn=lab.vendor_arn,
    )
    for table in tables:
        provisioner.provision(table)


def try_write_in_subprocess(uri: str, options: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # delta-rs can abort the process after caught object-store errors (docs/architecture.md#delta-rs): contain it.
    script = (
        "import json, sys, pyarrow as pa\n"
        "from deltalake import write_deltalake\n"
        "uri, options = json.loads(sys.argv[1])\n"
        "write_deltalake(uri, pa.table({'id': [99]}), mode='append', storage_options=options)\n"
        "print('WROTE')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script, json.dumps([uri, options])], capture_output=True, text=True, timeout=60
    )


def test_role_names_and_policies_are_per_table_and_access() -> None:
    ro, rw = role_name("main.raw.events", Access.READ), role_name("main.raw.events", Access.WRITE)
    assert ro.endswith("-ro") and rw.endswith("-rw") and ro[:-3] == rw[:-3]
    assert role_name("a.b.c", Access.READ) != role_name("a.b.d", Access.READ)
    assert len(role_name("x" * 200 + ".s.t", Access.WRITE)) <= 64
    policy = table_policy("s3://lake/wh/main/raw/events", Access.READ)
    actions = [a for s in policy["Statement"] for a in s["Action"]]
    assert actions == ["s3:ListBucket", "s3:GetObject"]
    assert policy["Statement"][1]["Resource"] == ["arn:aws:s3:::lake/wh/main/raw/events/*"]
    assert "s3:PutObject" in table_policy("s3://lake/wh/t", Access.WRITE)["Statement"][1]["Action"]


def test_delta_write_and_read_on_an_s3_warehouse(moto_lab: S3Lab, unique_table: str) -> None:
    uri = table_uri(warehouse(moto_lab), unique_table)
    options = moto_lab.admin_options()
    write_deltalake(uri, pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}), storage_options=options)
    write_deltalake(uri, pa.table({"id": [4], "name": ["d"]}), mode="append", storage_options=options)
    dt = DeltaTable(uri, storage_options=options)
    assert dt.version() == 1
    assert sorted(dt.to_pyarrow_table().column("id").to_pylist()) == [1, 2, 3, 4]


def test_vended_credentials_read_but_cannot_write(moto_lab: S3Lab, unique_table: str) -> None:
    provision(moto_lab, unique_table)
    vend = vendor(moto_lab)
    rw = vend.vend_credentials(unique_table, Access.WRITE)
    write_deltalake(rw.url, pa.table({"id": [1, 2]}), storage_options=reveal(rw.storage_options))
    ro = vend.vend_credentials(unique_table, Access.READ)
    assert ro.url == table_uri(warehouse(moto_lab), unique_table)
    assert DeltaTable(ro.url, storage_options=reveal(ro.storage_options)).to_pyarrow_table().num_rows == 2
    denied = try_write_in_subprocess(ro.url, reveal(ro.storage_options))
    assert "WROTE" not in denied.stdout
    assert "lacked the necessary privileges" in denied.stderr or "AccessDenied" in denied.stderr, (
        denied.stderr
    )
    still = DeltaTable(ro.url, storage_options=reveal(ro.storage_options))
    assert still.version() == 0 and still.to_pyarrow_table().num_rows == 2
    # The raw S3 API agrees: the read-only role cannot put an object under the table prefix.
    s3 = moto_lab.client(
        "s3", _key(ro), session_token=ro.storage_options["AWS_SESSION_TOKEN"].get_secret_value()
    )
    _, prefix = ro.url.split(f"s3://{moto_lab.bucket}/", 1)
    with pytest.raises(Exception, match="AccessDenied"):
        s3.put_object(Bucket=moto_lab.bucket, Key=f"{prefix}/intruder.txt", Body=b"x")


def _key(creds: object) -> object:
    from zerobus_orchestration.testing.moto_s3 import AccessKey

    options = creds.storage_options  # type: ignore[attr-defined]
    return AccessKey(
        options["AWS_ACCESS_KEY_ID"].get_secret_value(), options["AWS_SECRET_ACCESS_KEY"].get_secret_value()
    )


def test_credentials_of_one_table_cannot_read_another(moto_lab: S3Lab, unique_table: str) -> None:
    other = unique_table + "_other"
    provision(moto_lab, unique_table, other)
    vend = vendor(moto_lab)
    rw = vend.vend_credentials(unique_table, Access.WRITE)
    write_deltalake(rw.url, pa.table({"id": [1]}), storage_options=reveal(rw.storage_options))
    foreign = vend.vend_credentials(other, Access.READ)
    with pytest.raises(Exception, match=r"lacked the necessary privileges|AccessDenied"):
        DeltaTable(rw.url, storage_options=reveal(foreign.storage_options)).to_pyarrow_table()


def test_vended_credentials_expire_and_the_cache_re_vends(moto_lab: S3Lab, unique_table: str) -> None:
    provision(moto_lab, unique_table)
    vend = vendor(moto_lab)
    before = datetime.now(UTC)
    now = [before]
    cache = CredentialCache(vend, margin=timedelta(minutes=1), clock=lambda: now[0])
    first = cache.get(unique_table, Access.READ)
    assert before + timedelta(minutes=14) <= first.expires_at <= before + timedelta(minutes=16)  # STS 900 s
    assert cache.get(unique_table, Access.READ) is first
    now[0] = first.expires_at - timedelta(seconds=30)  # inside the margin
    second = cache.get(unique_table, Access.READ)
    assert second is not first and cache.vend_count == 2
    assert second.storage_options["AWS_ACCESS_KEY_ID"] != first.storage_options["AWS_ACCESS_KEY_ID"]


class RefusingSts:
    def assume_role(self, **kwargs: object) -> dict[str, object]:
        raise RuntimeError("An error occurred (AccessDenied) when calling the AssumeRole operation")


def test_assume_role_failure_names_the_role_and_the_fix() -> None:
    vend = S3CredentialVendor(RefusingSts(), warehouse="s3://lake/wh", account_id="123456789012")
    with pytest.raises(
        CatalogError, match=r"AssumeRole on arn:aws:iam::123456789012:role/twg-.*-ro failed.*provision"
    ):
        vend.vend_credentials("main.raw.events", Access.READ)


def test_local_catalog_on_s3_then_read_with_vended_credentials(
    moto_lab: S3Lab, unique_table: str, tmp_path: Path
) -> None:
    catalog = LocalCatalog(
        warehouse(moto_lab),
        storage_options=moto_lab.admin_options(),
        registry_path=tmp_path / "catalog.sqlite",
    )
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    outcome = catalog.reconcile(unique_table, DesiredTable.build(unique_table, schema, Role.PRIMARY_RAW))
    assert outcome.applied and outcome.state.location == table_uri(warehouse(moto_lab), unique_table)
    provision(moto_lab, unique_table)
    rw = vendor(moto_lab).vend_credentials(unique_table, Access.WRITE)
    batch = pa.table(
        {
            "id": pa.array([1, 2], pa.int64()),
            "name": ["a", "b"],
            "_twg_emit_ts": pa.array([None, None], pa.timestamp("us", tz="UTC")),
            "_twg_source": ["t", "t"],
            "_twg_offset": pa.array([0, 1], pa.int64()),
        },
        schema=outcome.state.arrow_schema(),
    )
    write_deltalake(rw.url, batch, mode="append", storage_options=reveal(rw.storage_options))
    ro = vendor(moto_lab).vend_credentials(unique_table, Access.READ)
    table = DeltaTable(ro.url, storage_options=reveal(ro.storage_options)).to_pyarrow_table()
    assert sorted(table.column("id").to_pylist()) == [1, 2]
    assert catalog.describe(unique_table).version == 1  # type: ignore[union-attr]
