"""The embedded stack on an ``s3://`` warehouse (moto server), through the runtime, end to end.

official SDK -> emulator (WAL on local disk) -> Delta on S3 -> Iceberg mirror (metadata on S3) ->
read-only Iceberg REST facade vending per-table READ credentials -> pyiceberg scan -> coverage verified.

That vended read credentials cannot write is covered in ``test_s3_warehouse.py``
(``test_vended_credentials_read_but_cannot_write``); here we only check the facade hands out those
(read-role) keys rather than the warehouse's own.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pydantic import SecretStr
from pyiceberg.exceptions import ForbiddenError

from zerobus_orchestration.catalog.base import Access, VendedCredentials
from zerobus_orchestration.catalog.s3_vending import S3CredentialVendor, S3TableRoleProvisioner
from zerobus_orchestration.config import (
    CredentialVendingConfig,
    EmulatorConfig,
    ReadbackConfig,
    ZerobusConfig,
)
from zerobus_orchestration.emulator.iceberg_rest import EXPIRES_AT_MS
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.reserved import OFFSET
from zerobus_orchestration.runtime.facade import ZerobusRuntime
from zerobus_orchestration.runtime.registry import acquire_runtime, close_all_runtimes
from zerobus_orchestration.storage import CredentialCache
from zerobus_orchestration.tables import table_uri
from zerobus_orchestration.testing.moto_s3 import S3Lab
from zerobus_orchestration.testing.settings import TEST_SDK_OPTIONS

pytestmark = pytest.mark.integration

TTL = timedelta(minutes=15)


def s3_config(lab: S3Lab, state_dir: Path, *, vending: bool = True) -> ZerobusConfig:
    """A fresh warehouse prefix per test (the moto server is shared), fast lags, vending via moto STS."""
    return ZerobusConfig(
        warehouse=f"s3://{lab.bucket}/e2e-{uuid.uuid4().hex[:8]}",
        storage_options={
            "AWS_ENDPOINT_URL": SecretStr(lab.endpoint),
            "AWS_ACCESS_KEY_ID": SecretStr(lab.admin.access_key_id),
            "AWS_SECRET_ACCESS_KEY": SecretStr(lab.admin.secret_access_key),
        },
        state_dir=str(state_dir),
        emulator=EmulatorConfig(time_to_table_s=0.2, iceberg_lag_s=0.3),
        sdk=TEST_SDK_OPTIONS,
        readback=ReadbackConfig(wait_timeout_s=60, poll_initial_s=0.05, poll_max_s=0.5),
        credential_vending=CredentialVendingConfig(
            enabled=vending,
            account_id=lab.account_id,
            access_key_id=SecretStr(lab.vendor.access_key_id),
            secret_access_key=SecretStr(lab.vendor.secret_access_key),
        ),
    )


def provision(lab: S3Lab, config: ZerobusConfig, table: str) -> None:
    """What an administrator does once per table: the ``-ro`` / ``-rw`` roles the vendor assumes."""
    S3TableRoleProvisioner(
        lab.client("iam"),
        warehouse=config.warehouse,
        account_id=lab.account_id,
        trusted_principal_arn=lab.vendor_arn,
    ).provision(table)


def orders(n: int, start: int = 0) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(range(start, start + n), pa.int64()),
            "amount": pa.array([i * 0.5 for i in range(start, start + n)], pa.float64()),
        }
    )


def test_write_then_read_back_with_vended_credentials(
    moto_lab: S3Lab, unique_table: str, tmp_path: Path
) -> None:
    config = s3_config(moto_lab, tmp_path / "state")
    provision(moto_lab, config, unique_table)
    rt = acquire_runtime(config)
    try:
        assert rt.embedded and rt.credentials is not None
        result = rt.write(unique_table, orders(2_000).to_reader(max_chunksize=500), source="orders")
        assert (result.rows_written, result.offset_end) == (2_000, 2_000)

        # Delta landed on S3, not on local disk.
        landed = DeltaTable(
            table_uri(config.warehouse, unique_table), storage_options=moto_lab.admin_options()
        ).to_pyarrow_table()
        assert sorted(landed.column("order_id").to_pylist()) == list(range(2_000))

        report = rt.verify(unique_table, source="orders")
        assert report.verified, report.to_json()
        assert (report.rows_scanned, report.duplicate_count) == (2_000, 0)
        assert report.report is not None
        assert report.report["iceberg_delta_version"] >= (result.delta_version or 0)
        rows = rt.read_rows(unique_table, source="orders")
        assert rows.column(OFFSET).to_pylist() == list(range(2_000))

        # pyiceberg read with what the facade vended: the table's read role, never the warehouse keys.
        io = rt.iceberg().load_table(unique_table).io.properties
        vended = rt.credentials.get(unique_table, Access.READ)
        assert io["s3.access-key-id"] == vended.storage_options["AWS_ACCESS_KEY_ID"].get_secret_value()
        assert io["s3.access-key-id"] != moto_lab.admin.access_key_id
        assert io["s3.session-token"] and io["s3.endpoint"] == moto_lab.endpoint
        assert int(io[EXPIRES_AT_MS]) == int(vended.expires_at.timestamp() * 1000)
        intruder = moto_lab.client(
            "s3",
            vended_key(io),
            session_token=io["s3.session-token"],
        )
        prefix = table_uri(config.warehouse, unique_table).split(f"s3://{moto_lab.bucket}/", 1)[1]
        with pytest.raises(Exception, match="AccessDenied"):
            intruder.put_object(Bucket=moto_lab.bucket, Key=f"{prefix}/intruder.txt", Body=b"x")

        # Everything SQLite or fsync needs stayed in the local state folder.
        state = tmp_path / "state"
        for name in ("catalog.sqlite", "coverage.sqlite", "iceberg.sqlite"):
            assert (state / name).is_file(), name
        assert any((state / "wal").iterdir())
    finally:
        close_all_runtimes()


def vended_key(io: dict[str, str]) -> object:
    from zerobus_orchestration.testing.moto_s3 import AccessKey

    return AccessKey(io["s3.access-key-id"], io["s3.secret-access-key"])


@dataclass
class ManualClock:
    now: datetime = field(default_factory=lambda: datetime.now(UTC))

    def __call__(self) -> datetime:
        return self.now


@dataclass
class ExpiryOnManualClock:
    """The real moto STS vendor; each credential's expiry is stamped on the test clock instead.

    moto does not enforce expiry (docs/architecture.md#moto-local-s3-and-sts), so what matters is that our side notices it: with the
    expiry on the test clock, "after expiry" is one clock move instead of a 15-minute wait.
    """

    vendor: S3CredentialVendor
    clock: ManualClock
    vended: list[VendedCredentials] = field(default_factory=list)

    def vend_credentials(self, table: str, access: Access) -> VendedCredentials:
        stamped = replace(self.vendor.vend_credentials(table, access), expires_at=self.clock() + TTL)
        self.vended.append(stamped)
        return stamped


def key_id(credentials: VendedCredentials) -> str:
    return credentials.storage_options["AWS_ACCESS_KEY_ID"].get_secret_value()


def test_read_back_after_expiry_gets_fresh_credentials(
    moto_lab: S3Lab, unique_table: str, tmp_path: Path
) -> None:
    config = s3_config(moto_lab, tmp_path / "state")
    provision(moto_lab, config, unique_table)
    clock = ManualClock()
    vendor = ExpiryOnManualClock(S3CredentialVendor.from_config(config), clock)
    cache = CredentialCache(vendor, margin=timedelta(seconds=10), clock=clock)
    rt = ZerobusRuntime(config, credentials=cache)
    try:
        rt.write(unique_table, orders(300), source="a")
        assert rt.verify(unique_table, source="a").verified
        first, vends = vendor.vended[-1], cache.vend_count
        assert vends >= 1
        # Every poll reloads the table, but valid credentials are served from the cache.
        assert rt.verify(unique_table, source="a").verified
        assert cache.vend_count == vends

        clock.now = first.expires_at + timedelta(seconds=1)  # the cached READ credentials have expired
        rt.write(unique_table, orders(300, start=300), source="b")
        report = rt.verify(unique_table)
        assert report.verified, report.to_json()
        assert report.rows_scanned == 600
        assert cache.vend_count > vends
        fresh = vendor.vended[-1]
        assert key_id(fresh) != key_id(first) and fresh.expires_at > clock.now

        io = rt.iceberg().load_table(unique_table).io.properties
        assert io["s3.access-key-id"] == key_id(fresh)  # what the scan used: the fresh keys
        assert int(io[EXPIRES_AT_MS]) == int(fresh.expires_at.timestamp() * 1000)
        assert cache.vend_count == len(vendor.vended)
    finally:
        rt.close()


class RefusingSts:
    """Real STS refuses AssumeRole on a role that was never provisioned; moto does not check (docs/architecture.md#moto-local-s3-and-sts)."""

    def assume_role(self, **kwargs: object) -> dict[str, object]:
        raise RuntimeError("An error occurred (AccessDenied) when calling the AssumeRole operation")


def test_read_back_when_vending_is_refused_names_the_fix(
    moto_lab: S3Lab, unique_table: str, tmp_path: Path
) -> None:
    config = s3_config(moto_lab, tmp_path / "state")
    refusing = S3CredentialVendor(RefusingSts(), account_id=moto_lab.account_id, warehouse=config.warehouse)
    rt = ZerobusRuntime(config, credentials=CredentialCache(refusing))
    try:
        rt.write(unique_table, orders(10), source="a")
        # The facade answers 403 with the vendor's message instead of handing out the warehouse keys.
        with pytest.raises(ForbiddenError, match=r"AssumeRole on .*-ro failed.*S3TableRoleProvisioner"):
            rt.verify(unique_table, source="a", wait_s=30, raise_errors=True)
    finally:
        rt.close()


def test_state_dir_defaults() -> None:
    local = ZerobusConfig(warehouse="/data/wh")
    assert local.state_path == "/data/wh/_zerobus"
    assert local.coverage_location == "/data/wh/_zerobus/coverage.sqlite"  # unchanged for folders
    a, b = ZerobusConfig(warehouse="s3://lake/a"), ZerobusConfig(warehouse="s3://lake/b")
    assert a.state_path != b.state_path
    assert Path(a.state_path).parent == Path(".zerobus/state")
    assert a.coverage_location == str(Path(a.state_path) / "coverage.sqlite")
    explicit = ZerobusConfig(warehouse="s3://lake/a", state_dir="/var/lib/zb")
    assert explicit.coverage_location == "/var/lib/zb/coverage.sqlite"
    pinned = ZerobusConfig(warehouse="s3://lake/a", coverage={"location": "/x/cov.sqlite"})
    assert pinned.coverage_location == "/x/cov.sqlite"


def test_credential_vending_config_is_checked() -> None:
    from zerobus_orchestration.config import load_config

    with pytest.raises(ConfigError, match=r"needs an s3://.*warehouse"):
        load_config(environ={}, warehouse="/data/wh", credential_vending={"enabled": True, "account_id": "1"})
    with pytest.raises(ConfigError, match="account_id"):
        load_config(environ={}, warehouse="s3://lake/wh", credential_vending={"enabled": True})
    with pytest.raises(ConfigError, match="secret_access_key"):
        load_config(
            environ={},
            warehouse="s3://lake/wh",
            credential_vending={"enabled": True, "account_id": "1", "access_key_id": "only-half"},
        )
