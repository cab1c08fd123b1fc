"""Dagster integration for zerobus-orchestration: resource, IO manager, contract assets, sensor."""
