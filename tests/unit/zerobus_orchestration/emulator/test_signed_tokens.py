"""The emulator's bearer tokens: signed with the warehouse's key, valid until expiry, never forgeable.

Tokens used to live in the issuing process's memory only, so a restarted emulator refused every token
the SDK still held; they are now verified from their signature, by any process holding the key.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import time
from pathlib import Path

import pytest
from pydantic import SecretStr

from zerobus_orchestration.emulator.auth import TokenIssuer
from zerobus_orchestration.emulator.errors import AuthFailure, TokenRequestError
from zerobus_orchestration.emulator.private import SIGNING_KEY_FILE, signing_key
from zerobus_orchestration.errors import ConfigError

TABLE = "main.default.events"


def issuer(key: bytes, ttl_s: float = 3600) -> TokenIssuer:
    return TokenIssuer("client", SecretStr("secret"), ttl_s, key)


def test_a_second_issuer_with_the_same_key_accepts_the_token_until_it_expires() -> None:
    key = os.urandom(32)
    token = issuer(key).issue(frozenset({TABLE}))
    restarted = issuer(key)  # a new process: nothing in memory, only the key
    restarted.authorize(f"Bearer {token}", TABLE)
    restarted.check_http(f"Bearer {token}")
    with pytest.raises(AuthFailure) as info:
        restarted.authorize(f"Bearer {token}", "main.default.other")
    assert info.value.code == "PERMISSION_DENIED"


def test_expired_tokens_are_refused() -> None:
    key = os.urandom(32)
    token = issuer(key).issue(ttl_s=0.0)
    with pytest.raises(AuthFailure, match="expired") as info:
        issuer(key).authorize(f"Bearer {token}", TABLE)
    assert info.value.code == "UNAUTHENTICATED"
    with pytest.raises(TokenRequestError):
        issuer(key).check_http(f"Bearer {token}")


def test_a_token_signed_with_another_key_is_refused() -> None:
    other_warehouse = issuer(os.urandom(32)).issue()
    with pytest.raises(AuthFailure, match="unknown bearer token"):
        issuer(os.urandom(32)).authorize(f"Bearer {other_warehouse}", TABLE)


def _reclaimed(token: str, **claims: object) -> str:
    prefix, body, signature = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    decoded.update(claims)
    forged = base64.urlsafe_b64encode(json.dumps(decoded).encode()).rstrip(b"=").decode()
    return f"{prefix}.{forged}.{signature}"


@pytest.mark.parametrize(
    "claims",
    [{"tables": None}, {"tables": ["main.default.other"]}, {"exp": time.time() + 10**9}],
    ids=["widened to every table", "moved to another table", "expiry extended"],
)
def test_an_altered_token_is_refused(claims: dict[str, object]) -> None:
    key = os.urandom(32)
    token = issuer(key).issue(frozenset({TABLE}), ttl_s=60)
    forged = _reclaimed(token, **claims)
    for table in (TABLE, "main.default.other"):
        with pytest.raises(AuthFailure, match="unknown bearer token"):
            issuer(key).authorize(f"Bearer {forged}", table)


@pytest.mark.parametrize("token", ["", "zbemu1", "zbemu1..", "zbemu1.e30.", "zbemu-abc", "a.b.c"])
def test_malformed_tokens_are_refused(token: str) -> None:
    with pytest.raises(AuthFailure, match="unknown bearer token"):
        issuer(os.urandom(32)).authorize(f"Bearer {token}", TABLE)


def test_a_short_key_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        issuer(b"well-known")


def test_the_signing_key_is_random_owner_only_and_kept(tmp_path: Path) -> None:
    folder = tmp_path / "wal"
    key = signing_key(folder)
    assert len(key) == 32
    assert signing_key(folder) == key  # a restart reads it back
    assert signing_key(tmp_path / "other") != key  # another warehouse gets its own
    assert stat.S_IMODE((folder / SIGNING_KEY_FILE).stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_truncated_signing_key_is_refused_with_the_fix(tmp_path: Path) -> None:
    folder = tmp_path / "wal"
    signing_key(folder)
    (folder / SIGNING_KEY_FILE).write_bytes(b"short")
    with pytest.raises(ConfigError, match=r"truncated.*delete it"):
        signing_key(folder)
