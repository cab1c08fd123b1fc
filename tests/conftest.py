"""Suite-wide hygiene: the official SDK tunnels even 127.0.0.1 through *_proxy variables."""

from __future__ import annotations

import os

import pytest

for _var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "grpc_proxy", "GRPC_PROXY"):
    os.environ.pop(_var, None)
for _var in ("NO_PROXY", "no_proxy", "no_grpc_proxy"):
    os.environ[_var] = "127.0.0.1,localhost"
# A developer's own ZEROBUS_* settings must not leak into tests.
for _var in [v for v in os.environ if v.startswith("ZEROBUS_")]:
    os.environ.pop(_var, None)

# Shared fixtures load as plugins (never imported by module name); see tests/README.md.
pytest_plugins = [
    "zerobus_orchestration.testing.pytest_plugin",
    "tests.support.airflow_env",
    "tests.support.moto_fixtures",
    "tests.support.uc_fixtures",
]


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: two workers a core. Much of the suite's wall time is tests waiting (on a service's
    commit, an acknowledgement delay, a timeout they prove), not computing; with fewer workers a core sat
    idle through those waits. Measured on 2 cores, one machine, one afternoon (2,268 tests each,
    ``make pytest WORKERS=N``): 3 workers 8m56s, 4 workers 7m48s, 5 workers 7m58s. At 5 every worker
    finished within 2 s of the others: the cores were busy to the end, so a fifth worker only adds
    contention (10.0 / 10.4 / 11.7 user CPU-minutes for 3 / 4 / 5)."""
    cores = os.cpu_count() or 1
    return 2 * cores


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that start processes run first, the ``slow`` ones before the rest, each group in collection
    order: a parallel run (``--dist load --maxschedchunk 1`` hands tests out one at a time as workers free
    up) then starts its longest tests on every worker at once, and ends on many short ones instead of one
    long one."""
    items.sort(key=_start_rank)


def _start_rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow") is not None:
        return 0
    return 1 if item.nodeid.startswith("tests/system/") else 2
