"""Spark/Delta type spellings of the fake: the emulator's, re-exported (see ``emulator/unity/types``)."""

from __future__ import annotations

from zerobus_orchestration.emulator.unity.types import (
    INTEGRAL_RANK,
    contains_ntz,
    decimal_params,
    field_paths,
    parse_type,
    spark_json_type,
    sql_text,
    struct_field_json,
    type_json,
    type_name,
    type_text,
)

__all__ = [
    "INTEGRAL_RANK",
    "contains_ntz",
    "decimal_params",
    "field_paths",
    "parse_type",
    "spark_json_type",
    "sql_text",
    "struct_field_json",
    "type_json",
    "type_name",
    "type_text",
]
