"""Token federation (RFC 8693): the official SDK's ``FederatedToken`` exchanges an IdP JWT at the emulator.

The emulator used to answer every token exchange with 401, so ``FederatedToken`` could not be tried
locally. With a federation policy configured (issuer, audiences, subject, the IdP's JWKS) the SDK's
exchange succeeds for a JWT the policy admits, in both modes (workload identity federation with the
service principal's ``client_id``, and account-level without), and every other subject token is
refused with a 4xx the SDK does not retry. The IdP here is an RSA key made by the test.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from zerobus import FederatedToken
from zerobus.sdk.shared import NonRetriableException, TableProperties

from tests.support.emulator_helpers import TABLE, read_table, row_options, sdk_for
from zerobus_orchestration.config import EmulatorConfig, FederationPolicy
from zerobus_orchestration.emulator.server import Emulator

pytestmark = pytest.mark.integration

ISSUER = "https://idp.example.test/tenant"
AUDIENCE = "api://databricks-federation"
SP = "7c1d0ef2-0000-4000-8000-00000000c11d"  # the service principal's application id
SUBJECT = "ci-runner@example.test"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Idp:
    """An identity provider: one RSA key, its JWKS, and JWTs signed with it."""

    def __init__(self, kid: str = "key-1") -> None:
        self.kid = kid
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def jwks(self) -> str:
        numbers = self.key.public_key().public_numbers()

        def b64int(value: int) -> str:
            return _b64(value.to_bytes((value.bit_length() + 7) // 8, "big"))

        key = {"kty": "RSA", "kid": self.kid, "alg": "RS256", "n": b64int(numbers.n), "e": b64int(numbers.e)}
        return json.dumps({"keys": [key]})

    def jwt(self, alg: str = "RS256", **overrides: Any) -> str:
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": SUBJECT,
            "exp": time.time() + 600,
            "iat": time.time(),
        }
        claims.update(overrides)
        claims = {k: v for k, v in claims.items() if v is not None}
        header = _b64(json.dumps({"alg": alg, "kid": self.kid, "typ": "JWT"}).encode())
        body = _b64(json.dumps(claims).encode())
        signature = self.key.sign(f"{header}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{header}.{body}.{_b64(signature)}"


@pytest.fixture
def idp() -> Idp:
    return Idp()


@pytest.fixture
def federated(warehouse: Path, idp: Idp) -> Iterator[Emulator]:
    policies = [
        FederationPolicy(
            issuer=ISSUER, audiences=[AUDIENCE], subject=SUBJECT, client_id=SP, jwks_json=idp.jwks()
        ),
        FederationPolicy(issuer=ISSUER, audiences=[AUDIENCE], jwks_json=idp.jwks()),  # account-level
    ]
    config = EmulatorConfig(time_to_table_s=0.2, iceberg_lag_s=0.0, federation_policies=policies)
    with Emulator(str(warehouse), config, iceberg=False) as emu:
        yield emu


def exchange(emu: Emulator, subject_token: str, client_id: str | None = SP) -> tuple[int, dict[str, Any]]:
    """The request ``fetch_exchanged_token`` (rust/sdk/src/default_token_factory.rs) sends."""
    form = {
        "scope": "all-apis",
        "resource": "api://databricks/workspaces/127/zerobusDirectWriteApi",
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": subject_token,
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
    }
    if client_id is not None:
        form["client_id"] = client_id
    request = urllib.request.Request(emu.token_url + "/oidc/v1/token", data=urlencode(form).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize("client_id", [SP, None], ids=["workload identity federation", "account-level"])
def test_the_sdk_writes_with_a_federated_token(
    federated: Emulator, warehouse: Path, idp: Idp, client_id: str | None
) -> None:
    supplied: list[str] = []

    def supplier() -> str:
        supplied.append(idp.jwt())
        return supplied[-1]

    stream = sdk_for(federated).create_stream(
        table_properties=TableProperties(TABLE),
        options=row_options(),
        auth=FederatedToken(idp_token_supplier=supplier, databricks_client_id=client_id),
    )
    stream.wait_for_offset(stream.ingest_records_offset([{"id": 1}, {"id": 2}]))
    stream.close()
    assert supplied, "the SDK never asked for the IdP token: it did not exchange one"
    federated.materialize_now(TABLE)
    assert sorted(read_table(warehouse).column("id").to_pylist()) == [1, 2]


def test_the_exchanged_token_is_scoped_and_lives_no_longer_than_its_subject(
    federated: Emulator, idp: Idp
) -> None:
    status, body = exchange(federated, idp.jwt(exp=time.time() + 90))
    assert status == 200, body
    assert body["token_type"] == "Bearer" and 0 < body["expires_in"] <= 90
    federated.issuer.authorize(f"Bearer {body['access_token']}", TABLE)


@pytest.mark.parametrize(
    ("token", "refusal"),
    [
        (lambda idp: Idp(idp.kid).jwt(), "signature does not verify"),  # same kid, another key
        (lambda idp: idp.jwt(exp=time.time() - 1), "expired"),
        (lambda idp: idp.jwt(nbf=time.time() + 300), "not valid yet"),
        (lambda idp: idp.jwt(aud="api://someone-else"), "audience"),
        (lambda idp: idp.jwt(iss="https://evil.example.test"), "no federation policy"),
        (lambda idp: idp.jwt(sub="intruder@example.test"), "subject 'intruder@example.test'"),
        (lambda idp: idp.jwt(alg="HS256"), "RS256 only"),
        (lambda idp: idp.jwt()[:-8] + "AAAAAAAA", "signature does not verify"),
        (lambda idp: "not-a-jwt", "not a JWT"),
    ],
    ids=["other key", "expired", "nbf", "audience", "issuer", "subject", "alg", "tampered", "garbage"],
)
def test_a_subject_token_the_policy_does_not_admit_is_refused(
    federated: Emulator, idp: Idp, token: Any, refusal: str
) -> None:
    status, body = exchange(federated, token(idp))
    assert status == 400 and body["error"] == "invalid_grant"
    assert refusal in body["error_description"]


def test_the_sdk_gives_up_on_a_refused_subject_token(federated: Emulator, idp: Idp) -> None:
    with pytest.raises(NonRetriableException):
        sdk_for(federated).create_stream(
            table_properties=TableProperties(TABLE),
            options=row_options(),
            auth=FederatedToken(
                idp_token_supplier=lambda: idp.jwt(exp=time.time() - 5), databricks_client_id=SP
            ),
        )


def test_without_a_policy_token_exchange_is_refused_with_the_setting_to_change(
    emulator: Emulator, idp: Idp
) -> None:
    status, body = exchange(emulator, idp.jwt())
    assert status == 400 and body["error"] == "unsupported_grant_type"
    assert "zerobus.emulator.federation_policies" in body["error_description"]
