"""Differential testing against Apache ZooKeeper 3.8: the same seeded random operations
through kazoo to both systems, every answer, Stat and watch event compared.

``workload`` picks the ops, ``execute`` runs them (``kazoo_ops`` carries the ops kazoo has
no method for), ``compare`` normalizes and compares, ``runner`` drives seeds, ``servers``
starts both systems and ``known`` lists the differences the workload steers around.  Used by
``tests/differential`` and ``scripts/diff_zookeeper.py``; it needs kazoo (a test
dependency), and nothing of the server imports it.
"""
