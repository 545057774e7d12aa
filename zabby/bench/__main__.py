"""``python -m zabby.bench``: the comparison with ZooKeeper (``zabby.bench.cli``)."""

from zabby.bench.cli import main

raise SystemExit(main())
