"""The mirror and the facade over an S3 warehouse (moto server): FileIO keys reach the reader."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from deltalake import write_deltalake
from moto.server import ThreadedMotoServer
from pyiceberg.catalog.rest import RestCatalog

from tests.support.iceberg_helpers import nested_rows
from zerobus_orchestration.emulator.iceberg_mirror import IcebergMirror
from zerobus_orchestration.emulator.iceberg_rest import IcebergRestFacade, serve_facade
from zerobus_orchestration.tables import table_uri

TABLE = "main.sales.orders"


@pytest.fixture
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    ).create_bucket(Bucket="lake")
    yield endpoint
    server.stop()


def test_s3_warehouse_round_trip(s3_endpoint: str, tmp_path: Path) -> None:
    storage = {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_SECRET_ACCESS_KEY": "s",
    }
    warehouse = "s3://lake/wh"
    write_deltalake(table_uri(warehouse, TABLE), nested_rows([0, 1, 2]), storage_options=storage)
    mirror = IcebergMirror(warehouse, lag_s=0.01, storage_options=storage, catalog_db=tmp_path / "ice.sqlite")
    assert mirror.sync_now(TABLE) == 0

    server = serve_facade(IcebergRestFacade(mirror))
    try:
        # The client has no S3 keys of its own: it reads with the ones the facade vends in `config`.
        table = RestCatalog("uc", uri=server.base_url, warehouse="main").load_table("sales.orders")
        assert table.metadata_location.startswith("s3://lake/wh/main/sales/orders/metadata/")
        assert sorted(table.scan().to_arrow().column("_twg_offset").to_pylist()) == [0, 1, 2]
    finally:
        server.close()
