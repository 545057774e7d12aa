"""The fixtures ``zabby_server`` and ``zabby_ensemble`` come from zabby's pytest plugin
(``zabby.testing.pytest_plugin``, registered by the ``pytest11`` entry point of pyproject.toml)."""
