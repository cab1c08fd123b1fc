"""RFC 8693 token exchange: an external IdP's JWT for a Zerobus token, as Databricks' token federation does.

What the SDK sends (``fetch_exchanged_token`` in ``rust/sdk/src/default_token_factory.rs`` of
databricks/zerobus-sdk, used by the Python SDK's ``FederatedToken``): ``POST <workspace>/oidc/v1/token``
without HTTP Basic credentials, the form fields of the client-credentials grant (``scope=all-apis``,
``resource``, the table-scoped ``authorization_details``) and ``grant_type=
urn:ietf:params:oauth:grant-type:token-exchange``, ``subject_token=<IdP JWT>``,
``subject_token_type=urn:ietf:params:oauth:token-type:jwt``, plus ``client_id`` for workload identity
federation (a service principal's policy) and none for account-level federation.

What is checked, after Databricks' federation policies
(https://docs.databricks.com/aws/en/dev-tools/auth/oauth-federation): a policy for the request's
``client_id`` (or an account-level one without) whose ``issuer`` is the token's ``iss``; the token's
RS256 signature under one of the policy's keys (by ``kid``); ``exp`` in the future and ``nbf`` (if any)
past, with no clock leeway; an ``aud`` among the policy's audiences; and, when the policy names one,
the subject in its ``subject_claim``. The exchanged token is scoped like a client-credentials token and
expires no later than the subject token. Not reproduced (docs/adr/0003-emulator-fidelity-limits.md):
fetching keys from the issuer (only the policy's ``jwks_json``), algorithms other than RS256, and the
identity lookup behind account-level federation (any subject the policy admits is accepted).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zerobus_orchestration.config import FederationPolicy
from zerobus_orchestration.emulator.errors import TokenRequestError

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
# EMSA-PKCS1-v1_5 DigestInfo prefix for SHA-256 (RFC 8017, section 9.2, note 1).
_SHA256_DIGEST_INFO = bytes.fromhex("3031300d060960864801650304020105000420")


@dataclass(frozen=True)
class Exchanged:
    """A verified subject token: whose it is and until when the exchanged token may live."""

    subject: str
    expires_at: float


def _b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _int(part: str) -> int:
    return int.from_bytes(_b64decode(part), "big")


def rs256_valid(signing_input: bytes, signature: bytes, n: int, e: int) -> bool:
    """RSASSA-PKCS1-v1_5 with SHA-256 (RFC 8017 8.2.2): ``signature`` of ``signing_input`` under (n, e)."""
    size = (n.bit_length() + 7) // 8
    if len(signature) != size:
        return False
    s = int.from_bytes(signature, "big")
    if s >= n:
        return False
    encoded = pow(s, e, n).to_bytes(size, "big")
    digest = _SHA256_DIGEST_INFO + hashlib.sha256(signing_input).digest()
    padding = size - len(digest) - 3
    if padding < 8:
        return False
    expected = b"\x00\x01" + b"\xff" * padding + b"\x00" + digest
    return hmac.compare_digest(encoded, expected)


def _refuse(description: str) -> TokenRequestError:
    # RFC 6749 5.2: a subject token that cannot be honoured is invalid_grant (400); the SDK treats every
    # 4xx as final (InvalidUCTokenError), which is what a refused identity must be.
    return TokenRequestError(400, "invalid_grant", description)


class FederationVerifier:
    def __init__(self, policies: Sequence[FederationPolicy]) -> None:
        self._policies = list(policies)

    def verify(self, form: dict[str, str]) -> Exchanged:
        """The subject token of a token-exchange request, verified; raises ``TokenRequestError``."""
        if form.get("subject_token_type") != JWT_TOKEN_TYPE:
            raise TokenRequestError(400, "invalid_request", f"subject_token_type must be {JWT_TOKEN_TYPE}")
        token = form.get("subject_token") or ""
        try:
            header_part, claims_part, signature_part = token.split(".")
            header = json.loads(_b64decode(header_part))
            claims = json.loads(_b64decode(claims_part))
            signature = _b64decode(signature_part)
        except (ValueError, binascii.Error) as exc:
            raise _refuse(f"subject_token is not a JWT: {exc}") from exc
        if not isinstance(header, dict) or not isinstance(claims, dict):
            raise _refuse("subject_token is not a JWT: header and claims must be JSON objects")
        client_id = form.get("client_id") or None
        policy = self._policy(str(claims.get("iss", "")), client_id)
        if header.get("alg") != "RS256":
            raise _refuse(f"subject_token algorithm {header.get('alg')!r}: the emulator verifies RS256 only")
        key = self._key(policy, header.get("kid"))
        if not rs256_valid(f"{header_part}.{claims_part}".encode(), signature, key[0], key[1]):
            raise _refuse("subject_token signature does not verify with the federation policy's keys")
        return self._claims(policy, claims)

    def _policy(self, issuer: str, client_id: str | None) -> FederationPolicy:
        kind = f"service principal {client_id}" if client_id else "account-level federation"
        for policy in self._policies:
            if policy.client_id == client_id and policy.issuer == issuer:
                return policy
        raise _refuse(f"no federation policy of {kind} trusts issuer {issuer!r}")

    @staticmethod
    def _key(policy: FederationPolicy, kid: Any) -> tuple[int, int]:
        published = json.loads(policy.jwks_json)["keys"]
        keys = [k for k in published if isinstance(k, dict) and k.get("kty") == "RSA"]
        if kid is not None:
            keys = [k for k in keys if k.get("kid") == kid]
        if not keys:
            raise _refuse(f"no RSA key {kid!r} in the federation policy of issuer {policy.issuer!r}")
        try:
            return _int(str(keys[0]["n"])), _int(str(keys[0]["e"]))
        except (KeyError, ValueError, binascii.Error) as exc:
            raise _refuse(f"the federation policy's key {kid!r} is not an RSA JWK: {exc}") from exc

    @staticmethod
    def _claims(policy: FederationPolicy, claims: dict[str, Any]) -> Exchanged:
        now = time.time()
        exp = claims.get("exp")
        if not isinstance(exp, int | float) or isinstance(exp, bool):
            raise _refuse("subject_token has no numeric exp")
        if exp <= now:
            raise _refuse("subject_token expired")
        nbf = claims.get("nbf")
        if isinstance(nbf, int | float) and not isinstance(nbf, bool) and nbf > now:
            raise _refuse("subject_token is not valid yet (nbf)")
        audiences = claims.get("aud")
        given = {audiences} if isinstance(audiences, str) else set(audiences or ())
        if not given & set(policy.audiences):
            raise _refuse(f"subject_token audience {sorted(map(str, given))} is not among the policy's")
        subject = claims.get(policy.subject_claim)
        if not isinstance(subject, str) or not subject:
            raise _refuse(f"subject_token has no {policy.subject_claim!r} claim")
        if policy.subject is not None and subject != policy.subject:
            raise _refuse(f"subject {subject!r} is not the one the federation policy admits")
        return Exchanged(subject, float(exp))
