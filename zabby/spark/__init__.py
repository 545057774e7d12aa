"""zabby.spark: a Kylin-style cube job on PySpark whose metadata lives in zabby.

- ``model``: the metadata documents, the znode layout, the multi ops of a build/merge (pure).
- ``epoch``: one writer per project (ephemeral sequential lock; czxid = fencing token).
- ``metastore``: the MVCC commit loop (one fenced multi per change, retried on BadVersion).
- ``cube``: Spark: the sales fact table, cuboids via groupingSets, HLL distinct counts, merges.
- ``job``: Spark build then atomic metadata commit.
- ``query_node``: a TreeCache mirror answering "which segments are ready" from memory; it
  resumes the watch feed after a reconnect or a restart instead of re-reading.
- ``demo``: the ``zabby-demo`` console script.
- ``scale``: many query nodes over one job: per-step lag and a restarted node's catch-up.

Only ``cube``, ``job`` and ``demo`` import pyspark (the ``spark`` extra).
"""
