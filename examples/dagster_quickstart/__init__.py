"""Dagster quickstart: a primary-raw ``orders`` table streamed through Zerobus and a derived daily total."""
