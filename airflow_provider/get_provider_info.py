"""Provider metadata read by every Airflow process: a pure literal, no imports.

Airflow >= 3.2 reads ``conn-fields`` and ``ui-field-behaviour`` from here without importing the hook.
The new UI stores custom fields in ``Connection.extra`` under their plain names; the hook also accepts
the ``extra__zerobus__<name>`` keys older UIs wrote. The version comes from the installed distribution.
"""

_INTEGRATION = "Databricks Zerobus"


def get_provider_info() -> dict[str, object]:
    return {
        "package-name": "zerobus-orchestration",
        "name": "Zerobus",
        "description": (
            "Write Arrow data into Databricks Delta tables through Zerobus direct-write ingest, reconcile "
            "the target table, check primary-raw preconditions and wait for Iceberg read-back; a local "
            "emulator serves laptop runs."
        ),
        "integrations": [
            {
                "integration-name": _INTEGRATION,
                "external-doc-url": "https://docs.databricks.com/aws/en/ingestion/zerobus-overview",
                "tags": ["service"],
            }
        ],
        "hooks": [{"integration-name": _INTEGRATION, "python-modules": ["airflow_provider.hooks.zerobus"]}],
        "operators": [
            {
                "integration-name": _INTEGRATION,
                "python-modules": ["airflow_provider.operators.ingest", "airflow_provider.operators.catalog"],
            }
        ],
        "sensors": [
            {"integration-name": _INTEGRATION, "python-modules": ["airflow_provider.sensors.readback"]}
        ],
        "triggers": [
            {"integration-name": _INTEGRATION, "python-modules": ["airflow_provider.triggers.readback"]}
        ],
        # The ingest operator's Catalog Explorer link. No "asset-uris": its databricks:// assets use the
        # Databricks provider's scheme, which that provider registers (Airflow accepts unregistered ones).
        "extra-links": ["airflow_provider.operators.links.ZerobusTableLink"],
        "connection-types": [
            {
                "connection-type": "zerobus",
                "hook-class-name": "airflow_provider.hooks.zerobus.ZerobusHook",
                "hook-name": "Zerobus",
                "conn-fields": {
                    "workspace_url": {
                        "label": "Workspace URL",
                        "description": "Databricks workspace URL: OAuth token endpoint, Unity Catalog, "
                        "Iceberg REST. Required with a Zerobus endpoint.",
                        "schema": {"type": ["string", "null"], "format": "url"},
                    },
                    "warehouse_id": {
                        "label": "SQL warehouse ID",
                        "description": "Databricks SQL warehouse that runs table DDL (Unity Catalog).",
                        "schema": {"type": ["string", "null"]},
                    },
                    "embedded": {
                        "label": "Embedded emulator",
                        "description": "Use the local Zerobus emulator (by default one shared background "
                        "process per warehouse) instead of Databricks; leave Host empty with it. A "
                        "connection with no Host and no credentials also selects it; one with credentials "
                        "but no Host is refused.",
                        # No default: an unset flag must stay unset, so an untouched form never says false.
                        "schema": {"type": ["boolean", "null"]},
                    },
                    "warehouse": {
                        "label": "Warehouse path",
                        "description": "Embedded mode: folder or s3:// URI of the local warehouse "
                        "(Delta tables, coverage, Iceberg mirror).",
                        "schema": {"type": ["string", "null"]},
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port"],
                    "relabeling": {
                        "host": "Zerobus endpoint",
                        "login": "OAuth client ID",
                        "password": "OAuth client secret",
                    },
                    "placeholders": {
                        "host": "https://<workspace-id>.zerobus.<region>.cloud.databricks.com",
                        "login": "service principal application id",
                        "workspace_url": "https://<workspace>.cloud.databricks.com",
                        "warehouse": "/data/zerobus-warehouse",
                    },
                },
            }
        ],
    }
