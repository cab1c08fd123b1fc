"""Airflow-free helpers: connection mapping, sources, schemas, read-back judgement, log summaries."""
