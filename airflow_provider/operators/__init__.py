"""Ingest, reconcile and primary-raw check operators; thin adapters over ``ZerobusHook``."""
