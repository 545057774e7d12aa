"""The pure Zab core: fed ticks and messages, returns Ready; no clock, socket, file, thread or
randomness.  ``Peer`` is the entry point (etcd raft's RawNode analogue)."""
