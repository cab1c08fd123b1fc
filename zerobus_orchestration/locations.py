"""Where things live: whether a warehouse URI is a local folder, and the absolute state folder.

One definition each, shared by the catalog, coverage, the runtime, the CLI and the emulator (which
imports it as a value module). A location is local when it is a plain path or a ``file://`` URI;
anything else with a scheme (``s3://``, ``s3a://``, ...) is an object store.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

FILE_SCHEME: Final = "file://"

__all__ = ["FILE_SCHEME", "absolute_state_dir", "absolute_warehouse", "is_local", "local_path"]


def is_local(uri: str) -> bool:
    """True for a plain path or a ``file://`` URI; False for an object-store URI."""
    return "://" not in uri or uri.startswith(FILE_SCHEME)


def local_path(uri: str) -> str:
    """The filesystem path of a local location (``file://`` dropped); other text unchanged."""
    return uri.removeprefix(FILE_SCHEME)


def absolute_warehouse(warehouse: str) -> str:
    """A plain warehouse path made absolute (URIs unchanged): it is resolved once, at start."""
    return warehouse if "://" in warehouse else os.path.abspath(warehouse)


def absolute_state_dir(state_path: str) -> Path:
    """A config's ``state_path`` made absolute: resolved once, against the starting directory.

    The runtime, the CLI, the catalog registry and the emulator daemon must agree on it, or a daemon
    started from another directory would keep its WAL and secret somewhere its clients do not look.
    """
    return Path(os.path.abspath(local_path(state_path)))
