"""SASL for clients, as ZooKeeper 3.8 offers it: DIGEST-MD5 (RFC 2831) against server-side users
(ZooKeeper's JAAS ``Server`` section: ``user_NAME="password"`` options of its DigestLoginModule);
the server's side (``DigestMd5Server``) and zabby's client's (``DigestMd5Client``).

A client authenticates with op 102 (``GetSASLRequest(token)`` → ``SetSASLResponse(token)``):

1. an empty token; the server answers its challenge (realm ``zk-sasl-md5``, a fresh nonce,
   ``qop="auth"``, ``algorithm=md5-sess``);
2. the client's response; the server checks it against the user's password and answers
   ``rspauth=...``, proving it knows the password too.  The session then holds the id
   ``("sasl", user)``, which ``sasl:user`` ACL entries match.

Anything else (an unknown user, a wrong digest, a replayed or foreign nonce, a second exchange)
is AUTHFAILED and the connection closes, as ZooKeeper drops it.  Only ``qop=auth``: no
integrity or confidentiality layer (ZooKeeper's clients ask for none).  GSSAPI (Kerberos) is
not offered: a client asking for it fails the same way.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path

REALM = "zk-sasl-md5"  # ZooKeeper's fixed DIGEST-MD5 server name (SecurityUtils), kazoo's host too
SERVICE = "zookeeper"
DIGEST_URI = f"{SERVICE}/{REALM}"
DIGEST_LOGIN_MODULE = "org.apache.zookeeper.server.auth.DigestLoginModule"
RESPONSE_BYTES_MAX = 4096  # RFC 2831: a digest-response is at most 4096 bytes


class SaslFailure(Exception):
    """The exchange failed: the reason, for the server's log (the client is told AUTHFAILED)."""


class JaasError(ValueError):
    """A JAAS configuration that gives no users."""


_ENTRY = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_SECTION = re.compile(r"(\w+)\s*\{(.*?)\}\s*;", re.S)


def jaas_users(text: str, section: str = "Server") -> dict[str, str]:
    """The ``user_NAME="password"`` options of the DigestLoginModule in ``section`` of a JAAS file.

    Raises:
        JaasError: no such section, no DigestLoginModule in it, or no user.
    """
    text = re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
    for name, body in _SECTION.findall(text):
        if name != section:
            continue
        if DIGEST_LOGIN_MODULE not in body:
            raise JaasError(f"JAAS section {section} has no {DIGEST_LOGIN_MODULE} (zabby's SASL is DIGEST-MD5 only)")
        users = {key[5:]: value.replace('\\"', '"').replace("\\\\", "\\") for key, value in _ENTRY.findall(body) if key.startswith("user_")}
        if not users:
            raise JaasError(f"JAAS section {section} names no user_NAME=\"password\"")
        return users
    raise JaasError(f"no JAAS section {section}")


def load_users(path: Path, section: str = "Server") -> dict[str, str]:
    """``jaas_users`` of a file. Raises: JaasError, also for a file that cannot be read."""
    try:
        return jaas_users(path.read_text(), section)
    except OSError as exc:
        raise JaasError(f"{path}: {exc}") from None


def _directives(token: bytes) -> dict[str, str]:
    """RFC 2831's comma-separated ``key=value`` / ``key="value"`` list; a repeated key fails."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslFailure("the response is not UTF-8") from None
    out: dict[str, str] = {}
    pos = 0
    pattern = re.compile(r'\s*([A-Za-z-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,"\s]*))\s*(?:,|$)')
    while pos < len(text):
        match = pattern.match(text, pos)
        if match is None or match.end() == pos:
            raise SaslFailure(f"malformed directive at byte {pos}")
        key = match.group(1).lower()
        if key in out:
            raise SaslFailure(f"directive {key} given twice")
        value = match.group(2)
        out[key] = re.sub(r"\\(.)", r"\1", value) if value is not None else match.group(3)
        pos = match.end()
    return out


def _hex_md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _response_value(user: str, password: str, d: dict[str, str], a2_prefix: str) -> str:
    """RFC 2831 2.1.2.1 with md5-sess: the response (``a2_prefix`` "AUTHENTICATE") or rspauth ("")."""
    secret = hashlib.md5(f"{user}:{d.get('realm', '')}:{password}".encode(), usedforsecurity=False).digest()
    a1 = secret + f":{d['nonce']}:{d['cnonce']}".encode() + (f":{d['authzid']}".encode() if "authzid" in d else b"")
    a2 = f"{a2_prefix}:{d['digest-uri']}".encode()
    return _hex_md5(f"{_hex_md5(a1)}:{d['nonce']}:{d['nc']}:{d['cnonce']}:{d['qop']}:{_hex_md5(a2)}".encode())


@dataclass
class DigestMd5Server:
    """One connection's DIGEST-MD5 exchange; ``user`` is set once it succeeded."""

    users: dict[str, str]
    nonce: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    challenged: bool = False
    user: str | None = None

    def step(self, token: bytes) -> bytes:
        """The next token to send for ``token``.  Raises: SaslFailure (the exchange is over)."""
        if self.user is not None:
            raise SaslFailure("already authenticated on this connection")
        if not self.challenged:
            self.challenged = True
            return f'realm="{REALM}",nonce="{self.nonce}",qop="auth",charset=utf-8,algorithm=md5-sess'.encode()
        if len(token) > RESPONSE_BYTES_MAX:
            raise SaslFailure(f"a response of {len(token)} bytes (at most {RESPONSE_BYTES_MAX})")
        d = _directives(token)
        missing = [key for key in ("username", "nonce", "cnonce", "nc", "response", "digest-uri") if key not in d]
        if missing:
            raise SaslFailure(f"the response lacks {', '.join(missing)}")
        d.setdefault("qop", "auth")
        if d["qop"] != "auth":
            raise SaslFailure(f"qop {d['qop']!r}: only auth is offered")
        if not _same(d["nonce"], self.nonce):
            raise SaslFailure("the response is for another nonce")
        if d["nc"] != "00000001":
            raise SaslFailure(f"nonce count {d['nc']!r}: one response per nonce")
        if d.get("realm", REALM) != REALM or d["digest-uri"] != DIGEST_URI:
            raise SaslFailure(f"realm {d.get('realm')!r} / digest-uri {d['digest-uri']!r}: expected {REALM!r} / {DIGEST_URI!r}")
        user = d["username"]
        if "authzid" in d and d["authzid"] != user:
            raise SaslFailure(f"{user!r} may not act as {d['authzid']!r}")
        password = self.users.get(user)
        expected = _response_value(user, password or "", d, "AUTHENTICATE")
        if not _same(expected, d["response"].lower()) or password is None:  # the same work and answer either way
            raise SaslFailure(f"wrong password, or no such user {user!r}")
        self.user = user
        return f"rspauth={_response_value(user, password, d, '')}".encode()


@dataclass
class DigestMd5Client:
    """zabby's client side of the exchange (kazoo's is pure-sasl's): ``step(b"")`` first."""

    user: str
    password: str
    cnonce: str = field(default_factory=lambda: secrets.token_hex(16))
    _sent: dict[str, str] | None = None
    complete: bool = False

    def step(self, challenge: bytes) -> bytes | None:
        """The token to send for the server's ``challenge`` (None: nothing more to send).
        Raises: SaslFailure for a challenge it cannot answer, or a server that does not prove
        it knows the password."""
        if self._sent is None and not challenge:
            return b""  # DIGEST-MD5 begins with the server's challenge
        if self._sent is None:
            offered = _directives(challenge)
            if "nonce" not in offered or "auth" not in offered.get("qop", "auth").split(","):
                raise SaslFailure("the server's challenge offers no nonce, or no qop=auth")
            d = {"username": self.user, "realm": offered.get("realm", REALM), "nonce": offered["nonce"], "cnonce": self.cnonce,
                 "nc": "00000001", "qop": "auth", "digest-uri": DIGEST_URI}  # fmt: skip
            d["response"] = _response_value(self.user, self.password, d, "AUTHENTICATE")
            self._sent = d
            quoted = ("username", "realm", "nonce", "cnonce", "digest-uri")
            return ",".join(f'{k}="{_quote(v)}"' if k in quoted else f"{k}={v}" for k, v in d.items()).encode() + b",charset=utf-8"
        expected = "rspauth=" + _response_value(self.user, self.password, self._sent, "")
        if not secrets.compare_digest(challenge.decode("utf-8", "replace"), expected):
            raise SaslFailure("the server did not prove it knows the password (rspauth)")
        self.complete = True
        return None


def _same(text: str, expected: str) -> bool:
    """A constant-time comparison of any two strings (``secrets.compare_digest`` raises for a
    non-ASCII one: a response in UTF-8 was refused at once for a user that exists, and after
    the failure delay for one that does not, which told a guesser who exists)."""
    return secrets.compare_digest(text.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
