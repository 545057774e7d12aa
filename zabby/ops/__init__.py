"""Offline and operator tools behind ``zabby-admin``: snapshot files (status, compare,
restore, save from a live server), txn logs (dump, verify, chop).

Each tool raises an ``AdminError`` subclass whose ``exit_code`` the console script returns
(see ``zabby.cli.admin``); nothing here prints or exits.
"""
