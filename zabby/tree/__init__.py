"""The replicated state machine: paths, ACLs, txns, the data tree, request preparation.

Pure and deterministic: nothing here reads a clock, a socket, a file or a random number.
"""
