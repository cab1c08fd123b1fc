"""Per-table, per-access S3 credentials through STS, for ``s3://`` warehouses in embedded mode.

Down-scoping is done with one IAM role per (table, access): ``twg-<table>-<hash>-ro`` may list the
bucket and read objects under the table's prefix; ``...-rw`` may also put and delete them there.
``AssumeRole`` session policies are not used: moto never enforces them
(docs/architecture.md#moto-local-s3-and-sts), and a role per table keeps the grant visible in IAM.
Roles are created by an administrator once (``S3TableRoleProvisioner``); the vendor principal only
needs ``sts:AssumeRole`` on them.

Credentials carry STS's ``Expiration``; callers go through ``storage.CredentialCache`` to re-vend
before expiry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import SecretStr

from zerobus_orchestration.catalog.base import Access, VendedCredentials
from zerobus_orchestration.config import ZerobusConfig
from zerobus_orchestration.errors import CatalogError, ConfigError
from zerobus_orchestration.storage import (
    AWS_ALLOW_HTTP,
    AWS_ENDPOINT_URL,
    AWS_REGION,
    DEFAULT_REGION,
    config_storage_options,
    is_s3,
    split_s3_uri,
)
from zerobus_orchestration.tables import TableName, table_uri

ROLE_SUFFIX = {Access.READ: "ro", Access.WRITE: "rw"}
MIN_DURATION_S = 900  # the STS minimum
_SLUG = re.compile(r"[^A-Za-z0-9_-]+")


def role_name(table: str, access: Access) -> str:
    """``twg-<readable table>-<hash8>-ro|rw``; at most 56 characters (IAM allows 64)."""
    full = TableName.parse(table).full_name
    slug = _SLUG.sub("-", full).strip("-")[:40] or "table"
    digest = hashlib.sha256(full.encode()).hexdigest()[:8]
    return f"twg-{slug}-{digest}-{ROLE_SUFFIX[access]}"


def role_arn(account_id: str, table: str, access: Access) -> str:
    return f"arn:aws:iam::{account_id}:role/{role_name(table, access)}"


def table_policy(location: str, access: Access) -> dict[str, Any]:
    """Inline policy for a table role: list the bucket, read (and for WRITE: put/delete) under the prefix."""
    bucket, prefix = split_s3_uri(location)
    objects = f"arn:aws:s3:::{bucket}/{prefix}/*" if prefix else f"arn:aws:s3:::{bucket}/*"
    object_actions = ["s3:GetObject"]
    if access is Access.WRITE:
        object_actions += ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    return {
        "Version": "2012-10-17",
        "Statement": [
            # Listing is bucket-wide: moto evaluates no s3:prefix condition. Object access is the boundary.
            {"Effect": "Allow", "Action": ["s3:ListBucket"], "Resource": [f"arn:aws:s3:::{bucket}"]},
            {"Effect": "Allow", "Action": object_actions, "Resource": [objects]},
        ],
    }


def _trust_policy(principal_arn: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"AWS": principal_arn}, "Action": "sts:AssumeRole"}],
    }


def _table_location(warehouse: str | None, table: str) -> str:
    if warehouse is None or not is_s3(warehouse):
        raise ConfigError(
            f"warehouse {warehouse!r}: S3 credential vending needs an s3://<bucket>/<prefix> warehouse"
        )
    return table_uri(warehouse, table)


@dataclass(frozen=True)
class TableRoles:
    read_arn: str
    write_arn: str


class S3TableRoleProvisioner:
    """Creates (idempotently) the ``-ro`` / ``-rw`` roles of a table. Needs IAM admin rights.

    The table's prefix is ``location`` when given (e.g. a Unity Catalog ``storage_location``), else where
    ``tables.table_uri`` puts it under ``warehouse``.
    """

    def __init__(
        self, iam: Any, *, account_id: str, trusted_principal_arn: str, warehouse: str | None = None
    ) -> None:
        self._iam = iam  # a boto3 IAM client
        self._warehouse = warehouse
        self._account_id = account_id
        self._trusted = trusted_principal_arn

    def provision(self, table: str, location: str | None = None) -> TableRoles:
        prefix = location or _table_location(self._warehouse, table)
        for access in (Access.READ, Access.WRITE):
            name = role_name(table, access)
            # An existing role is kept; re-provisioning refreshes its policy below.
            with contextlib.suppress(self._iam.exceptions.EntityAlreadyExistsException):
                self._iam.create_role(
                    RoleName=name,
                    AssumeRolePolicyDocument=json.dumps(_trust_policy(self._trusted)),
                    Description=f"zerobus-orchestration {access.value} access to {TableName.parse(table)}",
                    MaxSessionDuration=3600,
                )
            self._iam.put_role_policy(
                RoleName=name,
                PolicyName="table-access",
                PolicyDocument=json.dumps(table_policy(prefix, access)),
            )
        return TableRoles(
            read_arn=role_arn(self._account_id, table, Access.READ),
            write_arn=role_arn(self._account_id, table, Access.WRITE),
        )


class S3CredentialVendor:
    """``vend_credentials(table, access)`` by assuming the table's role; a ``storage.CredentialVendor``."""

    def __init__(
        self,
        sts: Any,
        *,
        account_id: str,
        warehouse: str | None = None,
        duration_s: int = MIN_DURATION_S,
        endpoint_url: str | None = None,
        region: str = "us-east-1",
        session_name: str = "zerobus-orchestration",
    ) -> None:
        if not MIN_DURATION_S <= duration_s <= 43_200:
            raise ConfigError(f"S3 credential duration {duration_s}s: STS allows 900 to 43200 seconds")
        if warehouse is not None:
            _table_location(warehouse, "c.s.t")  # validates the warehouse early
        self._sts = sts  # a boto3 STS client authenticated as the vendor principal
        self._warehouse = warehouse
        self._account_id = account_id
        self._duration_s = duration_s
        self._endpoint_url = endpoint_url
        self._region = region
        self._session_name = session_name

    @classmethod
    def from_config(cls, config: ZerobusConfig) -> S3CredentialVendor:
        """The vendor ``zerobus.credential_vending`` describes, over a boto3 STS client.

        STS endpoint and region default to the warehouse's ``AWS_ENDPOINT_URL`` / ``AWS_REGION``, so a
        moto or MinIO warehouse vends from the same server; the vended credentials carry that endpoint.
        """
        try:
            import boto3
        except ImportError as exc:
            raise ConfigError(
                "zerobus.credential_vending needs boto3: pip install 'zerobus-orchestration[s3]'"
            ) from exc
        vending = config.credential_vending
        if not vending.account_id:
            raise ConfigError("zerobus.credential_vending.account_id is not set (the roles' account)")
        storage = config_storage_options(config)
        endpoint = storage.get(AWS_ENDPOINT_URL)
        region = vending.region or storage.get(AWS_REGION, DEFAULT_REGION)
        keys: dict[str, str] = {}
        if vending.access_key_id is not None and vending.secret_access_key is not None:
            keys = {
                "aws_access_key_id": vending.access_key_id.get_secret_value(),
                "aws_secret_access_key": vending.secret_access_key.get_secret_value(),
            }
        sts_endpoint = vending.sts_endpoint_url or endpoint
        sts = boto3.client("sts", endpoint_url=sts_endpoint, region_name=region, **keys)
        return cls(
            sts,
            account_id=vending.account_id,
            warehouse=config.warehouse,
            duration_s=vending.duration_s,
            endpoint_url=endpoint,
            region=region,
        )

    def location(self, table: str) -> str:
        return _table_location(self._warehouse, table)

    def vend_credentials(self, table: str, access: Access) -> VendedCredentials:
        """Credentials for the table under the warehouse (``tables.table_uri``)."""
        return self.vend_at(table, self.location(table), access)

    def vend_at(self, table: str, location: str, access: Access) -> VendedCredentials:
        """Credentials for ``table`` whose data lives at ``location`` (its roles must cover that prefix)."""
        name = TableName.parse(table)
        arn = role_arn(self._account_id, name.full_name, access)
        try:
            response = self._sts.assume_role(
                RoleArn=arn, RoleSessionName=self._session_name, DurationSeconds=self._duration_s
            )
        except Exception as exc:  # botocore ClientError and friends: name the role and the fix
            raise CatalogError(
                f"cannot vend {access.value} credentials for {name}: AssumeRole on {arn} failed ({exc}); "
                "provision the table's roles (S3TableRoleProvisioner.provision) and allow the vendor "
                "principal sts:AssumeRole"
            ) from exc
        creds = response["Credentials"]
        expires = creds["Expiration"]
        if isinstance(expires, str):
            expires = datetime.fromisoformat(expires.replace("Z", "+00:00"))
        options: dict[str, SecretStr] = {
            "AWS_ACCESS_KEY_ID": SecretStr(creds["AccessKeyId"]),
            "AWS_SECRET_ACCESS_KEY": SecretStr(creds["SecretAccessKey"]),
            "AWS_SESSION_TOKEN": SecretStr(creds["SessionToken"]),
            AWS_REGION: SecretStr(self._region),
        }
        if self._endpoint_url:
            options[AWS_ENDPOINT_URL] = SecretStr(self._endpoint_url)
            if self._endpoint_url.startswith("http://"):
                options[AWS_ALLOW_HTTP] = SecretStr("true")
        return VendedCredentials(
            table=name.full_name,
            access=access,
            url=location,
            expires_at=expires if expires.tzinfo else expires.replace(tzinfo=UTC),
            storage_options=options,
        )
