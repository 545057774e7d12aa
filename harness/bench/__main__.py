"""``python -m harness.bench``: the comparison with ZooKeeper (``harness.bench.cli``)."""

from harness.bench.cli import main

raise SystemExit(main())
