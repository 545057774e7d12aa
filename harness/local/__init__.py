"""What the harnesses and the tests share beyond ``zabby.testing``: Apache ZooKeeper 3.8's
processes (``zookeeper``), link proxies to cut, hold or blackhole (``netproxy``) and the
ensemble behind them (``proxied``), the administrator of local servers (``admin``), raw jute
sessions (``jute_session``), the Java compiler (``javac``) and the backup drill
(``backup_drill``)."""
