"""The trio shell: sockets, timers, threads and processes live here and nowhere else.

``main`` (the process) and ``node`` (the engine's driver) over four parts: ``clients``
(connections and sessions), ``peering`` (links between servers), ``adminport`` (what operators
see) and ``process`` (what the process needs of the operating system)."""
