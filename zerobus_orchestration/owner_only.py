"""State files 0600 in 0700 folders, in every mode: what the package keeps on local disk is its owner's.

The state folder holds the coverage cache, the resume marks, the local catalog's registry, the
emulator's write-ahead log, its Iceberg catalog, its client secret and its token signing key: rows
acknowledged but not yet in Delta, and credentials. Another local user must read none of it, whatever
the umask, so folders are created (or tightened to) 0700 and files 0600.

SQLite creates a database's ``-wal``, ``-shm`` and ``-journal`` side files with the database file's
own permissions (``findCreateFileMode`` in SQLite's ``os_unix.c``), so a database file created 0600
before SQLite opens it keeps its side files 0600 too (``private_file``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def private_dir(path: Path) -> Path:
    """``path`` created if needed and made owner-only (parents it creates get the default mode)."""
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR_MODE)
    if path.stat().st_mode & 0o777 != PRIVATE_DIR_MODE:
        os.chmod(path, PRIVATE_DIR_MODE)
    return path


def private_state(state: Path) -> Path:
    """The state folder made owner-only, with the files directly in it tightened to 0600 (the ones an
    earlier release created with the umask's mode)."""
    private_dir(state)
    for entry in state.iterdir():
        with contextlib.suppress(OSError):  # vanished meanwhile, or not ours: the folder still guards it
            if entry.is_file() and not entry.is_symlink() and entry.stat().st_mode & 0o077:
                os.chmod(entry, PRIVATE_FILE_MODE)
    return state


def open_private(path: Path, flags: int) -> int:
    """``os.open`` creating ``path`` owner-only (0600 whatever the umask); an existing file is tightened."""
    fd = os.open(path, flags | os.O_CREAT, PRIVATE_FILE_MODE)
    if os.fstat(fd).st_mode & 0o777 != PRIVATE_FILE_MODE:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    return fd


def private_file(path: Path) -> Path:
    """``path`` (a SQLite database about to be opened, or any state file) existing and owner-only, in
    an owner-only folder; its SQLite side files, where an earlier run left them, tightened too."""
    private_dir(path.parent)
    os.close(open_private(path, os.O_RDONLY))
    for suffix in SQLITE_SIDE_FILES:
        side = path.with_name(path.name + suffix)
        with contextlib.suppress(FileNotFoundError):
            if side.stat().st_mode & 0o077:
                os.chmod(side, PRIVATE_FILE_MODE)
    return path


def write_private(path: Path, data: bytes) -> None:
    """``path`` (re)written with ``data``, owner-only (0600)."""
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
