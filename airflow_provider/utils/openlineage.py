"""OpenLineage facets of an ingest run, built only when ``apache-airflow-providers-openlineage`` is there.

The provider is optional: Airflow calls ``get_openlineage_facets_on_complete`` only from the
OpenLineage listener, which that provider installs. Every OpenLineage import is therefore inside a
function, and a failure to name a dataset becomes an ``extractionError`` run facet instead of an
exception (lineage never fails a task), as the Databricks provider's operators do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from airflow_provider.utils.lineage import WriteLineage, columns_of

log = logging.getLogger(__name__)


def operator_lineage(lineage: WriteLineage, sql_inputs: list[Any] | None = None) -> Any:
    """``OperatorLineage`` (inputs, the output table with schema and statistics facets, errors)."""
    from airflow.providers.common.compat.openlineage.facet import (
        Dataset,
        Error,
        ExtractionErrorRunFacet,
        OutputDataset,
        OutputStatisticsOutputDatasetFacet,
        SchemaDatasetFacet,
        SchemaDatasetFacetFields,
    )
    from airflow.providers.openlineage.extractors import OperatorLineage  # type: ignore[import-not-found]

    inputs: list[Any] = [Dataset(namespace=d.namespace, name=d.name) for d in lineage.inputs]
    inputs += sql_inputs or []
    outputs: list[Any] = []
    if lineage.output is not None:
        dataset_facets: dict[str, Any] = {}
        if lineage.schema is not None:
            fields = [
                SchemaDatasetFacetFields(name=c.name, type=c.type, description=c.description)
                for c in columns_of(lineage.schema, lineage.descriptions)
            ]
            dataset_facets["schema"] = SchemaDatasetFacet(fields=fields)
        output_facets: dict[str, Any] = {}
        if lineage.rows_written is not None:
            output_facets["outputStatistics"] = OutputStatisticsOutputDatasetFacet(
                rowCount=lineage.rows_written, size=lineage.bytes_written
            )
        outputs.append(
            OutputDataset(
                namespace=lineage.output.namespace,
                name=lineage.output.dataset_name,
                facets=dataset_facets,
                outputFacets=output_facets,
            )
        )
    run_facets: dict[str, Any] = {}
    if lineage.errors:
        run_facets["extractionError"] = ExtractionErrorRunFacet(
            totalTasks=1,
            failedTasks=len(lineage.errors),
            errors=[
                Error(errorMessage=e, stackTrace=None, task=None, taskNumber=None) for e in lineage.errors
            ],
        )
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets)


def sql_input_datasets(make_hook: Callable[[], Any], sql: str, lineage: WriteLineage) -> list[Any]:
    """The tables ``sql`` reads, parsed like common-sql operators do; ``[]`` when the hook's database
    gives no OpenLineage information (e.g. SQLite). A failure is kept as an extraction error."""
    try:
        from airflow.providers.openlineage.sqlparser import SQLParser  # type: ignore[import-not-found]

        hook = make_hook()
        connection = hook.get_connection(getattr(hook, hook.conn_name_attr))
        database_info = hook.get_openlineage_database_info(connection)
        if database_info is None:
            log.debug("%s gives no OpenLineage database info: SQL inputs unknown", type(hook).__name__)
            return []
        parser = SQLParser(
            dialect=hook.get_openlineage_database_dialect(connection),
            default_schema=hook.get_openlineage_default_schema(),
        )
        metadata = parser.generate_openlineage_metadata_from_sql(
            sql=sql, hook=hook, database_info=database_info, use_connection=False
        )
        return list(metadata.inputs)
    except Exception as exc:  # lineage is best effort: the task already succeeded
        lineage.errors.append(f"could not name the SQL source's tables: {type(exc).__name__}: {exc}")
        return []
