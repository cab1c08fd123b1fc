"""The documented per-process registry: one refcounted instance per (pid, config), closed at exit.

``runtime.registry`` is its one user: a Dagster step, an Airflow task try or a sensor tick gets the
runtime its process already runs for that config, so streams outlive a step instead of being opened
per batch. The registry knows nothing of what it holds beyond ``close()``; the factory is
handed in, so this module imports no other part of the package.

Correctness never depends on the exit hooks: a write returns only once its last batch is durable.
The hooks (``atexit`` plus ``multiprocessing.util.Finalize``, which also runs in forked children
that leave through ``os._exit``) only drain streams that a caller left unflushed.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing.util
import os
import threading
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from zerobus_orchestration.config import ZerobusConfig

log = logging.getLogger(__name__)


class Closeable(Protocol):
    def close(self) -> None: ...


T = TypeVar("T", bound=Closeable)


class ProcessRegistry(Generic[T]):
    """Instances built by ``factory``, keyed by pid and ``config.config_hash()``, refcounted.

    The pid is in the key because a forked child inherits the dict but not the threads of its
    parent's instances: the child starts its own (``forget_inherited`` also clears them at fork).
    """

    def __init__(self, factory: Callable[[ZerobusConfig], T], *, what: str) -> None:
        self._factory = factory
        self._what = what  # for log lines: "zerobus runtime"
        self._lock = threading.Lock()
        self._entries: dict[tuple[int, str], tuple[T, int]] = {}
        self._hooked_pid: int | None = None
        os.register_at_fork(after_in_child=self.forget_inherited)

    def acquire(self, config: ZerobusConfig) -> T:
        """This process's instance for ``config``, created on first use; refcounted."""
        key = (os.getpid(), config.config_hash())
        with self._lock:
            self._install_exit_hooks()
            entry = self._entries.get(key)
            if entry is None:
                instance = self._factory(config)
                self._entries[key] = (instance, 1)
                return instance
            instance, count = entry
            self._entries[key] = (instance, count + 1)
            return instance

    def running(self, config: ZerobusConfig) -> T | None:
        """This process's instance for ``config`` if one exists; never creates one."""
        with self._lock:
            entry = self._entries.get((os.getpid(), config.config_hash()))
        return None if entry is None else entry[0]

    def release(self, config: ZerobusConfig) -> None:
        """Drop one reference. The instance stays: it is meant to outlive a step, a task try or a tick."""
        key = (os.getpid(), config.config_hash())
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                instance, count = entry
                self._entries[key] = (instance, max(0, count - 1))

    def discard(self, config: ZerobusConfig) -> T | None:
        """Forget this process's instance for ``config`` and return it (the caller closes it)."""
        with self._lock:
            entry = self._entries.pop((os.getpid(), config.config_hash()), None)
        return None if entry is None else entry[0]

    def close_all(self) -> None:
        """Close every instance of this process. Idempotent; safe at exit."""
        pid = os.getpid()
        with self._lock:
            mine = [key for key in self._entries if key[0] == pid]
            instances = [self._entries.pop(key)[0] for key in mine]
        for instance in instances:
            try:
                instance.close()
            except Exception as exc:  # at exit, close every instance rather than stop at the first
                log.error("closing %s: %s", self._what, exc)

    def forget_inherited(self) -> None:
        # A forked child must not touch its parent's streams: their threads do not survive fork.
        self._entries.clear()

    def _install_exit_hooks(self) -> None:
        """Once per process, lazily: ``_bootstrap`` of a forked child clears finalizers it inherited.

        Three hooks, because each exit path runs a different one: ``threading._register_atexit`` runs
        before interpreter shutdown joins thread-pool workers (the embedded emulator's gRPC workers
        block in open streams until the runtime closes them, so plain ``atexit`` would never be
        reached); ``atexit`` covers the main process and spawned children; ``Finalize`` covers
        fork/forkserver children, which leave through ``os._exit``.
        """
        if self._hooked_pid == os.getpid():
            return
        # Those early hooks run newest first, and ``concurrent.futures.thread`` registers its own (join
        # every pool worker) when first imported, which the embedded gRPC server does after this. Import
        # it now, so that hook is older than ours and runs after it: otherwise a plain script hangs at
        # exit, joining gRPC workers blocked in streams only our hook would close.
        import concurrent.futures.thread  # noqa: F401

        register_early = getattr(threading, "_register_atexit", None)
        if register_early is not None:
            with contextlib.suppress(RuntimeError):  # the interpreter is already shutting down
                register_early(self.close_all)
        atexit.register(self.close_all)
        multiprocessing.util.Finalize(None, self.close_all, exitpriority=100)
        self._hooked_pid = os.getpid()
