"""Error codes and exceptions.

The numeric codes are ZooKeeper's (``KeeperException.Code``) so that a jute codec can sit
beside msgpack; the class names are kazoo's (``kazoo/exceptions.py``), so a kazoo user catches
the same exceptions.  ``error_for_code`` is the one registry both directions go through.
"""

from __future__ import annotations

import enum
import reprlib

_SHOWN = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, 80, 80
_SHOWN.maxlist = _SHOWN.maxtuple = _SHOWN.maxdict = 8


def shown(value: object) -> str:
    """A client's value as an error message shows it: bounded in length and depth, so a
    hostile value cannot make the message huge or recurse without end."""
    return _SHOWN.repr(value)


class Err(enum.IntEnum):
    OK = 0
    SYSTEMERROR = -1
    RUNTIMEINCONSISTENCY = -2
    DATAINCONSISTENCY = -3
    CONNECTIONLOSS = -4
    MARSHALLINGERROR = -5
    UNIMPLEMENTED = -6
    OPERATIONTIMEOUT = -7
    BADARGUMENTS = -8
    UNKNOWNSESSION = -12
    NEWCONFIGNOQUORUM = -13
    RECONFIGINPROGRESS = -14
    APIERROR = -100
    NONODE = -101
    NOAUTH = -102
    BADVERSION = -103
    NOCHILDRENFOREPHEMERALS = -108
    NODEEXISTS = -110
    NOTEMPTY = -111
    SESSIONEXPIRED = -112
    INVALIDCALLBACK = -113
    INVALIDACL = -114
    AUTHFAILED = -115
    SESSIONMOVED = -118
    NOTREADONLY = -119
    EPHEMERALONLOCALSESSION = -120
    NOWATCHER = -121
    REQUESTTIMEOUT = -122
    RECONFIGDISABLED = -123
    SESSIONCLOSEDREQUIRESASLAUTH = -124
    QUOTAEXCEEDED = -125
    THROTTLEDOP = -127
    # zabby's own codes, from -1000 down: outside every range ZooKeeper uses (docs/protocol.md)
    HISTORYCOMPACTED = -1000


class KazooException(Exception):
    """Base of every error zabby raises to users (kazoo's name, so ``except`` clauses carry over)."""


_BY_CODE: dict[int, type[ZookeeperError]] = {}


class ZookeeperError(KazooException):
    """An error the server reported with a ZooKeeper error code.  Each subclass that names a
    code of its own is the class of that code (the first one: aliases and subclasses that
    inherit a code are not)."""

    code: Err = Err.APIERROR

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__ and cls.code != Err.OK:
            _BY_CODE.setdefault(int(cls.code), cls)


class SystemZookeeperError(ZookeeperError):
    code = Err.SYSTEMERROR


class RuntimeInconsistency(ZookeeperError):
    code = Err.RUNTIMEINCONSISTENCY


class DataInconsistency(ZookeeperError):
    code = Err.DATAINCONSISTENCY


class ConnectionLoss(ZookeeperError):
    code = Err.CONNECTIONLOSS


class MarshallingError(ZookeeperError):
    code = Err.MARSHALLINGERROR


class UnimplementedError(ZookeeperError):
    code = Err.UNIMPLEMENTED


class OperationTimeoutError(ZookeeperError):
    code = Err.OPERATIONTIMEOUT


class BadArgumentsError(ZookeeperError):
    code = Err.BADARGUMENTS


class UnknownSessionError(ZookeeperError):
    code = Err.UNKNOWNSESSION


class NewConfigNoQuorumError(ZookeeperError):
    code = Err.NEWCONFIGNOQUORUM


class ReconfigInProcessError(ZookeeperError):
    code = Err.RECONFIGINPROGRESS


class APIError(ZookeeperError):
    code = Err.APIERROR


class NoNodeError(ZookeeperError):
    code = Err.NONODE


class NoAuthError(ZookeeperError):
    code = Err.NOAUTH


class BadVersionError(ZookeeperError):
    code = Err.BADVERSION


class NoChildrenForEphemeralsError(ZookeeperError):
    code = Err.NOCHILDRENFOREPHEMERALS


class NodeExistsError(ZookeeperError):
    code = Err.NODEEXISTS


class NotEmptyError(ZookeeperError):
    code = Err.NOTEMPTY


class SessionExpiredError(ZookeeperError):
    code = Err.SESSIONEXPIRED


class InvalidCallbackError(ZookeeperError):
    code = Err.INVALIDCALLBACK


class InvalidACLError(ZookeeperError):
    code = Err.INVALIDACL


class AuthFailedError(ZookeeperError):
    code = Err.AUTHFAILED


class SessionMovedError(ZookeeperError):
    code = Err.SESSIONMOVED


class NotReadOnlyCallError(ZookeeperError):
    code = Err.NOTREADONLY


class EphemeralOnLocalSessionError(ZookeeperError):
    code = Err.EPHEMERALONLOCALSESSION


class NoWatcherError(ZookeeperError):
    code = Err.NOWATCHER


class RequestTimeoutError(ZookeeperError):
    code = Err.REQUESTTIMEOUT


class ReconfigDisabledError(ZookeeperError):
    code = Err.RECONFIGDISABLED


class SessionClosedRequireSaslError(ZookeeperError):
    code = Err.SESSIONCLOSEDREQUIRESASLAUTH


class QuotaExceededError(ZookeeperError):
    code = Err.QUOTAEXCEEDED


class ThrottledOpError(ZookeeperError):
    code = Err.THROTTLEDOP


class HistoryCompactedError(ZookeeperError):
    """A watch cannot resume from the zxid it asked for (zabby's extension, as etcd's
    ErrCompacted): the server's watch history does not reach back that far.  ``oldest_zxid``
    is the oldest zxid the watch can resume from there; read the current state and resume
    from the zxid of that read."""

    code = Err.HISTORYCOMPACTED

    def __init__(self, message: str = "", oldest_zxid: int = -1) -> None:
        super().__init__(message or "the watch history does not reach back to that zxid")
        self.oldest_zxid = oldest_zxid


class RolledBackError(ZookeeperError):
    """A multi op that was valid but was rolled back because another op of the multi failed."""

    code = Err.OK


# kazoo's aliases
NoNodeException = NoNodeError
NodeExistsException = NodeExistsError
NotEmptyException = NotEmptyError
NoAuthException = NoAuthError
BadVersionException = BadVersionError
NoChildrenForEphemeralsException = NoChildrenForEphemeralsError
InvalidACLException = InvalidACLError
BadArgumentsException = BadArgumentsError
MarshallingErrorException = MarshallingError
UnimplementedException = UnimplementedError
OperationTimeoutException = OperationTimeoutError
SessionExpiredException = SessionExpiredError
AuthFailedException = AuthFailedError
NoWatcherException = NoWatcherError
ConnectionLossException = ConnectionLoss
SystemErrorException = SystemZookeeperError
RuntimeInconsistencyException = RuntimeInconsistency
DataInconsistencyException = DataInconsistency
ApiErrorException = APIError
InvalidCallbackException = InvalidCallbackError


class ConnectionClosedError(SessionExpiredError):
    """The client was stopped or closed; the call can never succeed on this client."""


class ConnectionDropped(KazooException):
    """The connection to a server was lost (internal; surfaces as ConnectionLoss)."""


class CancelledError(KazooException):
    """A recipe's wait was cancelled."""


class ConfigurationError(KazooException):
    """Bad arguments to a client or recipe constructor."""


class ZookeeperStoppedError(KazooException):
    """The client is stopped."""


class LockTimeout(KazooException):
    """A lock was not acquired within the timeout."""


class ForceRetryError(KazooException):
    """Raised inside a retried function to ask for another attempt."""


class RetryFailedError(KazooException):
    """A retry helper gave up."""


class WriterNotClosedException(KazooException):
    """A transaction was committed twice or used after commit."""


class ForkedClientError(KazooException):
    """A client created before ``fork()`` was used in the child process."""


class ProtocolError(Exception):
    """Base for byte streams that do not follow the protocol."""


class RemoteProtocolError(ProtocolError):
    """The peer sent something malformed: close that link, keep serving everyone else."""


class OversizeError(RemoteProtocolError):
    """A frame or a buffer over its size limit (jute.maxbuffer): a large request rejected."""


class RefusedRequest(Exception):
    """A well-formed request the server will not take (over ``maxRequestOps``, say): it is
    answered with ``code`` and the reason, in its turn, and the connection goes on."""

    def __init__(self, xid: int, code: Err, message: str) -> None:
        super().__init__(message)
        self.xid = xid
        self.code = code


class TooManyOps(RemoteProtocolError):
    """A multi (or multiRead) with more ops than the reader was told to take."""


class InvariantError(AssertionError):
    """An internal invariant was broken: a bug in zabby, never the peer's fault."""


class Inconsistency(Exception):
    """What the leader sent does not fit this server's tree (a snapshot at another zxid than
    declared, a digest that differs): the server never serves that tree, it resyncs by SNAP."""


def error_for_code(code: int) -> type[ZookeeperError]:
    """The exception class for a wire error code (unknown codes map to ``ZookeeperError``)."""
    return _BY_CODE.get(int(code), ZookeeperError)


def raise_for_code(code: int, message: str = "") -> None:
    if code != 0:
        raise error_for_code(code)(message or _name(code))


def _name(code: int) -> str:
    try:
        return Err(code).name
    except ValueError:
        return f"error {code}"


class ZabbyError(ZookeeperError):
    """Raised by server-side core code; carries a code and a human-readable message."""

    reply_values: tuple[object, ...] = ()  # what the error reply carries after the message

    def __init__(self, code: Err, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


class HistoryCompacted(ZabbyError):
    """The server's side of ``HistoryCompactedError``: its reply carries ``oldest_zxid``."""

    def __init__(self, message: str, oldest_zxid: int) -> None:
        super().__init__(Err.HISTORYCOMPACTED, message)
        self.oldest_zxid = oldest_zxid
        self.reply_values = (oldest_zxid,)
