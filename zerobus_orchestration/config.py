"""Every knob of the package, in one pydantic model tree.

Loaded from a TOML file (``[zerobus]`` table) and ``ZEROBUS_*`` environment variables; the environment
wins. Nested keys use a double underscore: ``ZEROBUS_POOL__MIN_STREAMS=2``. Invalid values fail with
the dotted key named (``zerobus.pool.min_streams``).

There is deliberately no knob for waiting per batch: durability is awaited by the ack lane, never
inline on the ingest path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tomllib
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)

from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.locations import is_local, local_path

ENV_PREFIX = "ZEROBUS_"
# ZEROBUS_* variables that are not settings (ZEROBUS_DEBUG: the CLI prints tracebacks).
NOT_CONFIG_VARIABLES = frozenset({"ZEROBUS_DEBUG"})
DEFAULT_WAREHOUSE = "./.zerobus/warehouse"
DEFAULT_STATE_ROOT = "./.zerobus/state"  # local state of object-store warehouses, one folder per URI
STATE_DIR_NAME = "_zerobus"  # local state of a folder warehouse lives inside it
DEFAULT_PER_STREAM_MB_CEILING = 100.0  # the documented Zerobus per-stream quota
# What one ingest call may carry: the SDK enforces 10 MiB - 64 KiB on its row path "matching the
# server-side limit" and nothing on Arrow streams, so the sink never sends an Arrow call larger (a row
# alone over it is refused before sending); beyond the emulator's gRPC limit the SDK retries forever.
MAX_CALL_BYTES = 10 * 1024 * 1024 - 64 * 1024


log = logging.getLogger(__name__)


class Role(StrEnum):
    PRIMARY_RAW = "primary_raw"
    DERIVED = "derived"


class CatalogBackend(StrEnum):
    LOCAL = "local"
    UNITY = "unity"


class CommentPolicy(StrEnum):
    RESPECT = "respect"  # a human edit to a managed comment is kept and reported
    RESTORE = "restore"  # a human edit is overwritten with the contract's description


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


class PoolConfig(_Model):
    """The sink's stream pool: how many streams per table, and how much it holds in flight."""

    min_streams: int = Field(
        2,
        ge=1,
        le=1024,
        description="Floor on streams per table. Two by default, so a table keeps serving on one stream "
        "while the other is rebuilt (docs/adr/0008-per-stream-isolation.md).",
    )
    per_stream_mb_ceiling: float = Field(
        DEFAULT_PER_STREAM_MB_CEILING,
        gt=0,
        description="MB/s one stream may carry (the documented Zerobus per-stream quota).",
    )
    peak_mb_s: float = Field(
        0.0,
        ge=0,
        description="Expected peak MB/s into one table; streams per table = max(min_streams, "
        "ceil(peak_mb_s / per_stream_mb_ceiling)).",
    )
    ack_channel_capacity: int = Field(
        4096,
        ge=1,
        description="Pending acks per stream before push blocks (with max_inflight_bytes); never more than "
        "the stream's own in-flight cap (sdk.max_inflight_batches), past which a submit would wait inside "
        "the SDK.",
    )
    max_inflight_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1,
        description="Unacknowledged bytes per table's pool before push blocks, split evenly between its "
        "streams so a slow stream spends only its own share; bounds client memory whatever the batch "
        "size, and throughput per table to about this / ack latency whatever the number of streams "
        "(docs/runbook.md#backpressure). Each in-flight byte is held about twice (the "
        "batch, kept for re-submission and its digest, and the SDK's own IPC copy, kept until "
        "acknowledged), so RSS grows by about twice this plus allocator slack (docs/performance.md). A "
        "single batch larger than a stream's share is still sent, alone on that stream.",
    )
    max_batch_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1024,
        le=MAX_CALL_BYTES,
        description="Batches larger than this are sliced by rows before submit, each slice recorded as "
        "its own range. At most MAX_CALL_BYTES (10 MiB - 64 KiB, 10,420,224 bytes), what one ingest call "
        "may carry: the SDK's per-call limit, which it does not enforce on Arrow streams. Keep it well "
        "under a stream's share of pool.max_inflight_bytes, or each stream carries one batch at a time. "
        "Smaller slices leave the "
        "C heap fewer batch-sized holes it cannot reuse (docs/performance.md).",
    )
    healthy_member_wait_s: float = Field(
        30.0, gt=0, description="How long a batch waits for a healthy stream while members rebuild."
    )
    rebuild_budget_s: float = Field(60.0, gt=0, description="Time budget for rebuilding a poisoned stream.")
    open_backoff_initial_s: float = Field(0.5, gt=0, description="First backoff after a concurrency reject.")
    open_backoff_max_s: float = Field(30.0, gt=0, description="Backoff ceiling after concurrency rejects.")
    transient_retries: int = Field(
        5, ge=0, description="Retries of a transient failure: an ack wait, or a submit (backed off)."
    )
    poisoned_submit_attempts: int = Field(
        3,
        ge=1,
        description="Submits of one batch that may poison a stream (each costs a rebuild) before the "
        "batch is refused with SubmitFailedError; bounded so one bad batch cannot cause a reopen storm.",
    )
    failed_member_cooldown_s: float = Field(
        30.0,
        gt=0,
        description="Wait before re-opening a stream that failed beyond repair for a non-fatal cause "
        "(e.g. opens refused past rebuild_budget_s); fatal and schema-rejected streams stay failed.",
    )

    @field_validator("max_batch_bytes", mode="wrap")
    @classmethod
    def _batch_fits_one_call(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        # Pydantic's own "less than or equal to 10420224" names neither the limit nor the way out.
        try:
            return handler(value)
        except ValidationError as exc:
            if any(err["type"] == "less_than_equal" for err in exc.errors()):
                raise ValueError(
                    f"pool.max_batch_bytes is {value}, over {MAX_CALL_BYTES:,} bytes (10 MiB - 64 KiB), "
                    "the most one ingest call may carry; set pool.max_batch_bytes to at most "
                    f"{MAX_CALL_BYTES} (default {4 * 1024 * 1024}); batches over it are sliced by rows, "
                    "so a lower limit loses no data"
                ) from None
            raise

    @model_validator(mode="after")
    def _warn_single_batch_in_flight(self) -> PoolConfig:
        # Legal, so not refused, but slow: every batch then waits for the one before it on its stream to
        # be acknowledged (measured: 556 calls in 6.9 s for 5,000 rows). Logged when the config is built.
        streams = self.streams_for_table()
        share = self.max_inflight_bytes // streams
        if share < self.max_batch_bytes:
            log.warning(
                "pool.max_inflight_bytes (%d), split over %d stream(s), gives each stream %d bytes, which "
                "is below pool.max_batch_bytes (%d): each stream can carry only one batch at a time, each "
                "waiting for the previous one's acknowledgement. Raise pool.max_inflight_bytes to several "
                "times pool.max_batch_bytes per stream (defaults: 32 MiB for 2 streams, 4 MiB), or lower "
                "pool.max_batch_bytes",
                self.max_inflight_bytes,
                streams,
                share,
                self.max_batch_bytes,
            )
        return self

    def streams_for_table(self) -> int:
        """``max(min_streams, ceil(peak_MB_s / per_stream_mb_ceiling))``."""
        return max(self.min_streams, math.ceil(self.peak_mb_s / self.per_stream_mb_ceiling))


class SdkStreamOptions(_Model):
    """The official SDK's Arrow stream options, with the SDK's defaults.

    The defaults are listed in docs/architecture.md#the-zerobus-service-and-the-official-sdk.
    """

    recovery: bool = Field(
        True,
        description="The SDK reconnects a stream on a retryable failure and re-sends every batch not yet "
        "acknowledged (at-least-once); off, such a failure ends the stream and the pool rebuilds it.",
    )
    recovery_timeout_ms: int = Field(15_000, gt=0, description="Time limit of one SDK recovery attempt.")
    recovery_backoff_ms: int = Field(2_000, ge=0, description="SDK wait between recovery attempts.")
    recovery_retries: int = Field(4, ge=0, description="SDK recovery attempts before it gives the stream up.")
    server_lack_of_ack_timeout_ms: int = Field(
        60_000,
        gt=0,
        description="The SDK fails a connection whose oldest pending batch has waited this long for an "
        "acknowledgement (and, with recovery on, reconnects).",
    )
    flush_timeout_ms: int = Field(
        300_000, gt=0, description="Longest an SDK flush (or close) waits for the stream's acknowledgements."
    )
    connection_timeout_ms: int = Field(30_000, gt=0, description="Time limit for the SDK to open a stream.")
    max_inflight_batches: int = Field(
        1_000,
        gt=0,
        description="Batches one SDK stream holds unacknowledged at most; with pool.max_inflight_bytes and "
        "pool.ack_channel_capacity, whichever limit is reached first makes push wait.",
    )
    ipc_compression: Literal["none", "lz4_frame", "zstd"] = Field(
        "none",
        description="Compression of the Arrow IPC messages the SDK sends: none, lz4_frame (about half the "
        "bytes on the wire for ~1.4x the client CPU per GB) or zstd (about a quarter, ~2x the CPU). Turn it "
        "on when the link, not the client's CPU, is the limit (docs/performance.md: below ~300 MB/s per "
        "client core lz4_frame, below ~100 zstd).",
    )
    stream_paused_max_wait_time_ms: int | None = Field(
        None,
        gt=0,
        description="On a server rotation signal, wait at most this long for in-flight acks before "
        "reconnecting (default: the server's whole grace period).",
    )


class CatalogConfig(_Model):
    """The catalog backend: where tables are created and evolved, and how comments are kept."""

    backend: CatalogBackend = Field(
        CatalogBackend.LOCAL,
        description="local: Delta tables in the warehouse with a table registry in the state dir (the "
        "embedded default; one host only); unity: Unity Catalog through databricks-sdk, DDL run on "
        "catalog.sql_warehouse_id.",
    )
    sql_warehouse_id: str | None = Field(None, description="Databricks SQL warehouse running DDL (unity).")
    allow_widening: bool = Field(False, description="Plan lossless type widening instead of refusing it.")
    local_catalogs: tuple[str, ...] = Field(
        ("main",),
        description="backend local: the catalogs that exist (Unity Catalog creates catalogs explicitly; a "
        "table in another catalog is refused, not created). Environment: ZEROBUS_CATALOG__LOCAL_CATALOGS="
        "main,dev.",
    )
    comment_policy: CommentPolicy = Field(
        CommentPolicy.RESPECT,
        description="What a plan does with a described column's comment that someone changed outside the "
        "package (a managed comment whose text no longer matches its hash, or a comment without the "
        "twg:managed marker): respect keeps it and notes it in the plan; restore writes the contract's "
        "description back.",
    )
    precondition_recheck_s: float = Field(
        60.0,
        ge=0,
        description="A long-lived sink re-reads its primary-raw table's preconditions at most this often "
        "(seconds; 0: every batch). Every write re-checks them on its first batch regardless.",
    )

    @model_validator(mode="before")
    @classmethod
    def _split_local_catalogs(cls, data: Any) -> Any:
        # An environment variable is one string: "main,dev" lists two catalogs.
        if isinstance(data, dict) and isinstance(data.get("local_catalogs"), str):
            names = [n.strip().lower() for n in data["local_catalogs"].split(",") if n.strip()]
            return {**data, "local_catalogs": tuple(names)}
        return data


class CoverageConfig(_Model):
    """Coverage (which positions of a write are durable) and how a resume reads it."""

    location: str | None = Field(
        None,
        description="SQLite file for coverage; default <state_dir>/coverage.sqlite. Derived-lane writes "
        "commit into the file beside it (coverage.derived.sqlite), so neither lane waits for the other's "
        "write lock; reads cover both.",
    )
    consult_table: bool = Field(
        True,
        description="A resume also skips positions the raw table shows delivered (read from its Delta log).",
    )
    catch_up_settle_s: float = Field(
        2.0,
        ge=0,
        description=(
            "A resume that reads the table, and a run's decision about its partition's other runs on a table "
            "written lately, wait until what it shows is unchanged for 1.5 times the longest gap between "
            "commits of one write (the service's commit rhythm, read from the table's log); this long when "
            "the table shows no such rhythm."
        ),
    )
    catch_up_max_s: float = Field(
        30.0,
        ge=0,
        description="Longest a resume (or a run's decision about its partition's other runs) waits for the "
        "table to catch up with acknowledged rows.",
    )
    emit_margin_s: float = Field(
        3_600.0,
        ge=0,
        description=(
            "A resume reads only the table's files holding rows stamped after the partition's first attempt "
            "could have begun (the write's not_before, or this host's first look), less this margin: clocks "
            "apart between hosts, and the service's lag to the table."
        ),
    )
    compact_after_s: float = Field(
        86_400.0,
        ge=0,
        description=(
            "A partition no write recorded for this long is settled: its content digests are packed into "
            "one row (a resume still checks every range against its input)."
        ),
    )
    retention_days: float | None = Field(
        400.0,
        gt=0,
        description=(
            "Coverage of a partition no write recorded for this many days is let go; a later resume of it "
            "reads the table instead (nothing is re-sent, its content is not checked). None keeps it forever."
        ),
    )


class ReadbackConfig(_Model):
    """Read-back: verifying through Iceberg that what was delivered is readable."""

    iceberg_rest_uri: str | None = Field(
        None,
        description="Iceberg REST catalog URI; default the embedded emulator's facade, or "
        "<workspace_url>/api/2.1/unity-catalog/iceberg-rest.",
    )
    iceberg_catalog: str = Field("main", description="Iceberg REST warehouse (the UC catalog name).")
    token: SecretStr | None = Field(
        None,
        description="Bearer token for the Iceberg REST catalog, used instead of the service principal's "
        "OAuth token (or the embedded emulator's).",
    )
    wait_timeout_s: float = Field(120.0, gt=0, description="Deadline for Iceberg metadata to catch up.")
    poll_initial_s: float = Field(
        0.2, gt=0, description="First wait between polls of the Iceberg snapshot; each wait doubles."
    )
    poll_max_s: float = Field(5.0, gt=0, description="Longest wait between polls of the Iceberg snapshot.")
    force_metadata: bool = Field(
        False,
        description="Embedded only: ask the emulator to mirror the table into Iceberg now instead of "
        "waiting out emulator.iceberg_lag_s (refused against another Iceberg REST catalog).",
    )


EmulatorMode = Literal["in_process", "daemon"]
SHARED_EMULATOR_MODE: EmulatorMode = "daemon"
"""The embedded default of every entry point (Dagster, Airflow, the CLI): their work runs in several
processes, one after or beside the other, and only one process may hold a warehouse, so they all share
the warehouse's one emulator process (``zerobus-orch readback`` right after a run reuses it)."""


class FederationPolicy(_Model):
    """An OAuth token federation policy of the emulator's token endpoint (RFC 8693 token exchange).

    As on Databricks, a JWT from an external identity provider is exchanged for a Zerobus token when it
    is signed by one of the policy's keys and carries its issuer, an accepted audience and (for a
    service principal's policy) its subject. See docs/adr/0003-emulator-fidelity-limits.md.
    """

    issuer: str = Field(description="The IdP's issuer URL; the subject token's `iss` must equal it.")
    audiences: list[str] = Field(
        min_length=1, description="Accepted `aud` values; the subject token must carry one of them."
    )
    subject: str | None = Field(
        None, description="The required subject (`subject_claim` value); unset: any subject (account-level)."
    )
    subject_claim: str = Field("sub", description="The claim holding the subject.")
    client_id: str | None = Field(
        None,
        description="Workload identity federation: the service principal the policy belongs to (the SDK's "
        "FederatedToken databricks_client_id); unset: an account-level policy (requests without client_id).",
    )
    jwks_json: str = Field(
        description="The IdP's public keys as a JWKS JSON document (RS256 keys); the emulator fetches none."
    )

    @model_validator(mode="after")
    def _keys(self) -> FederationPolicy:
        try:
            keys = json.loads(self.jwks_json)["keys"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"jwks_json must be a JWKS document {{'keys': [...]}}: {exc}") from exc
        if not isinstance(keys, list) or not keys:
            raise ValueError("jwks_json holds no keys")
        return self


class EmulatorConfig(_Model):
    """The local Zerobus emulator: the embedded default (no endpoint) and ``zerobus-orch serve``."""

    mode: EmulatorMode = Field(
        "in_process",
        description="in_process: each process starts its own emulator (one process per warehouse at a "
        "time); daemon: processes share one local emulator process per warehouse, started on demand.",
    )
    idle_shutdown_s: float = Field(
        300.0, gt=0, description="daemon mode: the shared emulator exits after this long with no client."
    )
    daemon_start_timeout_s: float = Field(
        60.0, gt=0, description="daemon mode: how long a client waits for a starting emulator to serve."
    )
    host: str = Field(
        "127.0.0.1", description="Address the emulator's gRPC and HTTP servers listen on and advertise."
    )
    port: int = Field(0, ge=0, le=65535, description="gRPC port; 0 picks a free one.")
    token_port: int = Field(0, ge=0, le=65535, description="OAuth/Iceberg REST HTTP port; 0 picks one.")
    time_to_table_s: float = Field(
        1.0, gt=0, description="How often the materialiser commits the write-ahead log to the Delta tables."
    )
    iceberg_lag_s: float = Field(
        2.0, ge=0, description="Delay after a Delta commit before its Iceberg mirror (emulated UniForm lag)."
    )
    per_stream_mb_s: float | None = Field(
        None, gt=0, description="Throttle on each stream's MB/s, like the service's quota (unset: none)."
    )
    max_streams_per_table: int | None = Field(
        None,
        ge=1,
        description="Streams one table may have open at once; one more is refused with RESOURCE_EXHAUSTED "
        "(unset: no limit).",
    )
    token_ttl_s: int = Field(3600, gt=0, description="Lifetime of the OAuth tokens the emulator issues.")
    client_id: str = Field("zerobus-local", description="The emulator's OAuth client id.")
    client_secret: SecretStr = Field(
        SecretStr("zerobus-local-secret"),
        description="Emulator OAuth client secret; left at this default, a per-warehouse secret is "
        "generated into the state folder (owner-only) and used instead, by zerobus-orch serve too (unless "
        "--insecure-well-known-secret).",
    )
    faults_enabled: bool = Field(
        False, description="Let POST /_emulator/faults arm fault injection (tests only; off: HTTP 403)."
    )
    federation_policies: list[FederationPolicy] = Field(
        default_factory=list,
        description="Token federation policies: the token endpoint exchanges an IdP JWT matching one "
        "(RFC 8693, the SDK's FederatedToken); none: token exchange is refused.",
    )


class CredentialVendingConfig(_Model):
    """Per-table, short-lived READ credentials for read-back on an embedded ``s3://`` warehouse.

    The emulator's Iceberg REST facade vends them in each load-table response (STS ``AssumeRole`` of the
    table's ``-ro`` role, see ``catalog.s3_vending``), so readers never hold the warehouse's own keys.
    The table roles are provisioned once by an administrator (``S3TableRoleProvisioner``).
    """

    enabled: bool = Field(False, description="Vend per-table READ credentials through the Iceberg facade.")
    account_id: str | None = Field(None, description="AWS account id owning the table roles.")
    access_key_id: SecretStr | None = Field(
        None, description="Vendor principal (needs only sts:AssumeRole); unset: default AWS credential chain."
    )
    secret_access_key: SecretStr | None = Field(None, description="Vendor principal secret.")
    sts_endpoint_url: str | None = Field(
        None, description="STS endpoint; default the warehouse's AWS_ENDPOINT_URL (e.g. moto), else AWS."
    )
    region: str | None = Field(None, description="Region; default the warehouse's AWS_REGION.")
    duration_s: int = Field(900, ge=900, le=43_200, description="Lifetime of vended credentials (STS).")
    refresh_margin_s: float = Field(
        120.0, ge=0, description="Re-vend when cached credentials are this close to expiring."
    )

    @model_validator(mode="after")
    def _complete(self) -> CredentialVendingConfig:
        if self.enabled and not self.account_id:
            raise ValueError("credential vending needs account_id (the AWS account owning the table roles)")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("set both access_key_id and secret_access_key, or neither (default chain)")
        return self


class ZerobusConfig(_Model):
    """Root configuration. ``endpoint`` unset selects the embedded emulator (the default)."""

    endpoint: str | None = Field(None, description="Zerobus endpoint; unset runs the embedded emulator.")
    workspace_url: str | None = Field(None, description="Workspace URL (OAuth token endpoint, UC, REST).")
    client_id: str | None = Field(None, description="OAuth M2M service principal client id.")
    client_secret: SecretStr | None = Field(None, description="OAuth M2M service principal secret.")
    connect_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Remote endpoint: at start the runtime asks the endpoint one gRPC question and the token "
        "endpoint for a token, both at once, each bounded by this, and fails naming the URL, the setting "
        "and the cause if either does not answer.",
    )
    warehouse: str = Field(DEFAULT_WAREHOUSE, description="Embedded warehouse folder or s3:// URI.")
    storage_options: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Object store options of an s3:// warehouse, as deltalake takes them (AWS_REGION, "
        "AWS_ENDPOINT_URL, keys); all masked. Keys are case-insensitive and kept upper-case. "
        "Environment: ZEROBUS_STORAGE_OPTIONS__AWS_REGION=...",
    )
    state_dir: str | None = Field(
        None,
        description="Local folder for SQLite state and the emulator WAL (catalog registry, coverage, "
        "Iceberg catalog, wal/); default <warehouse>/_zerobus for a folder warehouse, "
        "./.zerobus/state/<hash of the URI> for an object store (SQLite and fsync need local disk).",
    )
    role: Role = Field(
        Role.PRIMARY_RAW,
        description="Role of a table written without one: primary_raw (append only, its preconditions "
        "re-checked on every write) or derived (may be written with mode replace).",
    )
    pool: PoolConfig = PoolConfig()
    sdk: SdkStreamOptions = SdkStreamOptions()
    catalog: CatalogConfig = CatalogConfig()
    coverage: CoverageConfig = CoverageConfig()
    readback: ReadbackConfig = ReadbackConfig()
    emulator: EmulatorConfig = EmulatorConfig()
    credential_vending: CredentialVendingConfig = CredentialVendingConfig()

    @field_validator("storage_options")
    @classmethod
    def _storage_keys_upper_case(cls, options: dict[str, SecretStr]) -> dict[str, SecretStr]:
        # object_store reads its keys case-insensitively, but ours are compared as written (the S3
        # defaults, the pyiceberg translation): an environment variable arrives lower-cased
        # (aws_region), and a default AWS_REGION beside it would win. One spelling per key.
        canonical: dict[str, SecretStr] = {}
        for key, value in options.items():
            upper = key.upper()
            if upper in canonical:
                raise ValueError(f"storage_options: {key!r} is given twice (keys ignore case); keep one")
            canonical[upper] = value
        return canonical

    @model_validator(mode="after")
    def _urls_are_urls(self) -> ZerobusConfig:
        # An empty variable (``ZEROBUS_WORKSPACE_URL=``, a template that rendered to nothing) would
        # otherwise fail deep in an HTTP client ("unknown url type: '/oidc/v1/token'").
        for name in ("endpoint", "workspace_url"):
            value = getattr(self, name)
            if value is None:
                continue
            scheme, _, rest = value.strip().partition("://")
            if scheme not in ("http", "https") or not rest.strip("/"):
                shown = repr(value) if value.strip() else "empty"
                raise ValueError(
                    f"zerobus.{name} (ZEROBUS_{name.upper()}) is {shown}, not an http(s) URL: give "
                    "https://... (http:// for a local service), or unset it to run embedded"
                )
        return self

    @model_validator(mode="after")
    def _remote_needs_credentials(self) -> ZerobusConfig:
        if self.endpoint is not None:
            missing = [k for k in ("workspace_url", "client_id", "client_secret") if getattr(self, k) is None]
            if missing:
                raise ValueError(f"a remote endpoint also needs {', '.join(missing)}")
        return self

    @model_validator(mode="after")
    def _vending_needs_s3(self) -> ZerobusConfig:
        if self.credential_vending.enabled and not self.warehouse.startswith(("s3://", "s3a://")):
            raise ValueError(
                "credential_vending.enabled needs an s3://<bucket>/<prefix> warehouse, not "
                f"{self.warehouse!r}; disable it for a folder warehouse"
            )
        return self

    @property
    def embedded(self) -> bool:
        return self.endpoint is None

    def with_default_emulator_mode(self, mode: EmulatorMode) -> ZerobusConfig:
        """This config with ``emulator.mode`` = ``mode`` unless a mode was set explicitly (any source).

        Every entry point (Dagster, Airflow, the CLI) passes ``SHARED_EMULATOR_MODE``; the library default
        stays ``in_process`` so a plain script or test keeps its emulator inside the process.
        """
        if not self.embedded or "mode" in self.emulator.model_fields_set:
            return self
        return self.model_copy(update={"emulator": self.emulator.model_copy(update={"mode": mode})})

    @property
    def local_warehouse(self) -> bool:
        return is_local(self.warehouse)

    @property
    def state_path(self) -> str:
        """The local folder for SQLite files and the emulator WAL (``state_dir`` or its default)."""
        if self.state_dir:
            return self.state_dir
        if self.local_warehouse:
            return str(Path(local_path(self.warehouse)) / STATE_DIR_NAME)
        digest = hashlib.sha256(self.warehouse.encode()).hexdigest()[:16]
        return str(Path(DEFAULT_STATE_ROOT) / digest)

    @property
    def coverage_location(self) -> str:
        if self.coverage.location:
            return self.coverage.location
        return str(Path(self.state_path) / "coverage.sqlite")

    def effective_config(self) -> dict[str, Any]:
        """The config as plain data with every secret masked, for logging at start."""
        data = self.model_dump(mode="json")  # SecretStr dumps as "**********"
        data["derived"] = {"streams_per_table": self.pool.streams_for_table(), "embedded": self.embedded}
        return data

    def config_hash(self) -> str:
        """Stable identity of this config, secrets included (hashed), for the per-process registry."""
        import json

        def reveal(value: Any) -> Any:
            if isinstance(value, SecretStr):
                return hashlib.sha256(value.get_secret_value().encode()).hexdigest()
            if isinstance(value, dict):
                return {k: reveal(v) for k, v in value.items()}
            if isinstance(value, list):
                return [reveal(v) for v in value]
            return value

        raw = reveal(self.model_dump(mode="python"))
        return hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode()).hexdigest()[:16]


def nest_keys(flat: Mapping[str, Any], separator: str, *, origin: str) -> dict[str, Any]:
    """``{"pool__min_streams": 2}`` (separator ``__``) -> ``{"pool": {"min_streams": 2}}``.

    ``origin`` names where the keys came from, for the error when one key is a prefix of another.
    """
    tree: dict[str, Any] = {}
    for flat_key, value in flat.items():
        path = [part for part in flat_key.split(separator) if part]
        if not path:
            continue
        node = tree
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{origin}: {flat_key!r} conflicts with another setting")
            node = child
        node[path[-1]] = value
    return tree


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    ours = {
        key[len(ENV_PREFIX) :].lower(): value
        for key, value in environ.items()
        if key.startswith(ENV_PREFIX) and key != ENV_PREFIX and key not in NOT_CONFIG_VARIABLES
    }
    return nest_keys(ours, "__", origin="ZEROBUS_* environment")


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``, merging nested tables rather than replacing them."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# A key whose path contains one of these may hold a secret: its value is never echoed in an error.
_SECRET_MARKERS = ("secret", "token", "password", "key", "credential", "storage_options", "auth")


def _format_validation_error(exc: ValidationError, source: str) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(["zerobus", *(str(p) for p in err["loc"])])
        got = f" (got {err['input']!r})" if _may_echo(err) else ""
        lines.append(f"{key}: {err['msg']}{got}")
    return f"invalid zerobus configuration from {source}:\n  " + "\n  ".join(lines)


def _may_echo(err: Any) -> bool:
    """Whether an invalid value can be shown: never for unknown keys (a mistyped secret's name is
    unknown too) nor for anything that looks like a secret, since the text reaches logs and UIs."""
    if "input" not in err or isinstance(err["input"], dict) or err["type"] == "extra_forbidden":
        return False
    path = ".".join(str(part) for part in err["loc"]).lower()
    return not any(marker in path for marker in _SECRET_MARKERS)


def load_config(
    path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> ZerobusConfig:
    """TOML ``[zerobus]`` table, then ``ZEROBUS_*`` variables, then explicit keyword overrides."""
    data: dict[str, Any] = {}
    sources = []
    if path is not None:
        try:
            with open(path, "rb") as fh:
                document = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read zerobus config {path}: {exc}") from exc
        section = document.get("zerobus", {})
        if not isinstance(section, dict):
            raise ConfigError(f"{path}: [zerobus] must be a table")
        data = section
        sources.append(str(path))
    env = _env_overrides(os.environ if environ is None else environ)
    if env:
        data = deep_merge(data, env)
        sources.append("ZEROBUS_* environment")
    if overrides:
        data = deep_merge(data, {k: v for k, v in overrides.items() if v is not None})
        sources.append("arguments")
    try:
        return ZerobusConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_validation_error(exc, ", ".join(sources) or "defaults")) from None
