"""Dagster quickstart definitions: ``dg dev -m examples.dagster_quickstart.definitions``.

The quickstart itself ships in the wheel as ``dagster_defs.quickstart`` (read it there: assets, contract,
checks and read-back sensor, using only names ``dagster_defs`` exports), so an installed package runs it
with ``dg dev -m dagster_defs.quickstart``; this module keeps the checkout's command working.
"""

from dagster_defs.quickstart import build_definitions, defs

__all__ = ["build_definitions", "defs"]
