"""Coverage: which row positions of a write are delivered, and the content digests that prove it.

``store`` keeps the gap-aware delivered ranges per (table, sink, source, partition) in SQLite, the
same-host cache; ``table_truth`` reads the delivered positions from the raw table itself, the ground
truth every host shares; ``digest`` hashes delivered rows so a resume can check what it skips;
``sqlite_wal`` switches a state file to WAL safely under concurrent first openers.

Empty on purpose: importing the package loads nothing (an Airflow DAG file's parse imports the core).
"""
