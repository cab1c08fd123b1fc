"""Provider metadata read by every Airflow process: a pure literal, no imports."""


def get_provider_info() -> dict[str, object]:
    return {
        "package-name": "zerobus-orchestration",
        "name": "Zerobus",
        "description": "Write into Databricks Delta tables through Zerobus direct-write ingest.",
    }
