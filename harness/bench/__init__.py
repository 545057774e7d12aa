"""The benchmarks: zabby against Apache ZooKeeper 3.8 on this machine (``python -m harness.bench``;
``harness.bench.cli``), and the smaller ones of zabby alone
(``python -m harness.bench.standalone``, ``.ensemble``, ``.sync``, ``.write_path``).

Every system under test is started through ``zabby.testing`` (``systems``); load comes
from client processes (``runner``: ZkLoad.java, or ``pyload`` run as a module); records
become tables, plots and docs/benchmarks.md (``report``, ``goals``, ``markdown``, ``flame``).
``scripts/bench.py`` and ``scripts/bench_*.py`` are thin entry points to these modules.
"""
