"""Column descriptions and the managed-comment marker.

Two authorities write column comments:

- engine-owned columns (``reserved.py``) always get their fixed built-in descriptions;
- payload columns get the description from an ODCS data contract (``descriptions_from_contract``) or
  an explicit mapping. No source, no payload comment: the live comment is then left alone.

A comment we write is *managed*: the description followed by a marker carrying the first 8 hex digits
of the description's SHA-256, ``"<description> [twg:managed h=<hash8>]"``. The marker lives inside the
comment text, not in separate field metadata, because the comment is the one thing every backend keeps
(delta-rs field metadata ``comment``, Unity ``ColumnInfo.comment``, Iceberg ``doc``).

Re-sync compares hashes: an unchanged description writes nothing. A managed comment whose text no longer
matches its own hash was edited by a human; ``CommentPolicy.RESPECT`` (default) keeps it and reports it,
``RESTORE`` writes the contract's description back.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

from zerobus_orchestration.errors import ConfigError

_MARKER: Final = re.compile(r"^(?P<text>.*) \[twg:managed h=(?P<hash>[0-9a-f]{8})\]$", re.DOTALL)


def comment_hash(description: str) -> str:
    return hashlib.sha256(description.encode("utf-8")).hexdigest()[:8]


def managed_comment(description: str) -> str:
    """The comment text we store for ``description`` (description + ``twg:managed`` marker)."""
    return f"{description} [twg:managed h={comment_hash(description)}]"


class CommentStatus(StrEnum):
    ABSENT = "absent"  # no live comment
    CURRENT = "current"  # managed, intact, hash equals the desired description's hash
    STALE = "stale"  # managed, intact, description changed since: rewrite
    HUMAN_EDITED = "human_edited"  # managed marker present but the text no longer matches its hash
    UNMANAGED = "unmanaged"  # a comment someone else wrote (no marker)


@dataclass(frozen=True)
class ParsedComment:
    text: str
    stored_hash: str | None  # None: no marker

    @property
    def managed(self) -> bool:
        return self.stored_hash is not None

    @property
    def intact(self) -> bool:
        return self.stored_hash is not None and comment_hash(self.text) == self.stored_hash


def parse_comment(comment: str) -> ParsedComment:
    match = _MARKER.match(comment)
    if match is None:
        return ParsedComment(comment, None)
    return ParsedComment(match.group("text"), match.group("hash"))


def comment_status(live_comment: str | None, description: str) -> CommentStatus:
    if not live_comment:
        return CommentStatus.ABSENT
    parsed = parse_comment(live_comment)
    if not parsed.managed:
        return CommentStatus.UNMANAGED
    if not parsed.intact:
        return CommentStatus.HUMAN_EDITED
    return CommentStatus.CURRENT if parsed.stored_hash == comment_hash(description) else CommentStatus.STALE


@dataclass(frozen=True)
class ContractDescriptions:
    """Payload column descriptions plus where they came from (stamped as ``twg.contract.*``)."""

    descriptions: Mapping[str, str]
    contract_uri: str | None = None
    contract_version: str | None = None
    owner: str | None = None


def descriptions_from_mapping(mapping: Mapping[str, str]) -> ContractDescriptions:
    """Explicit descriptions, blank ones dropped (a blank description is no description)."""
    return ContractDescriptions({k: v.strip() for k, v in mapping.items() if v and v.strip()})


def descriptions_from_contract(path: str | Path, schema_object: str | None = None) -> ContractDescriptions:
    """Descriptions of the properties of one ODCS schema object, from a contract YAML file.

    ``schema_object`` picks the object by ``name`` (or ``physicalName``); it may be omitted when the
    contract holds exactly one. Property ``physicalName`` wins over ``name`` as the column name.
    """
    from open_data_contract_standard.model import OpenDataContractStandard

    source = Path(path)
    try:
        contract = OpenDataContractStandard.from_string(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"data contract {source} does not exist") from None
    except Exception as exc:  # pydantic / YAML errors: name the file, keep the parser's message
        raise ConfigError(f"data contract {source} is not a valid ODCS document: {exc}") from exc
    objects: list[Any] = list(contract.schema_ or [])
    if schema_object is not None:
        objects = [o for o in objects if schema_object in (o.name, o.physicalName)]
    if len(objects) != 1:
        available = [o.name for o in contract.schema_ or []]
        raise ConfigError(
            f"data contract {source}: expected one schema object"
            + (f" named {schema_object!r}" if schema_object else "")
            + f", found {len(objects)} (available: {available}); pass the object name"
        )
    descriptions: dict[str, str] = {}
    for prop in objects[0].properties or []:
        column = prop.physicalName or prop.name
        if column and prop.description and prop.description.strip():
            descriptions[column] = prop.description.strip()
    team: Any = contract.team  # a Team, or (older ODCS) a bare list of members without a team name
    owner = getattr(team, "name", None)
    return ContractDescriptions(
        descriptions,
        contract_uri=source.resolve().as_uri(),
        contract_version=contract.version,
        owner=owner,
    )
