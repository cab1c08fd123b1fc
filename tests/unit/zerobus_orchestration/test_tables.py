"""``TableName``: parsed once into parts, folded as Unity Catalog folds, and only names Zerobus can hold.

Regression tests for issue 12 items 4, 5 and 9: a backtick-quoted name landed in another table, names
differing in case became two tables, a 255-character name hung instead of failing, and the catalog
``_zerobus`` collided with the state folder.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zerobus_orchestration.catalog.ddl import quote_table
from zerobus_orchestration.emulator.wal import wal_dir_name
from zerobus_orchestration.errors import ConfigError
from zerobus_orchestration.tables import (
    MAX_NAME_CHARS,
    TableName,
    TableNameError,
    check_embedded_storage,
    table_uri,
)

# Characters that break naive dotted-name handling, plus the ones Zerobus allows.
PART_TEXT = st.text(alphabet=st.sampled_from("aZ9_`. -/\n'\"é"), min_size=0, max_size=8)
LEGAL_PART = st.from_regex(r"[A-Za-z0-9_]{1,12}", fullmatch=True)


def backticked(part: str) -> str:
    return "`" + part.replace("`", "``") + "`"


@settings(max_examples=400)
@given(st.text(alphabet=st.sampled_from("ab_Z9`. \n"), max_size=24))
def test_every_name_the_parser_accepts_round_trips(text: str) -> None:
    try:
        name = TableName.parse(text)
    except ConfigError:
        return
    assert TableName.parse(name.full_name) == name
    assert TableName.parse(quote_table(name)) == name  # the SQL spelling names the same table
    assert name.full_name.count(".") == 2


@settings(max_examples=300)
@given(st.tuples(PART_TEXT, PART_TEXT, PART_TEXT), st.booleans())
def test_parts_are_refused_or_kept_exactly_never_turned_into_another_name(
    parts: tuple[str, str, str], quote_all: bool
) -> None:
    spelled = ".".join(backticked(p) if quote_all or "." in p or "`" in p else p for p in parts)
    if not all(re.fullmatch(r"[A-Za-z0-9_]+", p) for p in parts):
        with pytest.raises(TableNameError):
            TableName.parse(spelled)
        return
    name = TableName.parse(spelled)
    assert (name.catalog, name.schema, name.table) == tuple(p.lower() for p in parts)
    assert TableName.parse(name.full_name) == name


@given(LEGAL_PART, LEGAL_PART, LEGAL_PART)
def test_legal_names_are_folded_to_lower_case(catalog: str, schema: str, table: str) -> None:
    name = TableName(catalog, schema, table)
    assert name.full_name == f"{catalog}.{schema}.{table}".lower()
    assert TableName.parse(f"{catalog}.{schema}.{table}") == name
    assert TableName.parse(f"{catalog.upper()}.{schema}.{table.upper()}") == name


@pytest.mark.parametrize(
    ("spelled", "rule"),
    [
        # A table literally named `victim` once landed in main.raw.victim.
        ("main.raw.```victim```", "contains '`'"),
        # `we``ird` once landed in main.raw.weird.
        ("main.raw.`we``ird`", "contains '`'"),
        # The form the old error message recommended: refused with the rule, not "three parts".
        ("main.raw.`a.b`", "contains a period"),
        ("main.raw.a.b", "three non-empty parts"),
        ("main.raw.`unterminated", "unterminated backtick"),
        ("main.raw.we-ird", "contains '-'"),
        ("main.raw.sp ace", "contains ' '"),
        ("main.raw.a/b", "contains '/'"),
        ("main.raw.new\nline", "contains '\\\\n'"),
        ("main.raw.café", "contains 'é'"),
        ("main..events", "three non-empty parts"),
        ("main.raw.``", "the table part is empty"),
        ("_zerobus.raw.events", "'_zerobus' is reserved"),
        ("_ZeroBus.raw.events", "'_zerobus' is reserved"),
        ("main.raw." + "t" * (MAX_NAME_CHARS + 1), "at most 255 characters"),
    ],
)
def test_names_zerobus_or_unity_cannot_hold_are_refused_with_the_rule(spelled: str, rule: str) -> None:
    with pytest.raises(TableNameError, match=rule) as info:
        TableName.parse(spelled)
    assert isinstance(info.value, ConfigError)  # bad input: the CLI's exit code 2


def test_constructing_parts_directly_is_held_to_the_same_rules() -> None:
    with pytest.raises(TableNameError, match="contains a period"):
        TableName("main", "raw", "a.b")
    with pytest.raises(TableNameError, match="contains '`'"):
        TableName("main", "raw", "`victim`")
    assert TableName("Main", "RAW", "Orders") == TableName.parse("main.raw.orders")


def test_a_backticked_legal_name_is_the_same_table_as_the_plain_one() -> None:
    assert TableName.parse("`main`.`raw`.`victim`") == TableName.parse("main.raw.victim")


def test_case_variants_share_every_key_derived_from_the_name() -> None:
    upper, lower = TableName.parse("main.raw.Orders"), TableName.parse("main.raw.orders")
    assert upper == lower and hash(upper) == hash(lower)
    assert upper.full_name == "main.raw.orders"
    assert table_uri("/wh", "MAIN.Raw.Orders") == table_uri("/wh", lower) == "/wh/main/raw/orders"


def test_255_character_parts_are_unity_legal_but_not_storable_by_the_embedded_warehouse() -> None:
    longest = "t" * MAX_NAME_CHARS
    name = TableName("main", "raw", longest)  # Unity Catalog's limit is per part
    assert len(wal_dir_name(name.full_name)) > 255  # the emulator's WAL folder is named catalog.schema.table
    with pytest.raises(TableNameError, match="write-ahead-log folder") as info:
        check_embedded_storage(name)
    assert "at most 255 bytes" in str(info.value) and "Fix: shorten" in str(info.value)
    fits = "t" * (255 - len("main.raw."))
    check_embedded_storage(TableName("main", "raw", fits))
