"""The runtime: the write facade and what composes it for one process.

``facade.ZerobusRuntime`` is the write path (catalog, resume, sink, replace, read-back); ``registry``
hands a process its one runtime per config (``acquire_runtime``) over ``process_registry``;
``readback_service`` is the read-only read-back; ``supersede`` the ``replace`` step; ``results`` what a
write reports; ``embedded`` the one way into the local emulator.

Empty on purpose: library users import ``ZerobusRuntime`` and ``WriteResult`` from the package root, and
importing this package loads nothing (an Airflow DAG file's parse imports the core).
"""
