"""The emulator's Unity Catalog: the Databricks REST subset and SQL DDL the ``unity`` backend calls.

``workspace.UnityWorkspace`` holds one workspace (metastore, SQL warehouse statements, vended
credentials); ``routes`` answers HTTP requests from it; ``sql`` runs DDL; ``state`` and ``metastore``
model tables with Databricks' Delta protocol rules. In the emulator ``delta_backing.DeltaBacking`` ties
the metastore to the real Delta tables Zerobus writes (``local_cloud.LocalCloud``); the standalone test
fake (``zerobus_orchestration.testing.FakeUnityCatalog``) uses the same code in memory.
"""
