"""Path rules (ZooKeeper's PathUtils.validatePath), sequential names, digests and ACL checks."""

from __future__ import annotations

import base64
import sys
import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zabby.errors import Err, ZabbyError
from zabby.tree import acl as acls
from zabby.tree.paths import ancestors, basename, join, parent_of, sequential_name, validate_path

# ---------------------------------------------------------------- paths

GOOD_PATHS = [
    "/",
    "/a",
    "/a/b/c",
    "/zookeeper",
    "/a.b",
    "/.a",
    "/a.",
    "/...",
    "/a/.../b",
    "/..a",
    "/a..",
    "/ a b ",
    "/ünïcödé/名前",
    "/a-b_c:d@e",
    "/\u00a0",  # just above the C1 control block
    "/\uf900",  # just above the private-use block
    "/\uffef",  # just below the specials block
]

BAD_PATHS = [
    "",
    "a",
    "a/b",
    "/a/",
    "/a/b/",
    "//",
    "//a",
    "/a//b",
    "/.",
    "/..",
    "/a/.",
    "/a/..",
    "/./a",
    "/../a",
    "/a/./b",
    "/a/../b",
    "/a\x00b",
    "/a\x01",
    "/a\x1f",
    "/a\n",
    "/a\x7f",
    "/a\x9f",
    "/a\ud800",
    "/a\ue000",
    "/a\uf8ff",
    "/a\ufff0",
    "/a\uffff",
    "/emoji\U0001F600",  # a surrogate pair in Java's UTF-16, so ZooKeeper rejects it
]


@pytest.mark.parametrize("path", GOOD_PATHS)
def test_good_paths(path: str) -> None:
    validate_path(path)
    validate_path(path, sequential=True)


@pytest.mark.parametrize("path", BAD_PATHS)
def test_bad_paths(path: str) -> None:
    with pytest.raises(ZabbyError) as info:
        validate_path(path)
    assert info.value.code == Err.BADARGUMENTS


@pytest.mark.parametrize("path", [None, b"/a", 5])
def test_non_string_paths(path: object) -> None:
    with pytest.raises(ZabbyError) as info:
        validate_path(path)  # type: ignore[arg-type]
    assert info.value.code == Err.BADARGUMENTS


@pytest.mark.parametrize("path", ["/a/", "/a/b/", "/lock-", "/a/lock-"])
def test_sequential_may_end_with_slash(path: str) -> None:
    validate_path(path, sequential=True)
    if path.endswith("/"):
        with pytest.raises(ZabbyError):
            validate_path(path)


@pytest.mark.parametrize("path", ["/a//", "//", "/./", "/../", "/a/./", "a/", ""])
def test_sequential_still_rejects_bad_prefixes(path: str) -> None:
    with pytest.raises(ZabbyError) as info:
        validate_path(path, sequential=True)
    assert info.value.code == Err.BADARGUMENTS


def _java_validate(path: str) -> bool:
    """A literal transcription of ZooKeeper's PathUtils.validatePath over UTF-16 code units."""
    units = path.encode("utf-16-le", "surrogatepass")
    chars = [int.from_bytes(units[i : i + 2], "little") for i in range(0, len(units), 2)]
    if not chars or chars[0] != ord("/"):
        return False
    if len(chars) == 1:
        return True
    if chars[-1] == ord("/"):
        return False
    lastc = ord("/")
    for i in range(1, len(chars)):
        c = chars[i]
        if c == 0:
            return False
        if c == ord("/") and lastc == ord("/"):
            return False
        if c == ord(".") and lastc == ord("."):
            if chars[i - 2] == ord("/") and (i + 1 == len(chars) or chars[i + 1] == ord("/")):
                return False
        elif c == ord("."):
            if chars[i - 1] == ord("/") and (i + 1 == len(chars) or chars[i + 1] == ord("/")):
                return False
        elif 0 < c <= 0x1F or 0x7F <= c <= 0x9F or 0xD800 <= c <= 0xF8FF or 0xFFF0 <= c <= 0xFFFF:
            return False
        lastc = c
    return True


_path_alphabet = st.sampled_from(["/", ".", "a", "b", "\x00", "\x1f", "\x7f", "\xa0", "\ud800", "\U0001F600", "\ufff5", "é"])


@given(
    st.tuples(st.sampled_from(["/", "/", "/", ""]), st.lists(_path_alphabet, max_size=8)).map(
        lambda t: t[0] + "".join(t[1])
    )
)
def test_validate_path_matches_zookeeper(path: str) -> None:
    try:
        validate_path(path)
        ok = True
    except ZabbyError as exc:
        assert exc.code == Err.BADARGUMENTS
        ok = False
    assert ok == _java_validate(path), path


def test_path_helpers() -> None:
    assert parent_of("/a") == "/"
    assert parent_of("/a/b/c") == "/a/b"
    assert basename("/a/b/c") == "c"
    assert basename("/a") == "a"
    assert join("/", "a") == "/a"
    assert join("/a", "b") == "/a/b"
    assert ancestors("/a/b/c") == ["/a/b", "/a", "/"]
    assert ancestors("/a") == ["/"]
    assert ancestors("/") == []


# ---------------------------------------------------------------- sequential names


@pytest.mark.parametrize(
    ("counter", "suffix"),
    [
        (0, "0000000000"),
        (1, "0000000001"),
        (42, "0000000042"),
        (2**31 - 1, "2147483647"),
        (2**31, "-2147483648"),  # int32 wrap, as Java's cversion + 1 overflows
        (2**31 + 1, "-2147483647"),
        (2**32, "0000000000"),
        (-1, "-000000001"),  # Java's String.format("%010d", -1)
        (-5, "-000000005"),
        (-(2**31), "-2147483648"),
    ],
)
def test_sequential_name(counter: int, suffix: str) -> None:
    assert sequential_name("/lock-", counter) == "/lock-" + suffix
    assert sequential_name("/q/", counter) == "/q/" + suffix


@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_sequential_names_sort_like_counters(n: int) -> None:
    a, b = sequential_name("/x", n), sequential_name("/x", min(n + 1, 2**31 - 1))
    assert len(a) == len("/x") + 10
    assert a <= b


# ---------------------------------------------------------------- digests and auth


def test_digest_known_vector() -> None:
    expected = "super:" + base64.b64encode(hashlib.sha1(b"super:test").digest()).decode()
    assert acls.digest("super", "test") == expected
    assert expected == "super:D/InIHSb7yEEbrWz8b9l71RjZJU="


@given(st.text(min_size=1, max_size=12).filter(lambda u: ":" not in u), st.text(max_size=12))
def test_digest_matches_definition(user: str, password: str) -> None:
    raw = hashlib.sha1(f"{user}:{password}".encode()).digest()
    assert acls.digest(user, password) == f"{user}:{base64.b64encode(raw).decode()}"


def test_authenticate_digest() -> None:
    assert acls.authenticate("digest", b"bob:pw") == ("digest", acls.digest("bob", "pw"))
    # the password may itself contain colons (only the first one splits)
    assert acls.authenticate("digest", b"bob:p:w") == ("digest", acls.digest("bob", "p:w"))


@pytest.mark.parametrize(("credential", "proved"), [  # what ZooKeeper 3.8's DigestAuthenticationProvider.main prints for each
    (b"blah", "blah:W/H9kn37hnlJai5s8Ay+UMHIcUU="), (b":pw", ":krPDEYdCl854cFNT6IXnoMv+VVA="),
    (b"bob:p:w", "bob:c9E8gjtVdLtMPTfBBukKZD37tig="), (b"", ":2jmj7l5rSw0yVb/vlWAYkK/YBwk="),
])  # fmt: skip
def test_any_digest_credential_proves_the_id_zookeeper_gives_it(credential: bytes, proved: str) -> None:
    """ZooKeeper 3.8 accepts a digest credential without a colon or a user (go-zookeeper's
    TestIntegration_GetSetACL adds ``blah``); zabby refused them with AUTHFAILED."""
    assert acls.authenticate("digest", credential) == ("digest", proved)


@pytest.mark.parametrize(("scheme", "cred"), [("kerberos", b"x"), ("ip", b"1.2.3.4")])
def test_authenticate_failures(scheme: str, cred: bytes) -> None:
    with pytest.raises(ZabbyError) as info:
        acls.authenticate(scheme, cred)
    assert info.value.code == Err.AUTHFAILED


def test_perm_letters_round_trip() -> None:
    assert acls.perms_to_letters(acls.ALL) == "rwcda"
    assert acls.perms_to_letters(acls.READ | acls.ADMIN) == "ra"
    assert acls.perms_to_letters(0) == ""
    for perms in range(32):
        assert acls.letters_to_perms(acls.perms_to_letters(perms)) == perms
    with pytest.raises(ZabbyError) as info:
        acls.letters_to_perms("rx")
    assert info.value.code == Err.INVALIDACL


def test_perm_bits_are_zookeepers() -> None:
    assert (acls.READ, acls.WRITE, acls.CREATE, acls.DELETE, acls.ADMIN, acls.ALL) == (1, 2, 4, 8, 16, 31)


# ---------------------------------------------------------------- ACL checks

IP = [("ip", "10.1.2.3")]
BOB = acls.digest("bob", "pw")


def test_check_world() -> None:
    assert acls.check(acls.OPEN_ACL_UNSAFE, acls.WRITE, IP)
    assert acls.check(acls.OPEN_ACL_UNSAFE, acls.ADMIN, [])
    assert acls.check(acls.READ_ACL_UNSAFE, acls.READ, IP)
    assert not acls.check(acls.READ_ACL_UNSAFE, acls.WRITE, IP)
    assert not acls.check(((acls.ALL, "world", "someone"),), acls.READ, IP)


def test_check_digest() -> None:
    acl = ((acls.READ | acls.WRITE, "digest", BOB),)
    assert not acls.check(acl, acls.READ, IP)
    assert acls.check(acl, acls.READ, IP + [("digest", BOB)])
    assert acls.check(acl, acls.WRITE, IP + [("digest", BOB)])
    assert not acls.check(acl, acls.DELETE, IP + [("digest", BOB)])
    assert not acls.check(acl, acls.READ, IP + [("digest", acls.digest("bob", "wrong"))])
    assert not acls.check(acl, acls.READ, IP + [("digest", acls.digest("alice", "pw"))])


@pytest.mark.parametrize(
    ("pattern", "address", "ok"),
    [
        ("10.1.2.3", "10.1.2.3", True),
        ("10.1.2.3", "10.1.2.4", False),
        ("10.1.2.3/32", "10.1.2.3", True),
        ("10.0.0.0/8", "10.200.1.1", True),
        ("10.0.0.0/8", "11.0.0.1", False),
        ("10.1.2.3/8", "10.9.9.9", True),  # host bits in the pattern are ignored, like ZooKeeper
        ("0.0.0.0/0", "192.168.1.1", True),
        ("::1", "::1", True),
        ("fe80::/10", "fe80::1", True),
        ("fe80::/10", "::1", False),
        ("10.0.0.0/8", "::1", False),
        ("garbage", "10.1.2.3", False),
    ],
)
def test_check_ip(pattern: str, address: str, ok: bool) -> None:
    acl = ((acls.READ, "ip", pattern),)
    assert acls.check(acl, acls.READ, [("ip", address)]) is ok


def test_check_ip_needs_an_ip_id() -> None:
    acl = ((acls.READ, "ip", "10.0.0.0/8"),)
    assert not acls.check(acl, acls.READ, [("digest", "10.1.1.1")])


def test_check_super_and_empty_acl() -> None:
    acl = ((acls.READ, "digest", BOB),)
    assert acls.check(acl, acls.ADMIN, [], superuser=True)
    assert acls.check((), acls.ADMIN, [])  # ZooKeeper: an empty ACL grants everything
    assert not acls.check(((acls.ALL, "super", ""),), acls.READ, [("super", "")])


def test_check_any_entry_grants() -> None:
    acl = ((acls.READ, "world", "anyone"), (acls.ALL, "digest", BOB))
    assert acls.check(acl, acls.READ, IP)
    assert not acls.check(acl, acls.WRITE, IP)
    assert acls.check(acl, acls.WRITE, [("digest", BOB)])


# ---------------------------------------------------------------- fix_acl


def test_fix_acl_passes_valid_entries() -> None:
    acl = [(acls.ALL, "world", "anyone"), (acls.READ, "ip", "10.0.0.0/8"), (acls.READ, "digest", BOB)]
    assert acls.fix_acl(acl, IP) == tuple(tuple(e) for e in acl)


def test_fix_acl_expands_auth() -> None:
    ids = IP + [("digest", BOB), ("digest", acls.digest("eve", "x"))]
    fixed = acls.fix_acl(acls.CREATOR_ALL_ACL, ids)
    assert fixed == ((acls.ALL, "digest", BOB), (acls.ALL, "digest", acls.digest("eve", "x")))


def test_fix_acl_removes_duplicates() -> None:
    acl = [(acls.ALL, "world", "anyone"), [acls.ALL, "world", "anyone"]]
    assert acls.fix_acl(acl, IP) == ((acls.ALL, "world", "anyone"),)


@pytest.mark.parametrize(
    ("acl", "auth_ids"),
    [
        ([], IP),
        ((), IP),
        (None, IP),
        ("world:anyone", IP),
        ([(acls.ALL, "auth", "")], IP),  # ip ids do not count as authenticated
        ([(acls.ALL, "auth", "")], []),
        ([(acls.ALL, "world", "someone")], IP),
        ([(acls.ALL, "nosuch", "x")], IP),
        ([(acls.ALL, "digest", "nocolon")], IP),
        ([(acls.ALL, "digest", "a:b:c")], IP),  # ZooKeeper: split(":") must give two parts
        ([(acls.ALL, "digest", "user:")], IP),
        ([(acls.ALL, "ip", "not-an-ip")], IP),
        ([(acls.ALL, "ip", "10.0.0.0/99")], IP),
        ([(2**31, "world", "anyone")], IP),  # not an int32
        ([("31", "world", "anyone")], IP),
        ([(acls.ALL, "world")], IP),
        ([(acls.ALL, "world", "anyone", "extra")], IP),
        (["rwcda world anyone"], IP),
        ([(acls.ALL, "world", "anyone"), (acls.ALL, "nosuch", "x")], IP),
    ],
)
def test_fix_acl_rejects(acl: object, auth_ids: list[acls.AuthId]) -> None:
    with pytest.raises(ZabbyError) as info:
        acls.fix_acl(acl, auth_ids)
    assert info.value.code == Err.INVALIDACL


@pytest.mark.parametrize("perms", [0, 32, 64 | acls.READ, -1])
def test_fix_acl_keeps_any_int_permissions_as_zookeeper_does(perms: int) -> None:
    """ZooKeeper's fixupACL never looks at the permissions; bits beyond ALL grant nothing."""
    assert acls.fix_acl([(perms, "world", "anyone")], IP) == ((perms, "world", "anyone"),)
    assert acls.check(((perms, "world", "anyone"),), acls.READ, IP) == bool(perms & acls.READ)


def test_shared_acls_are_one_tuple_of_tuples_whatever_shape_they_arrive_in() -> None:
    from zabby.tree.datatree import SharedMetas

    shared = SharedMetas()
    scheme, ident = "".join(["dig", "est"]), "".join(["bob:", "x"])  # strings no one else interned
    acl = shared.take(((31, scheme, ident),), 0, 0)[0]
    assert acl == ((31, "digest", "bob:x"),) and type(acl[0]) is tuple
    assert acl[0][1] is sys.intern("digest")
    assert shared.take([[31, "digest", "bob:x"]], 0, 0)[0] is acl  # lists (not hashable)
    assert shared.take(((31, "digest", "bob:x"),), 1, 0)[0] is acl  # tuples, looked up as they are
    assert shared.take(iter([(31, "digest", "bob:x")]), 0, 5)[0] is acl  # an iterator, read once


@settings(max_examples=500, deadline=None)
@given(st.one_of(
    st.text(alphabet="0123456789./", max_size=20),
    st.tuples(st.integers(0, 300), st.integers(0, 300), st.integers(0, 300), st.integers(0, 300), st.one_of(st.none(), st.integers(0, 40)),
              st.booleans()).map(lambda t: ".".join(("0" if t[5] else "") + str(n) for n in t[:4]) + ("" if t[4] is None else f"/{t[4]}")),
))  # fmt: skip
def test_an_ip_id_is_valid_exactly_when_ipaddress_reads_it(acl_id: str) -> None:
    """The dotted IPv4 fast path takes nothing ``ipaddress`` would refuse, and refuses nothing it takes."""
    import ipaddress

    try:
        ipaddress.ip_network(acl_id, strict=False)
        readable = True
    except ValueError:
        readable = False
    assert acls._valid_id("ip", acl_id) == readable
