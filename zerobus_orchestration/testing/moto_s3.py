"""A moto S3/IAM/STS server in its own process, bootstrapped for per-table credential vending tests.

Why a separate process: deltalake's Rust HTTP client bypasses botocore, so moto must run as a server;
and moto's IAM enforcement switch (``INITIAL_NO_AUTH_ACTION_COUNT``, toggled here through moto's
``/moto-api/reset-auth``) is process-global, so enforcing it in the test process would also enforce it
on every other moto user there. The child runs ``ThreadedMotoServer(ip_address="127.0.0.1", port=0)``.

``bootstrap_lab`` makes, with enforcement off: a bucket, an ``admin`` user (``*`` on ``*``) and a
``vendor`` user (``sts:AssumeRole`` only), each with an access key; then turns enforcement on.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from typing import IO, Any

from zerobus_orchestration.catalog.base import Access
from zerobus_orchestration.emulator.unity.state import FakeTable
from zerobus_orchestration.storage import reveal, s3_options
from zerobus_orchestration.testing.uc_fake import IssuedCredentials

ACCOUNT_ID = "123456789012"  # moto's default account
REGION = "us-east-1"
START_TIMEOUT_S = 60.0

_CHILD = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print("PORT", server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # the parent closes stdin to stop us
server.stop()
"""


class MotoServer:
    """``with MotoServer() as moto: moto.endpoint``; ``enforce_iam(True)`` after bootstrap."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self.port = 0

    def start(self) -> MotoServer:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and "proxy" not in k.lower()}
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        stdout: IO[str] | None = self._proc.stdout
        ready = select.select([stdout], [], [], START_TIMEOUT_S)[0] if stdout is not None else []
        line = stdout.readline() if stdout is not None and ready else ""
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"moto server did not start (got {line!r})")
        self.port = int(line.split()[1])
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def enforce_iam(self, enforce: bool) -> None:
        """From now on, check every request's signature and IAM policies (or stop checking)."""
        body = b"0" if enforce else b"inf"
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=body,
            method="POST",
            headers={"Content-Type": "text/plain"},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=10) as response:
            json.loads(response.read())

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class AccessKey:
    access_key_id: str
    secret_access_key: str


@dataclass(frozen=True)
class S3Lab:
    """A bootstrapped moto account: bucket plus admin and vendor principals."""

    endpoint: str
    bucket: str
    admin: AccessKey
    vendor: AccessKey
    vendor_arn: str
    account_id: str = ACCOUNT_ID
    region: str = REGION

    def client(self, service: str, key: AccessKey | None = None, session_token: str | None = None) -> Any:
        import boto3

        key = key or self.admin
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=key.access_key_id,
            aws_secret_access_key=key.secret_access_key,
            aws_session_token=session_token,
        )

    def admin_options(self) -> dict[str, str]:
        """deltalake options with the admin's keys (bootstrap writes, assertions)."""
        return s3_options(
            endpoint_url=self.endpoint,
            region=self.region,
            access_key_id=self.admin.access_key_id,
            secret_access_key=self.admin.secret_access_key,
        )


def _user_with_key(iam: Any, name: str, policy: dict[str, Any]) -> tuple[AccessKey, str]:
    user = iam.create_user(UserName=name)["User"]
    iam.put_user_policy(UserName=name, PolicyName=f"{name}-policy", PolicyDocument=json.dumps(policy))
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return AccessKey(key["AccessKeyId"], key["SecretAccessKey"]), str(user["Arn"])


def bootstrap_lab(server: MotoServer, bucket: str = "lake") -> S3Lab:
    """Bucket, admin and vendor users (enforcement off), then IAM enforcement on."""
    import boto3

    server.enforce_iam(False)
    anyone = {"aws_access_key_id": "bootstrap", "aws_secret_access_key": "bootstrap"}
    s3 = boto3.client("s3", endpoint_url=server.endpoint, region_name=REGION, **anyone)
    iam = boto3.client("iam", endpoint_url=server.endpoint, region_name=REGION, **anyone)
    s3.create_bucket(Bucket=bucket)
    everything = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    assume_only = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Resource": "*"}],
    }
    admin, _ = _user_with_key(iam, "admin", everything)
    vendor, vendor_arn = _user_with_key(iam, "vendor", assume_only)
    server.enforce_iam(True)
    return S3Lab(server.endpoint, bucket, admin, vendor, vendor_arn)


@dataclass(frozen=True)
class MotoStsIssuer:
    """A ``FakeUnityCatalog`` credential issuer vending real moto STS keys for a table's storage location.

    Give the fake ``storage_root=f"s3://{lab.bucket}/<prefix>"`` so its ``storage_location`` values live in
    the lab bucket; each READ vend provisions the table's roles (idempotent) and assumes the ``-ro`` one.
    """

    lab: S3Lab
    duration_s: int = 900

    def issue(self, table: FakeTable, operation: str) -> IssuedCredentials:
        from zerobus_orchestration.catalog.s3_vending import S3CredentialVendor, S3TableRoleProvisioner

        lab = self.lab
        provisioner = S3TableRoleProvisioner(
            lab.client("iam"), account_id=lab.account_id, trusted_principal_arn=lab.vendor_arn
        )
        provisioner.provision(table.full_name, table.storage_location)
        vendor = S3CredentialVendor(
            lab.client("sts", lab.vendor),
            account_id=lab.account_id,
            duration_s=self.duration_s,
            region=lab.region,
        )
        access = Access.WRITE if operation == "READ_WRITE" else Access.READ
        creds = vendor.vend_at(table.full_name, table.storage_location, access)
        options = reveal(creds.storage_options)
        return IssuedCredentials(
            access_key_id=options["AWS_ACCESS_KEY_ID"],
            secret_access_key=options["AWS_SECRET_ACCESS_KEY"],
            session_token=options["AWS_SESSION_TOKEN"],
            expiration_ms=int(creds.expires_at.timestamp() * 1000),
        )
