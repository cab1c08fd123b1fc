"""Storage options and the credential cache (unit level, injectable clock)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import SecretStr

from zerobus_orchestration.catalog.base import Access, VendedCredentials
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.errors import CatalogError, ConfigError
from zerobus_orchestration.storage import (
    CredentialCache,
    config_storage_options,
    pyiceberg_properties,
    s3_options,
    split_s3_uri,
    storage_options,
    with_credentials,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_s3_options_for_a_plain_http_endpoint() -> None:
    assert s3_options(endpoint_url="http://127.0.0.1:5000", access_key_id="a", secret_access_key="b") == {
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": "a",
        "AWS_SECRET_ACCESS_KEY": "b",
    }
    assert "AWS_ALLOW_HTTP" not in s3_options(endpoint_url="https://s3.example.com")


def test_storage_options_derive_s3_defaults_and_reveal_secrets() -> None:
    config = ZerobusConfig(
        warehouse="s3://lake/wh",
        storage_options={
            "AWS_ENDPOINT_URL": SecretStr("http://127.0.0.1:9"),
            "AWS_ACCESS_KEY_ID": SecretStr("key"),
            "AWS_SECRET_ACCESS_KEY": SecretStr("secret"),
        },
    )
    assert config_storage_options(config) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }
    assert storage_options("/tmp/wh", {"x": "y"}) == {"x": "y"}  # a folder gets nothing added
    with pytest.raises(ConfigError, match="AWS_SECRET_ACCESS_KEY"):
        storage_options("s3://lake/wh", {"AWS_ACCESS_KEY_ID": "only-half"})


def test_split_s3_uri() -> None:
    assert split_s3_uri("s3://lake/wh/main/raw/t/") == ("lake", "wh/main/raw/t")
    assert split_s3_uri("s3://lake") == ("lake", "")
    with pytest.raises(ConfigError, match="not an s3"):
        split_s3_uri("/tmp/x")
    with pytest.raises(ConfigError, match="no bucket"):
        split_s3_uri("s3:///x")


def creds(expires_at: datetime, key: str = "k1", table: str = "c.s.t") -> VendedCredentials:
    return VendedCredentials(
        table=table,
        access=Access.READ,
        url="s3://lake/wh/c/s/t",
        expires_at=expires_at,
        storage_options={
            "AWS_ACCESS_KEY_ID": SecretStr(key),
            "AWS_SECRET_ACCESS_KEY": SecretStr("s"),
            "AWS_SESSION_TOKEN": SecretStr("tok"),
        },
    )


def test_with_credentials_replaces_base_keys_and_pyiceberg_translation() -> None:
    base = s3_options(endpoint_url="http://e", access_key_id="admin", secret_access_key="admin-secret")
    merged = with_credentials(base, creds(T0))
    assert merged["AWS_ACCESS_KEY_ID"] == "k1" and merged["AWS_SESSION_TOKEN"] == "tok"
    assert merged["AWS_ENDPOINT_URL"] == "http://e"
    assert pyiceberg_properties(merged) == {
        "s3.endpoint": "http://e",
        "s3.region": "us-east-1",
        "s3.access-key-id": "k1",
        "s3.secret-access-key": "s",
        "s3.session-token": "tok",
    }


@dataclass
class ScriptedVendor:
    """Vends credentials living ``ttl`` from the (fake) clock's now."""

    clock: list[datetime]
    ttl: timedelta = timedelta(minutes=15)
    calls: list[tuple[str, Access]] = field(default_factory=list)

    def vend_credentials(self, table: str, access: Access) -> VendedCredentials:
        self.calls.append((table, access))
        return creds(self.clock[0] + self.ttl, key=f"k{len(self.calls)}", table=table)


def test_cache_reuses_until_the_margin_then_re_vends() -> None:
    now = [T0]
    vendor = ScriptedVendor(now)
    cache = CredentialCache(vendor, margin=timedelta(minutes=2), clock=lambda: now[0])
    first = cache.get("c.s.t", Access.READ)
    now[0] = T0 + timedelta(minutes=12, seconds=59)
    assert cache.get("c.s.t", Access.READ) is first  # 2m01s left: still good
    now[0] = T0 + timedelta(minutes=13)
    second = cache.get("c.s.t", Access.READ)  # within the margin: refreshed before it expires
    assert second is not first and second.expires_at == now[0] + timedelta(minutes=15)
    assert (
        cache.storage_options("c.s.t", Access.READ, {"AWS_REGION": "eu-west-1"})["AWS_ACCESS_KEY_ID"] == "k2"
    )
    assert len(vendor.calls) == 2 and cache.vend_count == 2


def test_cache_keys_by_table_and_access_and_can_be_invalidated() -> None:
    now = [T0]
    vendor = ScriptedVendor(now)
    cache = CredentialCache(vendor, clock=lambda: now[0])
    cache.get("c.s.a", Access.READ)
    cache.get("c.s.a", Access.WRITE)
    cache.get("c.s.b", Access.READ)
    cache.get("c.s.a", Access.READ)
    assert len(vendor.calls) == 3
    cache.invalidate("c.s.a")
    cache.get("c.s.a", Access.READ)
    assert len(vendor.calls) == 4


def test_short_lived_credentials_are_re_vended_every_time_and_dead_ones_refused() -> None:
    now = [T0]
    short = ScriptedVendor(now, ttl=timedelta(seconds=30))
    cache = CredentialCache(short, margin=timedelta(minutes=2), clock=lambda: now[0])
    assert cache.get("c.s.t", Access.READ) is not cache.get("c.s.t", Access.READ)
    assert len(short.calls) == 2
    dead = CredentialCache(ScriptedVendor(now, ttl=timedelta(seconds=-1)), clock=lambda: now[0])
    with pytest.raises(CatalogError, match="before they could be used"):
        dead.get("c.s.t", Access.READ)


def test_storage_options_from_the_environment_keep_one_spelling_per_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Environment variables arrive lower-cased: they must still set the region and the http endpoint."""
    from zerobus_orchestration.config import load_config

    monkeypatch.setenv("ZEROBUS_WAREHOUSE", "s3://lake/wh")
    monkeypatch.setenv("ZEROBUS_STORAGE_OPTIONS__AWS_REGION", "eu-west-1")
    monkeypatch.setenv("ZEROBUS_STORAGE_OPTIONS__AWS_ENDPOINT_URL", "http://127.0.0.1:5000")
    options = config_storage_options(load_config())
    assert options == {
        "AWS_REGION": "eu-west-1",  # not the default us-east-1 beside an aws_region
        "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
        "AWS_ALLOW_HTTP": "true",
    }
    assert pyiceberg_properties(options) == {"s3.region": "eu-west-1", "s3.endpoint": "http://127.0.0.1:5000"}


def test_a_storage_option_given_in_two_spellings_is_refused() -> None:
    with pytest.raises(ValueError, match="'aws_region' is given twice"):
        ZerobusConfig(
            warehouse="s3://lake/wh",
            storage_options={"AWS_REGION": SecretStr("a"), "aws_region": SecretStr("b")},
        )
