"""``Emulator``: the local Zerobus service the official SDK talks to, in-process or in the foreground.

One grpcio server (EphemeralStream + DoPut on one port), one HTTP server (OAuth token endpoint, Iceberg
REST facade, test hooks, and the workspace APIs the production path calls: OIDC discovery, the Unity
Catalog subset and SQL statements over the real Delta tables, see ``emulator/unity``), a WAL per table,
a materialiser to Delta and the Iceberg mirror. Restarting
on the same warehouse replays every WAL: what was acknowledged but not yet in Delta is committed once.
A table whose log cannot be committed is marked failed (``failed_tables``) and refuses streams; the
others keep serving, and ``quarantine`` (or ``zerobus-orch emulator quarantine``) unblocks it.

    with Emulator(warehouse, EmulatorConfig()) as emu:
        sdk = ZerobusSdk(emu.endpoint, emu.workspace_url)
        stream = sdk.create_arrow_stream("main.default.events", schema, emu.client_id, emu.client_secret)
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import grpc
from pydantic import SecretStr

from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.auth import TokenIssuer
from zerobus_orchestration.emulator.errors import EmulatorError, TableFailedError, WalCorruptError
from zerobus_orchestration.emulator.faults import FaultInjector, FaultSpec
from zerobus_orchestration.emulator.federation import FederationVerifier
from zerobus_orchestration.emulator.http_api import ICEBERG_REST_PREFIX, IcebergRest, make_http_server
from zerobus_orchestration.emulator.materializer import Materializer, MirrorHook, TableState, table_exists
from zerobus_orchestration.emulator.private import signing_key
from zerobus_orchestration.emulator.quotas import StreamLimiter
from zerobus_orchestration.emulator.streams import generic_handlers
from zerobus_orchestration.emulator.table_health import TableFailure, describe, quarantine_dest, write_marker
from zerobus_orchestration.emulator.unity.local_cloud import (
    LOCAL_SQL_WAREHOUSE_ID,
    STATE_FILE_NAME,
    local_workspace,
)
from zerobus_orchestration.emulator.unity.metastore import DEFAULT_CATALOG
from zerobus_orchestration.emulator.unity.workspace import UnityWorkspace
from zerobus_orchestration.emulator.wal import table_of_wal_dir, wal_dir_name
from zerobus_orchestration.emulator.wire_casts import WireCasts
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.locations import is_local, local_path
from zerobus_orchestration.owner_only import open_private, private_dir
from zerobus_orchestration.tables import TableName, table_uri, zerobus_dir

if TYPE_CHECKING:  # the facade (and pyiceberg) load only when the mirror starts
    from zerobus_orchestration.emulator.iceberg_rest import TableCredentialSource

log = logging.getLogger(__name__)

# Above the SDK's 10 MiB per-call limit (and arrow-rs' ~2 MiB Flight frames), with headroom.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_WORKERS = 512  # sync grpcio holds one worker per open bidi stream


def default_wal_dir(warehouse: str) -> Path:
    """``<warehouse>/_zerobus/wal`` for a local warehouse; for an object store (no fsync there) a local
    folder keyed by the warehouse URI, ``~/.zerobus/wal/<sha256(uri)[:16]>``."""
    if is_local(warehouse):
        return Path(zerobus_dir(str(Path(local_path(warehouse))))) / "wal"
    digest = hashlib.sha256(warehouse.encode()).hexdigest()[:16]
    return Path.home() / ".zerobus" / "wal" / digest


def default_unity_state(warehouse: str, wal_root: Path) -> Path:
    """Beside the WAL folder (in the warehouse's local state); inside it for the per-URI default of an
    object store, whose parent folder all such warehouses share."""
    if not is_local(warehouse) and wal_root == default_wal_dir(warehouse):
        return wal_root / STATE_FILE_NAME
    return wal_root.parent / STATE_FILE_NAME


class Emulator:
    """The local Zerobus service. Not started until ``start()`` (or ``with``)."""

    def __init__(
        self,
        warehouse: str,
        config: EmulatorConfig | None = None,
        *,
        faults: Sequence[FaultSpec] = (),
        storage_options: dict[str, str] | None = None,
        wal_dir: str | None = None,
        iceberg: bool = True,
        iceberg_db: str | None = None,
        credentials: TableCredentialSource | None = None,
        max_workers: int = DEFAULT_MAX_WORKERS,
        unity_state: str | None = None,
        catalogs: Sequence[str] = (DEFAULT_CATALOG,),
    ) -> None:
        """``wal_dir`` and ``iceberg_db`` (the mirror's SqlCatalog file) must be on local disk; their
        defaults are ``default_wal_dir`` and ``iceberg_mirror.default_catalog_db``. ``credentials`` makes
        the Iceberg REST facade vend per-table READ credentials instead of the warehouse's own keys.
        ``unity_state`` is the file the local Unity Catalog's records are saved to (default: beside the
        WAL folder, ``default_unity_state``); ``catalogs`` exist in it from the start."""
        self.warehouse = str(warehouse)
        self.config = config or EmulatorConfig()
        self.storage_options = storage_options
        self.wal_root = Path(wal_dir) if wal_dir is not None else default_wal_dir(self.warehouse)
        self.iceberg_db = iceberg_db
        self.credentials = credentials
        default_state = default_unity_state(self.warehouse, self.wal_root)
        self.unity_state = Path(unity_state) if unity_state is not None else default_state
        self._unity: UnityWorkspace | None = None
        self._catalogs = tuple(catalogs)
        self._issuer: TokenIssuer | None = None  # made at start: its signing key is in the WAL folder
        self.limiter = StreamLimiter(self.config.max_streams_per_table)
        self.faults = FaultInjector(list(faults), enabled=self.config.faults_enabled)
        self.per_stream_mb_s = self.config.per_stream_mb_s
        self.wire_casts = WireCasts()  # batches cast as the Arrow Flight server casts them (wire_casts.py)
        self._iceberg_enabled = iceberg
        self._max_workers = max_workers
        self._tables: dict[str, TableState] = {}
        self._tables_lock = threading.Lock()
        # Tables that could not even be opened (a corrupt WAL, an unreadable Delta table); the ones
        # whose records Delta refuses carry their failure on their TableState.
        self._open_failures: dict[str, TableFailure] = {}
        self._mirror: Any = None
        self._facade: IcebergRest | None = None
        self._grpc: grpc.Server | None = None
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._materializer: Materializer | None = None
        self._port = 0
        self._token_port = 0
        self.replayed: dict[str, int] = {}
        self._lock_fd: int | None = None
        self._last_request = time.monotonic()

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> Emulator:
        """Replay the WALs, then serve. A failed start releases whatever it had already started."""
        if self._grpc is not None:
            return self
        try:
            return self._start()
        except BaseException:
            self.stop(grace_s=0)
            raise

    def _start(self) -> Emulator:
        private_dir(self.wal_root)  # acknowledged rows wait here: owner-only
        self._lock_wal_root()
        self._issuer = TokenIssuer(
            self.config.client_id,
            self.config.client_secret,
            self.config.token_ttl_s,
            signing_key(self.wal_root),  # the previous run's key: its tokens stay valid until they expire
            FederationVerifier(self.config.federation_policies) if self.config.federation_policies else None,
        )
        if self._iceberg_enabled:
            self._start_iceberg()
        self._unity = local_workspace(
            self.warehouse,
            self.unity_state,
            storage_options=self.storage_options,
            converted_version=self._converted_version,
            credentials=self.credentials,
            catalogs=self._catalogs,
        )
        self._replay()
        self._materializer = Materializer(self.config.time_to_table_s, self._open_tables, self._mirror_hook())
        self._materializer.start()
        server = grpc.server(
            ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="zerobus-emulator-grpc"),
            handlers=generic_handlers(self),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                ("grpc.so_reuseport", 0),
            ],
        )
        self._grpc = server
        address = f"{self.config.host}:{self.config.port}"
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise EmulatorError(f"cannot bind the gRPC port {address}: {exc}") from exc
        if port == 0:
            raise EmulatorError(f"cannot bind the gRPC port {address} (in use?)")
        server.start()
        self._port = port
        self._http = make_http_server(self.config.host, self.config.token_port, self)
        self._token_port = int(self._http.server_address[1])
        self._http_thread = threading.Thread(
            target=self._http.serve_forever, args=(0.05,), name="zerobus-emulator-http", daemon=True
        )
        self._http_thread.start()
        log.info("zerobus emulator on %s (tokens and Iceberg REST on %s)", self.endpoint, self.workspace_url)
        return self

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving, commit everything acknowledged to Delta, close the WALs."""
        if self._grpc is not None:
            self._grpc.stop(grace_s).wait()
            self._grpc = None
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        if self._materializer is not None:
            self._materializer.stop()
            self._materializer.run_once(final=True)
            self._materializer = None
        if self._mirror is not None:
            self._mirror.stop()
            self._mirror = None
            self._facade = None
        with self._tables_lock:
            for state in self._tables.values():
                state.wal.close()
            self._tables.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def _lock_wal_root(self) -> None:
        """One emulator per WAL folder: a second one would replay (and cut) logs still being written."""
        fd = open_private(self.wal_root / ".lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise EmulatorError(
                f"another emulator is already running on {self.warehouse} (WAL {self.wal_root}): stop it"
            ) from exc
        self._lock_fd = fd

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Block until interrupted (Ctrl-C / SIGTERM handled by the caller), then stop."""
        stop = threading.Event()
        try:
            stop.wait()
        finally:
            self.stop()

    # -- addresses ---------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._port

    @property
    def token_port(self) -> int:
        return self._token_port

    @property
    def endpoint(self) -> str:
        """The Zerobus endpoint for ``ZerobusSdk(host=...)`` (plaintext HTTP/2)."""
        return f"http://{self.config.host}:{self._port}"

    @property
    def workspace_url(self) -> str:
        """What the SDK takes as ``unity_catalog_url`` (it posts to ``/oidc/v1/token`` below it)."""
        return f"http://{self.config.host}:{self._token_port}"

    @property
    def token_url(self) -> str:
        return self.workspace_url

    @property
    def iceberg_rest_uri(self) -> str:
        return self.workspace_url + ICEBERG_REST_PREFIX

    @property
    def client_id(self) -> str:
        return self.config.client_id

    @property
    def sql_warehouse_id(self) -> str:
        """The one SQL warehouse id the workspace URL's Statement Execution API accepts."""
        return LOCAL_SQL_WAREHOUSE_ID

    def unity_workspace(self) -> UnityWorkspace | None:
        """The local Unity Catalog served at ``workspace_url`` (None before ``start``)."""
        return self._unity

    def _converted_version(self, full_name: str) -> int | None:
        mirror = self._mirror
        if mirror is None:
            return None
        version = int(mirror.converted_version(full_name))
        return version if version >= 0 else None

    @property
    def client_secret(self) -> str:
        return self.config.client_secret.get_secret_value()

    # -- tables, tokens, materialisation -------------------------------------------------------------
    @property
    def issuer(self) -> TokenIssuer:
        """The token issuer (from ``start`` on: its signing key is read from the WAL folder)."""
        if self._issuer is None:
            raise EmulatorError("the emulator is not started: it issues and checks tokens once started")
        return self._issuer

    def issue_token(self, table: str | None = None, ttl_s: float | None = None) -> str:
        """A bearer token for ``table`` (None: any table), e.g. for a HeadersProvider."""
        scope = None if table is None else frozenset({TableName.parse(table).full_name})
        return self.issuer.issue(scope, ttl_s)

    def access_token(self) -> SecretStr:
        """A workspace bearer token for this emulator's HTTP side (read-back through Iceberg REST)."""
        return SecretStr(self.issuer.issue())

    def table_state(self, full_name: str) -> TableState | None:
        """The open state of ``full_name``, opening it if its Delta table exists; None if it does not.

        Raises ``TableFailedError`` for a table marked failed because it could not be opened.
        """
        with self._tables_lock:
            state = self._tables.get(full_name)
            if state is not None:
                return state
            failed = self._open_failures.get(full_name)
            if failed is not None:
                raise TableFailedError(failed)
            uri = table_uri(self.warehouse, full_name)
            if not table_exists(uri, self.storage_options):
                return None
            wal_dir = self.wal_root / wal_dir_name(full_name)
            try:
                state = TableState.open(full_name, uri, wal_dir, self.storage_options)
            except WalCorruptError as exc:  # acknowledged records unreadable: an operator must decide
                failure = TableFailure(full_name, "open", describe(exc))
                self._open_failures[full_name] = failure
                write_marker(wal_dir, failure)
                log.error("%s", failure.message())
                raise TableFailedError(failure) from exc
            self._tables[full_name] = state
        if self._mirror is not None:
            self._mirror.watch(full_name, uri)
        return state

    def table_failure(self, full_name: str) -> TableFailure | None:
        """Why ``full_name`` is failed (its streams are refused), or None while it is healthy."""
        with self._tables_lock:
            failed = self._open_failures.get(full_name)
            state = self._tables.get(full_name)
        return failed if failed is not None else (state.failure if state is not None else None)

    def failed_tables(self) -> dict[str, dict[str, Any]]:
        """Every failed table with its cause: WAL to Delta (``wal``) and the Iceberg mirror (``iceberg``)."""
        with self._tables_lock:
            found = {name: f.as_dict() for name, f in self._open_failures.items()}
            found.update({s.full_name: s.failure.as_dict() for s in self._tables.values() if s.failure})
        out: dict[str, dict[str, Any]] = {name: {"wal": failure} for name, failure in found.items()}
        if self._mirror is not None:
            for name, failure in self._mirror.failures().items():
                out.setdefault(name, {})["iceberg"] = failure
        return out

    def quarantine(self, table: str) -> list[dict[str, object]]:
        """Move the records of ``table`` that Delta refuses to the quarantine folder and unblock it.

        What Delta takes is committed; each refused record is kept as an Arrow IPC stream file under
        ``<state>/quarantine/<table>/<time>/``. A failure not about the data is raised; nothing is moved then.
        """
        full_name = TableName.parse(table).full_name
        state = self.table_state(full_name)
        if state is None:
            raise EmulatorError(f"table {full_name} does not exist under {self.warehouse}")
        return state.quarantine(quarantine_dest(self.wal_root, wal_dir_name(full_name)), self._mirror_hook())

    def materialize_now(self, table: str) -> int | None:
        """Commit what is acknowledged for ``table`` to Delta now; the new Delta version or None."""
        full_name = TableName.parse(table).full_name
        state = self.table_state(full_name)
        if state is None:
            raise EmulatorError(f"table {full_name} does not exist under {self.warehouse}")
        return state.materialize(self._mirror_hook())

    def _open_tables(self) -> list[TableState]:
        with self._tables_lock:
            return list(self._tables.values())

    def materialize_all(self) -> dict[str, int | None]:
        """Every healthy table committed now; failed ones are skipped (``failed_tables`` reports them)."""
        with self._tables_lock:
            names = [name for name, state in self._tables.items() if state.failure is None]
        out: dict[str, int | None] = {}
        for name in names:
            try:
                out[name] = self.materialize_now(name)
            except TableFailedError:
                continue  # it failed just now: reported, and the other tables still commit
        return out

    def materialize_for_http(self, table: str | None) -> dict[str, Any]:
        if table:
            return {"table": table, "delta_version": self.materialize_now(table)}
        return {"tables": self.materialize_all()}

    def note_activity(self) -> None:
        """An HTTP request arrived (token, Iceberg REST, health, materialise)."""
        self._last_request = time.monotonic()

    def idle_s(self) -> float:
        """Seconds with no open stream and no HTTP request (0 while any stream is open)."""
        if self.limiter.total_open() > 0:
            return 0.0
        return time.monotonic() - max(self._last_request, self.limiter.last_change)

    def open_streams(self, table: str) -> int:
        return self.limiter.open_streams(TableName.parse(table).full_name)

    def streams_opened(self, table: str) -> int:
        """Streams accepted on ``table`` since start; every rotation or recovery reconnect adds one."""
        return self.limiter.opened_total(TableName.parse(table).full_name)

    # -- Iceberg ------------------------------------------------------------------------------------
    @property
    def mirror(self) -> Any:
        """The ``IcebergMirror`` (None when disabled or not installed)."""
        return self._mirror

    def iceberg_rest(self) -> IcebergRest | None:
        return self._facade

    def _mirror_hook(self) -> MirrorHook | None:
        mirror: MirrorHook | None = self._mirror
        return mirror

    def _start_iceberg(self) -> None:
        try:
            from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
            from zerobus_orchestration.emulator.iceberg_rest import IcebergRestFacade
        except ImportError as exc:
            log.warning("Iceberg mirror unavailable, serving Delta only: %s", exc)
            return
        self._mirror = IcebergMirror(
            self.warehouse, self.config.iceberg_lag_s, self.storage_options, catalog_db=self.iceberg_db
        )
        self._mirror.start()
        self._facade = IcebergRestFacade(self._mirror, credentials=self.credentials)

    # -- replay ---------------------------------------------------------------------------------------
    def _replay(self) -> None:
        """Commit every WAL left by a previous run (acknowledged, maybe not yet in Delta) exactly once.

        A table that cannot be replayed is marked failed (``failed_tables``) and the others still start.
        """
        for directory in sorted(p for p in self.wal_root.iterdir() if p.is_dir()):
            full_name = table_of_wal_dir(directory.name)
            try:
                state = self.table_state(full_name)
            except TableFailedError:
                continue  # recorded and logged
            except (ConfigError, OSError) as exc:
                log.error("cannot reopen WAL %s: %s", directory, exc)
                continue
            except Exception as exc:  # opening one table must not keep the others from serving
                failure = TableFailure(full_name, "open", describe(exc), data_error=False)
                with self._tables_lock:
                    self._open_failures[full_name] = failure
                write_marker(directory, failure)
                log.error("%s", failure.message())
                continue
            if state is None:
                log.error("WAL %s has no Delta table at %s: kept, not replayed", directory, self.warehouse)
                continue
            before = state.committed
            try:
                state.materialize(self._mirror_hook())
            except TableFailedError:
                pass  # marked failed and logged by the table; its streams are refused
            except Exception as exc:  # storage or state: the materialiser retries it with backoff
                log.error("replaying %s failed (WAL kept, retried by the materialiser): %s", full_name, exc)
            self.replayed[full_name] = state.committed - before


def lock_wal_root(wal_root: Path, warehouse: str) -> int:
    """The WAL folder's lock for a process working on it offline (``repair.py``); close it to release.

    The same lock as ``Emulator._lock_wal_root``: refused while an emulator serves the warehouse.
    """
    fd = os.open(wal_root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        raise EmulatorError(
            f"an emulator is running on {warehouse} (it holds the WAL {wal_root}): stop it first (the "
            "shared daemon: `kill -TERM <pid>` with the pid in emulator.json of the state folder, or let it "
            "idle out), then run this again"
        ) from exc
    return fd
