"""Object-store options for warehouses, and a cache that re-vends credentials before they expire.

``storage_options``: the plain ``dict[str, str]`` deltalake (object_store) wants, from the configured
``SecretStr`` options plus derived defaults for ``s3://`` warehouses (``AWS_ALLOW_HTTP`` for an
``http://`` endpoint such as moto, a default region). ``with_credentials`` overlays vended credentials;
``pyiceberg_properties`` translates the same options into pyiceberg's ``s3.*`` keys.

``CredentialCache``: vended credentials are short-lived (STS: 15 minutes and up; Unity Catalog: about an
hour). Read-back and writers ask the cache, which re-vends when the cached credential is within
``margin`` of its expiry; the expiry is checked in our own code (moto does not reject expired keys).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol

from pydantic import SecretStr

from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.errors import CatalogError, ConfigError

DEFAULT_REGION = "us-east-1"
AWS_ENDPOINT_URL = "AWS_ENDPOINT_URL"
AWS_ALLOW_HTTP = "AWS_ALLOW_HTTP"
AWS_REGION = "AWS_REGION"
AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
AWS_SESSION_TOKEN = "AWS_SESSION_TOKEN"

# deltalake (object_store) option -> pyiceberg FileIO property
_PYICEBERG_KEYS = {
    AWS_ENDPOINT_URL: "s3.endpoint",
    AWS_REGION: "s3.region",
    AWS_ACCESS_KEY_ID: "s3.access-key-id",
    AWS_SECRET_ACCESS_KEY: "s3.secret-access-key",
    AWS_SESSION_TOKEN: "s3.session-token",
}


class Access(StrEnum):
    READ = "read"
    WRITE = "write"


@dataclass(frozen=True)
class VendedCredentials:
    """Short-lived storage credentials for one table; secrets are ``SecretStr``."""

    table: str
    access: Access
    url: str
    expires_at: datetime  # timezone-aware UTC
    storage_options: Mapping[str, SecretStr] = field(default_factory=dict)
    token: SecretStr | None = None

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at


def is_s3(uri: str) -> bool:
    return uri.startswith(("s3://", "s3a://"))


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")`` (prefix without slashes at the ends)."""
    if not is_s3(uri):
        raise ConfigError(f"{uri!r} is not an s3:// URI")
    rest = uri.split("://", 1)[1]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ConfigError(f"{uri!r} names no bucket; use s3://<bucket>/<prefix>")
    return bucket, prefix.strip("/")


def reveal(options: Mapping[str, SecretStr | str]) -> dict[str, str]:
    return {k: v.get_secret_value() if isinstance(v, SecretStr) else v for k, v in options.items()}


def s3_options(
    *,
    endpoint_url: str | None = None,
    region: str = DEFAULT_REGION,
    access_key_id: str | None = None,
    secret_access_key: str | None = None,
    session_token: str | None = None,
) -> dict[str, str]:
    """deltalake options for S3 or an S3-compatible endpoint (moto, MinIO)."""
    options = {AWS_REGION: region}
    if endpoint_url:
        options[AWS_ENDPOINT_URL] = endpoint_url
        if endpoint_url.startswith("http://"):
            options[AWS_ALLOW_HTTP] = "true"
    for key, value in (
        (AWS_ACCESS_KEY_ID, access_key_id),
        (AWS_SECRET_ACCESS_KEY, secret_access_key),
        (AWS_SESSION_TOKEN, session_token),
    ):
        if value:
            options[key] = value
    return options


def storage_options(warehouse: str, options: Mapping[str, SecretStr | str] | None = None) -> dict[str, str]:
    """Options for a warehouse URI: the configured ones, plus S3 defaults the user did not set."""
    plain = reveal(options or {})
    if not is_s3(warehouse):
        return plain
    if (AWS_ACCESS_KEY_ID in plain) != (AWS_SECRET_ACCESS_KEY in plain):
        raise ConfigError(
            f"warehouse {warehouse}: storage_options need both {AWS_ACCESS_KEY_ID} and "
            f"{AWS_SECRET_ACCESS_KEY} (or neither, to use the default AWS credential chain)"
        )
    plain.setdefault(AWS_REGION, DEFAULT_REGION)
    endpoint = plain.get(AWS_ENDPOINT_URL, "")
    if endpoint.startswith("http://"):
        plain.setdefault(AWS_ALLOW_HTTP, "true")
    return plain


def config_storage_options(config: ZerobusConfig) -> dict[str, str]:
    return storage_options(config.warehouse, config.storage_options)


def with_credentials(base: Mapping[str, str], credentials: VendedCredentials) -> dict[str, str]:
    """``base`` (endpoint, region) with the vended keys on top; the vended keys always win."""
    merged = dict(base)
    if credentials.storage_options:
        for key in (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN):
            merged.pop(key, None)  # never mix a base session token with vended keys
    merged.update(reveal(credentials.storage_options))
    return merged


def pyiceberg_properties(options: Mapping[str, str]) -> dict[str, str]:
    """The same S3 settings as pyiceberg FileIO properties (``s3.endpoint``, ``s3.access-key-id``, ...)."""
    return {_PYICEBERG_KEYS[k]: v for k, v in options.items() if k in _PYICEBERG_KEYS}


class CredentialVendor(Protocol):
    """Anything that vends table credentials; every ``TableCatalog`` is one."""

    def vend_credentials(self, table: str, access: Access) -> VendedCredentials: ...


def utc_now() -> datetime:
    return datetime.now(UTC)


class CredentialCache:
    """Per (table, access) credentials, re-vended when within ``margin`` of expiry. Thread-safe."""

    def __init__(
        self,
        vendor: CredentialVendor,
        *,
        margin: timedelta = timedelta(minutes=2),
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._vendor = vendor
        self._margin = margin
        self._clock = clock
        self._cached: dict[tuple[str, Access], VendedCredentials] = {}
        self._lock = threading.Lock()
        self.vend_count = 0

    def get(self, table: str, access: Access) -> VendedCredentials:
        key = (table, access)
        with self._lock:
            cached = self._cached.get(key)
            if cached is not None and not self.needs_refresh(cached):
                return cached
            fresh = self._vendor.vend_credentials(table, access)
            self.vend_count += 1
            if fresh.expired(self._clock()):
                raise CatalogError(
                    f"credentials vended for {table} ({access.value}) expired at "
                    f"{fresh.expires_at.isoformat()}, before they could be used; check this machine's clock"
                )
            # A TTL shorter than the margin still works, it is just re-vended on every call.
            self._cached[key] = fresh
            return fresh

    def needs_refresh(self, credentials: VendedCredentials) -> bool:
        return self._clock() >= credentials.expires_at - self._margin

    def invalidate(self, table: str, access: Access | None = None) -> None:
        """Forget cached credentials (e.g. after an AccessDenied/ExpiredToken from the store)."""
        with self._lock:
            for key in [k for k in self._cached if k[0] == table and (access is None or k[1] is access)]:
                del self._cached[key]

    def storage_options(self, table: str, access: Access, base: Mapping[str, str]) -> dict[str, str]:
        """deltalake options for ``table``: ``base`` plus fresh credentials."""
        return with_credentials(base, self.get(table, access))
