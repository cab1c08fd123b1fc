"""zerobus-orchestration core: sink, pool, ack lane, catalog, coverage, read-back, emulator.

Kept light on import: the Airflow provider imports the core from every Airflow process.
"""

__version__ = "0.1.0"
