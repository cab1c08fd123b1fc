"""Where the local cloud's temporary table credentials come from, per warehouse kind."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pydantic import SecretStr

from zerobus_orchestration.emulator.unity.local_cloud import LocalIssuer
from zerobus_orchestration.emulator.unity.state import FakeTable
from zerobus_orchestration.storage import Access, VendedCredentials

TABLE = FakeTable(
    "main", "raw", "events", storage_root="s3://lake/wh", managed_location="s3://lake/wh/main/raw/events"
)
EXPIRES = datetime(2030, 1, 1, tzinfo=UTC)


class Source:
    def __init__(self) -> None:
        self.asked: list[tuple[str, Access]] = []

    def get(self, table: str, access: Access) -> VendedCredentials:
        self.asked.append((table, access))
        keys = {"AWS_ACCESS_KEY_ID": "ASIAROLE", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t"}
        return VendedCredentials(
            table, access, "s3://lake/wh/main/raw/events", EXPIRES, {k: SecretStr(v) for k, v in keys.items()}
        )


def test_a_credential_source_vends_per_table_read_keys() -> None:
    source = Source()
    issued = LocalIssuer({"AWS_ACCESS_KEY_ID": "AKIAWAREHOUSE", "AWS_SECRET_ACCESS_KEY": "w"}, source).issue(
        TABLE, "READ"
    )
    assert source.asked == [("main.raw.events", Access.READ)]
    assert (issued.access_key_id, issued.session_token) == ("ASIAROLE", "t")
    assert issued.expiration_ms == int(EXPIRES.timestamp() * 1000)


def test_without_a_source_the_warehouse_keys_are_vended_with_an_expiry() -> None:
    before = datetime.now(UTC)
    issued = LocalIssuer({"aws_access_key_id": "AKIAWAREHOUSE", "aws_secret_access_key": "w"}, None).issue(
        TABLE, "READ"
    )
    assert (issued.access_key_id, issued.secret_access_key, issued.session_token) == (
        "AKIAWAREHOUSE",
        "w",
        "",
    )
    assert datetime.fromtimestamp(issued.expiration_ms / 1000, UTC) > before + timedelta(minutes=30)


def test_a_folder_warehouse_needs_no_keys_and_gets_ones_that_open_nothing() -> None:
    issued = LocalIssuer(None, None).issue(TABLE, "READ")
    assert issued.access_key_id.startswith("ASIAFAKE")
