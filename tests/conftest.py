"""Suite-wide hygiene: the official SDK tunnels even 127.0.0.1 through *_proxy variables."""

from __future__ import annotations

import os

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
