"""Differential testing against Apache ZooKeeper 3.8: the same seeded random operations
through kazoo to both systems, every answer, Stat and watch event compared.

``workload`` picks the ops, ``execute`` runs them (``kazoo_ops`` carries the ops kazoo has
no method for), ``compare`` normalizes and compares, ``runner`` drives seeds, ``servers``
starts both systems and ``known`` lists the differences the workload steers around.  Used by
``tests/differential`` and ``scripts/diff_zookeeper.py``; it needs kazoo (a test
dependency), and nothing of the server imports it.

The other clients' suites and scenarios (``clients`` and the modules it names: aiozk's and
go-zookeeper's own tests, node-zookeeper-client's and the C client's scenarios, ``xids``'s
recording proxy) run against either system through ``servers.running_system``; used by
``tests/differential/test_other_clients.py`` and ``scripts/client_suites.py``.
"""
