"""Sans-I/O codecs: bytes in, messages out; no sockets here."""
