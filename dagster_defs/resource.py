"""``ZerobusResource``: Zerobus configuration for Dagster, and the way to the process-scoped runtime.

The resource holds configuration only. Dagster copies a resource on every initialisation, so the live
runtime (stream pool, ack lanes, catalog, coverage, embedded emulator) is never stored on it: it lives
in the core registry keyed by (pid, config hash), reached through ``acquire_runtime`` in
``setup_for_execution`` and let go with ``release_runtime`` in teardown. Every copy in one process
therefore shares one pool; the registry closes it at process exit (atexit + multiprocessing Finalize),
under every executor.

No ``from __future__ import annotations`` here: Dagster resolves resource annotations at runtime and
``configure_at_launch`` nested resources break with string annotations (docs/architecture.md#dagster).
"""

import json
import logging
from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Any

import dagster as dg
import pyarrow as pa
from pydantic import Field, PrivateAttr, SecretStr

from dagster_defs.failures import for_good
from zerobus_orchestration.config import (
    SHARED_EMULATOR_MODE,
    EmulatorMode,
    Role,
    ZerobusConfig,
    load_config,
    nest_keys,
)
from zerobus_orchestration.errors import ConfigError, ZerobusOrchestrationError
from zerobus_orchestration.runtime.facade import WriteResult, ZerobusRuntime
from zerobus_orchestration.runtime.registry import acquire_runtime, release_runtime
from zerobus_orchestration.sink.sink import ZerobusSink

log = logging.getLogger(__name__)

# Steps of the default multiprocess executor are parallel processes: they share one emulator process
# per warehouse instead of each starting its own (only one may hold a warehouse); the core's one default.
EMBEDDED_MODE: EmulatorMode = SHARED_EMULATOR_MODE


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Inverse of ``nest_keys(options, ".")`` over a ``model_dump``, secrets revealed (``from_config``)."""
    flat: dict[str, str] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, dotted + "."))
        elif isinstance(value, SecretStr):
            flat[dotted] = value.get_secret_value()
        elif isinstance(value, Enum):
            flat[dotted] = str(value.value)
        elif isinstance(value, str):
            flat[dotted] = value
        else:
            flat[dotted] = json.dumps(value)
    return flat


class ZerobusResource(dg.ConfigurableResource):  # type: ignore[type-arg]
    """Writes Arrow data into Databricks Delta tables through Zerobus (or the embedded emulator).

    With no ``endpoint`` the embedded emulator is started on ``warehouse`` (the default: a laptop run
    needs no cloud), as one shared emulator process per warehouse that every step process uses
    (``emulator.mode = "daemon"``; set ``options={"emulator.mode": "in_process"}`` to keep it inside the
    step process, one process per warehouse at a time). Secrets are plain strings here so they can come
    from ``dg.EnvVar``; they become ``SecretStr`` in ``ZerobusConfig`` and are never logged or put into
    metadata.

    .. code-block:: python

        zerobus = ZerobusResource(warehouse="./.zerobus/warehouse")             # embedded
        zerobus = ZerobusResource(                                               # production
            endpoint=dg.EnvVar("ZEROBUS_ENDPOINT"),
            workspace_url=dg.EnvVar("DATABRICKS_HOST"),
            client_id=dg.EnvVar("DATABRICKS_CLIENT_ID"),
            client_secret=dg.EnvVar("DATABRICKS_CLIENT_SECRET"),
            options={"catalog.backend": "unity", "catalog.sql_warehouse_id": "abc123"},
        )

    Assets that stream their own data call ``write`` or ``sink`` and return ``dg.MaterializeResult``.
    """

    endpoint: str | None = Field(
        default=None,
        description="Zerobus ingest endpoint (https://<workspace-id>.zerobus.<region>.cloud.databricks.com). "
        "Unset: start the embedded emulator on `warehouse`.",
    )
    workspace_url: str | None = Field(
        default=None,
        description="Databricks workspace URL: OAuth token endpoint, Unity Catalog, Iceberg REST.",
    )
    client_id: str | None = Field(default=None, description="OAuth M2M service principal client id.")
    client_secret: str | None = Field(
        default=None,
        repr=False,
        description="OAuth M2M service principal secret (use dg.EnvVar). Kept as SecretStr, never logged.",
    )
    warehouse: str | None = Field(
        default=None,
        description="Embedded warehouse folder or s3:// URI (Delta tables, coverage, Iceberg mirror). "
        "Default ./.zerobus/warehouse.",
    )
    config_path: str | None = Field(
        default=None, description="Optional TOML file with a [zerobus] table, applied before everything else."
    )
    use_environment: bool = Field(
        default=True,
        description="Apply ZEROBUS_* environment variables over the TOML file (fields and options win).",
    )
    options: dict[str, str] = Field(
        default_factory=dict,
        repr=False,  # may carry secrets (readback.token, storage_options.*)
        description="Any other core setting by dotted key, e.g. {'pool.min_streams': '2', "
        "'emulator.iceberg_lag_s': '0.5', 'readback.wait_timeout_s': '60'}; values are validated by "
        "the core config.",
    )

    _runtime: ZerobusRuntime | None = PrivateAttr(default=None)
    _acquired: ZerobusConfig | None = PrivateAttr(default=None)
    _deferred: ZerobusOrchestrationError | None = PrivateAttr(default=None)  # setup's retriable failure

    @classmethod
    def from_config(cls, cfg: ZerobusConfig) -> "ZerobusResource":
        """A resource whose ``zerobus_config()`` equals ``cfg`` (same hash, hence the same runtime).

        ``cfg`` is complete, so its ``emulator.mode`` is kept as it is, the core default included
        (``zerobus-orch demo`` shares its config with the core runtime this way); the resource's
        ``daemon`` default applies to resources declared through fields, options, TOML or environment.
        """
        explicit = _flatten(cfg.model_dump(mode="python", exclude_defaults=True))
        if cfg.embedded:
            explicit["emulator.mode"] = cfg.emulator.mode
        resource = cls(use_environment=False, options=explicit)
        if resource.zerobus_config().config_hash() != cfg.config_hash():
            # A setting that does not survive the string round trip would silently select another
            # runtime (in embedded mode: a second emulator on the same warehouse). Refuse instead.
            raise ConfigError("ZerobusResource.from_config: this config cannot be expressed as options")
        return resource

    def zerobus_config(self) -> ZerobusConfig:
        """The core configuration: TOML < ZEROBUS_* environment < ``options`` < the typed fields.

        Embedded, ``emulator.mode`` defaults to ``daemon`` unless set in any of those: the multiprocess
        executor runs steps in parallel processes, and they share one emulator per warehouse.
        """
        overrides: dict[str, Any] = nest_keys(self.options, ".", origin="ZerobusResource.options")
        typed = {
            "endpoint": self.endpoint,
            "workspace_url": self.workspace_url,
            "client_id": self.client_id,
            "client_secret": self.client_secret,
            "warehouse": self.warehouse,
        }
        overrides.update({k: v for k, v in typed.items() if v is not None})
        environ: Mapping[str, str] | None = None if self.use_environment else {}
        return load_config(self.config_path, environ=environ, **overrides).with_default_emulator_mode(
            EMBEDDED_MODE
        )

    # -- lifecycle -------------------------------------------------------------------------------

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        if context.run is None:
            # A sensor or schedule evaluation, outside any run: read-back there is read-only and needs
            # no write runtime (no stream pool, no emulator lease); ``runtime`` still acquires lazily.
            return
        cfg = self.zerobus_config()
        try:
            self._runtime = acquire_runtime(cfg)
        except ZerobusOrchestrationError as exc:
            failure = for_good(exc)
            if failure is not None:
                raise failure from exc
            if not exc.retriable:
                raise
            # A resource that fails to initialise fails its step without the asset's RetryPolicy
            # (docs/architecture.md#dagster), yet this failure may pass (an endpoint down now): the step
            # meets it again on first use, where the policy applies.
            self._deferred = exc
            log.warning("zerobus: the runtime did not start (%s); the step fails on first use", exc)
            return
        self._acquired = cfg
        log.debug("zerobus runtime %s (embedded=%s)", cfg.config_hash(), cfg.embedded)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        # Durability was awaited inside handle_output; this flush is only a courtesy, and teardown
        # errors never fail a run anyway (dagster-io/dagster#10259), so nothing here may raise.
        try:
            if self._runtime is not None:
                self._runtime.flush()
        except Exception as exc:
            if context.log is not None:
                context.log.warning(f"zerobus: best-effort flush at teardown failed: {exc}")
        finally:
            if self._acquired is not None:
                try:
                    release_runtime(self._acquired)
                except Exception as exc:
                    if context.log is not None:
                        context.log.warning(f"zerobus: releasing the runtime failed: {exc}")
            self._runtime = None
            self._acquired = None

    @property
    def runtime(self) -> ZerobusRuntime:
        """The process-scoped runtime (acquired lazily when used outside a Dagster run, e.g. a script)."""
        deferred, self._deferred = self._deferred, None
        if deferred is not None:
            raise deferred  # what setup met, once: this step fails with it, a retry starts afresh
        if self._runtime is None:
            cfg = self.zerobus_config()
            try:
                self._runtime = acquire_runtime(cfg)
            except ZerobusOrchestrationError as exc:
                failure = for_good(exc)
                if failure is not None:
                    raise failure from exc
                raise
            self._acquired = cfg
        return self._runtime

    # -- public API for assets that stream their own data --------------------------------------

    def write(
        self,
        table: str,
        data: pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch],
        *,
        source: str,
        partition: str = "",
        role: Role | None = None,
        descriptions: Mapping[str, str] | None = None,
        mode: str = "auto",
        allow_raw_replace: bool = False,
    ) -> WriteResult:
        """Reconcile ``table``, stream ``data`` pipelined and return once the last batch is durable.

        In an asset, take ``source, partition = coverage_keys(context)`` so a retried step resumes and a
        re-run of the partition is told apart (``mode``: what it does, docs/adr/0007-write-modes.md).
        """
        return self.runtime.write(
            table,
            data,
            source=source,
            partition=partition,
            role=role,
            descriptions=descriptions,
            mode=mode,
            allow_raw_replace=allow_raw_replace,
        )

    def sink(self, table: str, *, source: str, partition: str = "", role: Role | None = None) -> ZerobusSink:
        """A sink on this process's pool for an asset that pushes batches itself; ``flush()`` it before
        returning (that is the durability barrier)."""
        return self.runtime.sink(table, source=source, partition=partition, role=role)
