"""Airflow provider for zerobus-orchestration.

Every Airflow process imports this package through the provider entry point, so it imports nothing
heavy: no pyarrow, no dagster, no Zerobus SDK. Hooks, operators and sensors import the core lazily.
"""
