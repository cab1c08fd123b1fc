"""The console script's last step: an orderly exit that skips interpreter finalization.

Why: a command that read a table (``readback``, ``repair``, the resume of ``ingest``) can end while one of
Arrow's I/O threads is still tearing down the scan: deltalake hands Arrow the table's files through a
Python filesystem, so those buffers are Python objects, and freeing them takes the GIL. When that thread
asks for the GIL after the interpreter began finalizing, CPython ends the thread with ``pthread_exit``,
whose unwinding through Arrow's C++ destructors calls ``std::terminate``: the process dies with SIGABRT
("terminate called without an active exception") after the command printed its result and succeeded,
and a scheduler records a failed task (apache/arrow#34314, open). Seen with pyarrow 26.0.1: the aborting
thread's stack runs ``arrow::py::PyBuffer::~PyBuffer`` -> ``PyGILState_Ensure`` -> ``PyThread_exit_thread``.
Measured here before this module: 19 aborts in 750 runs of ``repair --dedupe --dry-run``, three at once.

What ``leave`` does is what ``Py_FinalizeEx`` does first, in its order, then ends the process: join the
non-daemon threads (``threading._shutdown``, which also runs threading's early exit hooks: the runtime
closes its streams there, see ``runtime/process_registry.py``), run the ``atexit`` functions (logging's
flush, ``weakref.finalize`` cleanups such as the spool's temporary folder), flush ``stdout`` and
``stderr``, then ``os._exit``. Nothing native is torn down under a thread that still runs.

Only the installed script ends this way (``cli.main.main``); ``cli.errors.run`` still raises
``SystemExit``, so a caller in the same process (tests, an embedding program) keeps its interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn

# CPython's status when flushing stdout fails at exit (a closed pipe): Python/pylifecycle.c.
EXIT_FLUSH_FAILED = 120


def status_of(code: object) -> int:
    """The exit status ``SystemExit(code)`` gives: None is 0, an int itself, anything else printed to
    stderr and 1 (as the interpreter does)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    with contextlib.suppress(OSError, ValueError):  # nowhere left to say it; the status still tells
        sys.stderr.write(f"{code}\n")
    return 1


def leave(code: object) -> NoReturn:
    """End the process with ``SystemExit(code)``'s status, after the exit steps the module docstring
    lists and without finalizing the interpreter."""
    status = status_of(code)
    shutdown_threads = getattr(threading, "_shutdown", None)
    if shutdown_threads is not None:
        shutdown_threads()
    atexit._run_exitfuncs()  # prints any hook's exception and goes on, as the interpreter does
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            if stream is sys.stdout and status == 0:
                status = EXIT_FLUSH_FAILED
    os._exit(status)
