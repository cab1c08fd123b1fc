"""Owner-only state of the embedded emulator, and the per-warehouse client secret.

The emulator's HTTP and gRPC ports listen on loopback, where every local user can reach them, so the
credential that gets a token must not be the well-known default of ``EmulatorConfig.client_secret``.
Unless the config names another secret, the first process to start an emulator for a warehouse
generates one into ``<state>/emulator.secret`` (0600); later processes of the same warehouse (the
shared daemon and its clients) read it back, so they agree without the secret ever travelling on argv
or into a log. The state folder holding it, the WAL and the advertisement is made owner-only (0700,
``owner_only``).

The emulator's token signing key (``signing_key``) is kept the same way, in the WAL folder: tokens stay
valid across a restart of the emulator until they expire (auth.py).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from pydantic import SecretStr

from zerobus_orchestration.config import EmulatorConfig, ZerobusConfig
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.locations import absolute_state_dir
from zerobus_orchestration.owner_only import PRIVATE_FILE_MODE, open_private, private_dir, private_state

SECRET_FILE = "emulator.secret"
SIGNING_KEY_FILE = "token-signing.key"
WELL_KNOWN_SECRET = EmulatorConfig.model_fields["client_secret"].default.get_secret_value()


def warehouse_secret(state: Path) -> SecretStr:
    """The client secret of the warehouse whose state folder is ``state``, generated on first use.

    Creation is atomic (``_create_once``), so two processes starting at once both end with the
    winner's secret.
    """
    private_state(state)
    path = state / SECRET_FILE
    existing = _read_secret(path)
    if existing is not None:
        return existing
    _create_once(path, secrets.token_urlsafe(32).encode())
    found = _read_secret(path)
    if found is None:
        raise ConfigError(f"the emulator secret {path} is empty: delete it and start again")
    return found


def signing_key(folder: Path) -> bytes:
    """The token signing key kept in ``folder`` (owner-only), generated on first use.

    Random per warehouse, never derived from the client secret (which may be the well-known default):
    a token signed with it is accepted only by emulators of this warehouse.
    """
    private_dir(folder)
    path = folder / SIGNING_KEY_FILE
    if not path.exists():
        _create_once(path, secrets.token_bytes(32))
    if path.stat().st_mode & 0o077:
        os.chmod(path, PRIVATE_FILE_MODE)
    key = path.read_bytes()
    if len(key) < 32:
        raise ConfigError(
            f"the emulator's token signing key {path} is truncated ({len(key)} bytes): delete it and start "
            "again (tokens it signed are then refused and the clients fetch new ones)"
        )
    return key


def _create_once(path: Path, content: bytes) -> None:
    """``path`` created owner-only holding ``content``, unless another process created it first.

    Written to a private temporary file, fsync'd, then hard-linked into place: a reader never sees a
    partial file, and of two racing processes the first link wins.
    """
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, content)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:  # another process won the race: use its file
        pass
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _read_secret(path: Path) -> SecretStr | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    if path.stat().st_mode & 0o077:
        os.chmod(path, PRIVATE_FILE_MODE)
    return SecretStr(text) if text else None


def with_warehouse_secret(config: ZerobusConfig) -> ZerobusConfig:
    """``config`` whose emulator secret is the warehouse's own instead of the well-known default.

    A secret set explicitly in the config (anything but the default) is kept: its owner chose it.
    """
    if config.emulator.client_secret.get_secret_value() != WELL_KNOWN_SECRET:
        return config
    secret = warehouse_secret(absolute_state_dir(config.state_path))
    emulator = config.emulator.model_copy(update={"client_secret": secret})
    return config.model_copy(update={"emulator": emulator})
