"""ACLs: permissions, schemes (world, auth, digest, ip), checks and ZooKeeper's digest.

An ACL entry is the tuple ``(perms, scheme, id)``; a node's ACL is a tuple of entries.  The
ids a session holds are ``(scheme, id)`` pairs: always ``("ip", client_address)``, plus one
``("digest", "user:base64(sha1(user:password))")`` per successful ``addauth digest``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import ipaddress
import re
from collections.abc import Hashable
from typing import Any

from zabby.errors import Err, ZabbyError, shown

READ = 1
WRITE = 2
CREATE = 4
DELETE = 8
ADMIN = 16
ALL = 31

ACL = tuple[int, str, str]
AuthId = tuple[str, str]

OPEN_ACL_UNSAFE: tuple[ACL, ...] = ((ALL, "world", "anyone"),)
READ_ACL_UNSAFE: tuple[ACL, ...] = ((READ, "world", "anyone"),)
CREATOR_ALL_ACL: tuple[ACL, ...] = ((ALL, "auth", ""),)

_PERM_LETTERS = (("r", READ), ("w", WRITE), ("c", CREATE), ("d", DELETE), ("a", ADMIN))


def digest(user: str, password: str) -> str:
    """The digest id ``user:base64(sha1(user:password))``."""
    return generate_digest(f"{user}:{password}")


def generate_digest(credential: str) -> str:
    """ZooKeeper's ``DigestAuthenticationProvider.generateDigest``: what precedes the first
    colon (the whole text if there is none), a colon, and base64 of the whole text's SHA-1."""
    raw = hashlib.sha1(credential.encode()).digest()
    return f"{credential.split(':', 1)[0]}:{base64.b64encode(raw).decode()}"


_last_sized: list[Any] = [None, 0]  # the ACL sized last, and its size: znodes one after another share theirs


def text_bytes(text: str) -> int:
    """``text``'s UTF-8 length (its length, for the ASCII text of nearly every path and id)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def packed_text_bytes(text: str) -> int:
    """What ``text`` packs to (msgpack): its UTF-8 bytes and their header."""
    size = text_bytes(text)
    return size + (1 if size < 32 else 2 if size < 256 else 3 if size < 65536 else 5)


def acl_bytes(acl: tuple[ACL, ...]) -> int:
    """What ``acl`` packs to (msgpack): what a txn, a snapshot record or a SNAP chunk is
    charged for it."""
    if acl is _last_sized[0]:
        return int(_last_sized[1])
    size = 5
    for perms, scheme, ident in acl:  # one loop, no call per entry: a 1 MB multi of fresh ACLs holds 58,000 entries
        scheme_bytes = len(scheme) if scheme.isascii() else text_bytes(scheme)
        ident_bytes = len(ident) if ident.isascii() else text_bytes(ident)
        size += (4 if 0 <= perms < 128 else 8) + scheme_bytes + ident_bytes
        if scheme_bytes >= 32 or ident_bytes >= 32:  # their headers past the 1-byte fixstr
            size += packed_text_bytes(scheme) - scheme_bytes - 1 + packed_text_bytes(ident) - ident_bytes - 1
    _last_sized[0], _last_sized[1] = acl, size
    return size


ACL_ENTRY_BYTES = 120  # what the tree holds for an entry beside its text: its tuple, its place in the ACL, a str object


def acl_cost(acl: tuple[ACL, ...]) -> int:
    """What holding ``acl`` costs the tree, about (``maxTreeBytes``): its packed bytes and each entry's objects."""
    return acl_bytes(acl) + ACL_ENTRY_BYTES * len(acl)


def perms_to_letters(perms: int) -> str:
    return "".join(letter for letter, bit in _PERM_LETTERS if perms & bit)


def letters_to_perms(text: str) -> int:
    perms = 0
    for ch in text:
        bits = dict(_PERM_LETTERS).get(ch)
        if bits is None:
            raise ZabbyError(Err.INVALIDACL, f"unknown permission {shown(ch)} in {shown(text)}")
        perms |= bits
    return perms


def authenticate(scheme: str, credential: bytes) -> AuthId:
    """Turn an ``addauth`` credential into the id it proves, or raise AUTHFAILED.

    Any digest credential proves an id, as in ZooKeeper 3.8: ``blah`` (no colon) proves
    ``digest:blah:base64(sha1(blah))`` and ``:p`` (no user) ``digest::base64(sha1(:p))``."""
    if scheme == "digest":
        return ("digest", generate_digest(credential.decode("utf-8", "replace")))
    raise ZabbyError(Err.AUTHFAILED, f"unsupported auth scheme {shown(scheme)}")


@functools.lru_cache(maxsize=4096)
def _network(pattern: str) -> tuple[int, int, int] | None:
    """An ``ip`` ACL id as (version, network bits, mask), parsed once: an ACL is checked on
    every read and every watch event, and parsing it each time cost 10 µs an entry."""
    try:
        network = ipaddress.ip_network(pattern, strict=False)
    except ValueError:
        return None
    return network.version, int(network.network_address), int(network.netmask)


@functools.lru_cache(maxsize=4096)
def _address(text: str) -> tuple[int, int] | None:
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    return address.version, int(address)


def _ip_matches(pattern: str, address: str) -> bool:
    network, parsed = _network(pattern), _address(address)
    return network is not None and parsed is not None and network[0] == parsed[0] and parsed[1] & network[2] == network[1]


def _id_matches(scheme: str, acl_id: str, auth_ids: list[AuthId]) -> bool:
    if scheme == "world":
        return acl_id == "anyone"
    if scheme == "ip":
        return any(s == "ip" and _ip_matches(acl_id, i) for s, i in auth_ids)
    if scheme == "super":
        return False
    return (scheme, acl_id) in auth_ids


def check(acl: tuple[ACL, ...], perm: int, auth_ids: list[AuthId], superuser: bool = False) -> bool:
    """True if any entry grants ``perm`` to one of ``auth_ids`` (ZooKeeper's ``checkACL``)."""
    if superuser or not acl:
        return True
    for perms, scheme, acl_id in acl:
        if perms & perm:
            if scheme == "world":
                if acl_id == "anyone":
                    return True
            elif _id_matches(scheme, acl_id, auth_ids):
                return True
    return False


def _valid_id(scheme: str, acl_id: str) -> bool:
    if scheme == "world":
        return acl_id == "anyone"
    if scheme == "digest":
        # ZooKeeper's DigestAuthenticationProvider.isValid: Java's split(":") has two parts
        # (trailing empty parts dropped, as Java does)
        parts = acl_id.split(":")
        while parts and not parts[-1]:
            parts.pop()
        return len(parts) == 2
    if scheme == "ip":
        if _IPV4_NETWORK.fullmatch(acl_id):  # nearly every ip id: 0.3 µs, where ipaddress takes 4 (a 1 MB multi of
            return True  # ip ACLs stalled the server 0.45 s); anything else, IPv6 included, as ipaddress reads it
        try:
            ipaddress.ip_network(acl_id, strict=False)
            return True
        except ValueError:
            return False
    return False


_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4_NETWORK = re.compile(rf"{_OCTET}(?:\.{_OCTET}){{3}}(?:/(?:3[0-2]|[12]?[0-9]))?", re.ASCII)  # what ipaddress takes too


def _valid_entry(scheme: str, acl_id: str, sasl: bool) -> bool:
    # "sasl" is a scheme only where SASL is configured (ZooKeeper registers its provider then):
    # any id, matched as the SASL user's name
    return _valid_id(scheme, acl_id) or (sasl and scheme == "sasl" and bool(acl_id))


_FIXED_CACHE: dict[Any, tuple[ACL, ...]] = {}  # keyed by the ACL as requested (a tuple of tuples)
_FIXED_CACHE_SIZE_MAX = 256
_FIXED_CACHE_ENTRIES_MAX = 16  # larger ACLs are validated each time: the cache holds at most 256 x 16 entries


def fix_acl(acl: object, auth_ids: list[AuthId], *, sasl: bool = False) -> tuple[ACL, ...]:
    """Validate a requested ACL and expand ``auth`` entries (ZooKeeper's ``fixupACL``).

    Raises INVALIDACL for an empty list, an unknown scheme, a malformed id or an ``auth``
    entry on a session with no authenticated id; the permissions are any int, as in ZooKeeper.  ACLs without ``auth`` entries do not depend
    on the caller, so their validated form is cached (most requests repeat a few ACLs).
    """
    if not isinstance(acl, (list, tuple)) or not acl:
        raise ZabbyError(Err.INVALIDACL, "ACL must be a non-empty list")
    try:
        cached = _FIXED_CACHE.get(acl) if acl.__class__ is tuple else None  # as the codec gives it
        key = acl if cached is not None else tuple((p, s, i) for p, s, i in acl)
        cached = cached or _FIXED_CACHE.get(key)
    except (TypeError, ValueError):
        key, cached = None, None
    if cached is not None:
        return cached
    fixed = _fix_acl(acl, auth_ids, sasl)
    if (key is not None and len(_FIXED_CACHE) < _FIXED_CACHE_SIZE_MAX and len(acl) <= _FIXED_CACHE_ENTRIES_MAX
            and not any(e[1] in ("auth", "sasl") for e in acl)):  # fmt: skip
        _FIXED_CACHE[key] = fixed
    return fixed


def validated_before(key: Hashable) -> tuple[ACL, ...] | None:
    """What ``fix_acl`` made of an ACL it validated before and keeps (one with no ``auth`` or
    ``sasl`` entry: the same for every caller), given as a tuple of tuples; None otherwise."""
    return _FIXED_CACHE.get(key)


def _fix_acl(acl: list[object] | tuple[object, ...], auth_ids: list[AuthId], sasl: bool) -> tuple[ACL, ...]:
    out: list[ACL] = []
    for entry in acl:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 3):
            raise ZabbyError(Err.INVALIDACL, f"ACL entry must be [perms, scheme, id]: {shown(entry)}")
        perms, scheme, acl_id = entry
        if not isinstance(perms, int) or not isinstance(scheme, str) or not isinstance(acl_id, str):
            raise ZabbyError(Err.INVALIDACL, f"bad ACL entry {shown(entry)}")
        if not -(2**31) <= perms < 2**31:  # any int, as ZooKeeper keeps: bits beyond ALL grant nothing
            raise ZabbyError(Err.INVALIDACL, f"permissions {perms} in {shown(entry)} are not an int32")
        if scheme == "auth":
            authed = [(s, i) for s, i in auth_ids if s != "ip"]
            if not authed:
                raise ZabbyError(Err.INVALIDACL, "auth scheme needs an authenticated session (addauth)")
            out.extend((perms, s, i) for s, i in authed)
        elif _valid_entry(scheme, acl_id, sasl):
            out.append((perms, scheme, acl_id))
        else:
            raise ZabbyError(Err.INVALIDACL, f"invalid ACL id {scheme}:{acl_id}")
    return tuple(dict.fromkeys(out))
