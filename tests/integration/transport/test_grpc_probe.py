"""The endpoint probe's gRPC question against real servers: the emulator (cleartext HTTP/2, as the SDK
speaks to ``http://``), a grpcio server over TLS with a private CA in ``SSL_CERT_FILE`` (as the SDK
speaks to ``https://``), and the things that are not a gRPC endpoint: a silent listener, an HTTP/1.1
server, TLS that is not trusted."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.failure_edges import silent_endpoint
from zerobus_orchestration.config import EmulatorConfig
from zerobus_orchestration.emulator.server import Emulator
from zerobus_orchestration.transport.reachability import ProbeError, reach_endpoint

pytestmark = pytest.mark.integration


def test_the_emulator_answers_over_cleartext_http2(tmp_path: Path) -> None:
    with Emulator(str(tmp_path / "wh"), EmulatorConfig(), iceberg=False) as emu:
        answer = reach_endpoint(emu.endpoint, timeout_s=5)
    assert answer == f"Zerobus endpoint {emu.endpoint} answered the gRPC health check over HTTP/2 (HTTP 200)"


def test_a_silent_listener_is_named_with_the_setting_after_the_timeout() -> None:
    with silent_endpoint() as endpoint:
        started = time.monotonic()
        with pytest.raises(ProbeError) as caught:
            reach_endpoint(endpoint, timeout_s=0.5)
        elapsed = time.monotonic() - started
    assert str(caught.value) == (
        f"Zerobus endpoint {endpoint} (zerobus.endpoint (ZEROBUS_ENDPOINT)) accepted a connection but did not "
        "answer a gRPC request within 0.5 s"
    )
    assert 0.5 <= elapsed < 2.0  # the timeout that acted is the one given


@pytest.fixture
def http1_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_http1_server_is_not_taken_for_a_grpc_endpoint(http1_server: str) -> None:
    with pytest.raises(
        ProbeError, match=r"does not answer gRPC: it (answered HTTP/1\.x|closed the connection)"
    ):
        reach_endpoint(http1_server, timeout_s=5)


def _certificate(directory: Path) -> tuple[bytes, bytes, Path]:
    """A self-signed CA certificate for localhost and 127.0.0.1: (key PEM, cert PEM, the cert's path)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "zerobus-probe-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    path = directory / "ca.pem"
    path.write_bytes(cert_pem)
    return key_pem, cert_pem, path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A grpcio server over TLS with no service at all (every call: UNIMPLEMENTED); yields its
    ``https://localhost:<port>`` URL and the CA file that trusts it."""
    key_pem, cert_pem, ca = _certificate(tmp_path)
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key_pem, cert_pem)]))
    server.start()
    try:
        yield f"https://localhost:{port}", ca
    finally:
        server.stop(0)


def test_a_grpc_server_over_tls_answers_with_its_ca_in_ssl_cert_file(
    tls_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ca = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    assert "answered the gRPC health check over HTTP/2" in reach_endpoint(url, timeout_s=5)


def test_tls_without_the_ca_is_named_as_an_untrusted_certificate(
    tls_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = tls_server
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    with pytest.raises(ProbeError, match=r"its TLS certificate is not trusted .*SSL_CERT_FILE"):
        reach_endpoint(url, timeout_s=5)


def test_https_to_a_cleartext_endpoint_says_so(tmp_path: Path) -> None:
    with Emulator(str(tmp_path / "wh"), EmulatorConfig(), iceberg=False) as emu:
        wrong = emu.endpoint.replace("http://", "https://")
        with pytest.raises(ProbeError, match="TLS handshake failed"):
            reach_endpoint(wrong, timeout_s=5)
