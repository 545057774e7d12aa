"""Client connections and sessions: the connection's I/O and codec, the protocol-neutral session, reads, and what
clients may hold and spend (the memory budget, a pass's budget, guessing slowed by source)."""
