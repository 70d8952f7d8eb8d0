"""Retry policy: bounded exponential backoff with jitter, and error classification.

When a handler or a step action raises, the engine asks two independent questions about the
exception:

1. :func:`classify`: is it ``"transient"`` (retry after a backoff) or ``"fatal"`` (retrying
   cannot help)?
2. :func:`outcome_of`: did the request possibly reach the other side? ``"not_applied"`` only
   when the error *proves* that nothing happened there (the connection was never made, or the
   server refused the request without acting on it); ``"unknown"`` otherwise. An ``"unknown"``
   step is reconciled with the external system before it may run again, while a
   ``"not_applied"`` one is simply re-run: a wrong ``"not_applied"`` can apply an effect twice
   (charge a card twice), a wrong ``"unknown"`` only costs a reconcile. So every doubt resolves
   to ``"unknown"``.

Handlers talk to the world through httpx (or its fork httpx2), requests, aiohttp, urllib, or
an SDK built on them (OpenAI, Anthropic). Their exceptions are recognised **by name**, walking
``type(exc).__mro__`` and matching ``(top-level package, qualified name)``, so none of those
libraries is imported here (the engine must not depend on them, and a handler's choice of
client must not change what the engine imports). The first class along the MRO with an entry
decides, so a library class is judged before the builtin ``OSError``/``TimeoutError`` it may
derive from.

Transient, not_applied (the request never left, or no connection was ever made):

- ``statewright.errors.RequestNotSent`` (the user says so);
- ``socket.gaierror`` (DNS), ``ConnectionRefusedError``, ``OSError`` with errno ENETUNREACH,
  EHOSTUNREACH, ENETDOWN, EHOSTDOWN or ECONNREFUSED; ``ssl.SSLCertVerificationError``;
- httpx/httpcore (and httpx2/httpcore2) ``ConnectError``, ``ConnectTimeout``, ``PoolTimeout``;
- urllib3 ``NewConnectionError``, ``NameResolutionError``, ``ConnectTimeoutError``; requests
  ``ConnectTimeout``, and requests ``ConnectionError`` / urllib3 ``MaxRetryError`` /
  urllib ``URLError`` when the error they wrap is one of these;
- aiohttp ``ClientConnectorError`` (and its DNS, SSL and proxy subclasses),
  ``ConnectionTimeoutError`` (raised only while connecting);
- OpenAI/Anthropic ``APIConnectionError``/``APITimeoutError`` raised from one of these.

Transient, unknown (the connection broke or timed out after the request may have been sent):

- ``statewright.errors.TransientError`` (other than ``RequestNotSent``);
- other ``ConnectionError`` (reset, aborted, broken pipe), ``TimeoutError`` (which is also
  ``asyncio.TimeoutError`` and ``socket.timeout``), ``OSError`` with errno ECONNRESET,
  ETIMEDOUT, EPIPE or ECONNABORTED; ssl EOF/zero-return/syscall errors;
- every other httpx ``TransportError``: ``ReadTimeout``, ``WriteTimeout``, ``ReadError``,
  ``WriteError``, ``RemoteProtocolError``, ``CloseError``, ``ProxyError``;
- requests ``ReadTimeout``/``Timeout``, ``ChunkedEncodingError``, ``RetryError``, any other
  ``ConnectionError``; urllib3 read timeouts, ``ProtocolError``, ``SSLError``, ``ProxyError``;
- aiohttp ``ServerDisconnectedError``, ``ServerTimeoutError``, ``ClientOSError``,
  ``ClientPayloadError`` and any other ``ClientConnectionError``;
- OpenAI/Anthropic ``APIConnectionError``/``APITimeoutError`` otherwise;
- a ``BaseExceptionGroup`` whose members are all transient (never not_applied: concurrent
  siblings may have succeeded).

Fatal: ``statewright.errors.FatalError`` (unknown); httpx ``UnsupportedProtocol``
(not_applied) and ``LocalProtocolError`` (unknown): the same call fails the same way each time.

By HTTP status, for any error carrying one as an int in ``status_code``, ``status`` or
``response.status_code`` (httpx ``HTTPStatusError``, requests ``HTTPError``, aiohttp
``ClientResponseError``, urllib ``HTTPError``, OpenAI/Anthropic ``APIStatusError`` and its
``RateLimitError``, ``InternalServerError``, ...): see below.

HTTP statuses: 408, 425, 429 and every 5xx except 501 (Not Implemented) and 505 (HTTP Version
Not Supported) are transient; any other status is fatal. Every 4xx except 409 (Conflict, which
may describe a state the request itself produced) means the server refused the request:
not_applied. 5xx, 409 and non-error statuses are unknown: a 502 from a proxy may hide a
backend that did the work.

Anything else (``KeyError`` while parsing a response, ``ValueError``, your own exceptions) is
judged by the first recognised exception in its ``__cause__``/``__context__`` chain for
``classify`` (so ``raise MyError(...) from httpx.ReadTimeout(...)`` is retried) and is fatal
when there is none. Its outcome is always ``unknown``: the code that raised it ran after the
request and may have acted on it. Say so explicitly when you know better: raise
``RequestNotSent(...) from exc``, or list the class in ``RetryPolicy.not_applied_errors``.
"""

from __future__ import annotations

import errno
import math
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, timedelta
from typing import Any, Literal, TypeAlias

from statewright.errors import FatalError, RequestNotSent, TransientError

__all__ = [
    "TRANSIENT_STATUS",
    "Classification",
    "Outcome",
    "RetryPolicy",
    "backoff",
    "classify",
    "outcome_of",
    "retry_after_of",
]

Classification = Literal["transient", "fatal"]
"""``"transient"``: retry after a backoff. ``"fatal"``: retrying cannot help."""

Outcome = Literal["not_applied", "unknown"]
"""``"not_applied"``: proven to have had no effect. ``"unknown"``: the effect may have happened."""

TRANSIENT_STATUS: frozenset[int] = frozenset({408, 425, 429, *range(500, 600)} - {501, 505})
"""HTTP statuses worth retrying: timeouts, too early, rate limits and server errors except the
two that say the server will never handle this request (501 Not Implemented, 505 HTTP Version
Not Supported)."""

_Verdict: TypeAlias = tuple[Classification, Outcome]
_Rule: TypeAlias = "_Verdict | Callable[[BaseException], _Verdict | None]"

_NOT_SENT: _Verdict = ("transient", "not_applied")
_MAYBE_SENT: _Verdict = ("transient", "unknown")

# How far to follow __cause__/__context__ chains: real chains are 2-4 long; the bound only
# guards against pathological (or cyclic, via a seen-set) chains.
_MAX_CHAIN = 16


# --- HTTP status -----------------------------------------------------------------------------


def _as_status(value: object) -> int | None:
    # bool is an int; and an int outside 100-599 (a library's own ``status = 0``) is no HTTP
    # status, so it must not make an arbitrary exception "fatal"/"transient" by accident.
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def _status_of(exc: BaseException) -> int | None:
    for attr in ("status_code", "status"):
        status = _as_status(getattr(exc, attr, None))
        if status is not None:
            return status
    response = getattr(exc, "response", None)
    return None if response is None else _as_status(getattr(response, "status_code", None))


def _by_status(status: int) -> _Verdict:
    kind: Classification = "transient" if status in TRANSIENT_STATUS else "fatal"
    # A 4xx is the server declining the request before acting on it; 409 is the exception (it
    # may report a conflict with what this very request, sent before, already did).
    refused = 400 <= status < 500 and status != 409
    return kind, "not_applied" if refused else "unknown"


def _status_rule(exc: BaseException) -> _Verdict | None:
    status = _status_of(exc)
    return None if status is None else _by_status(status)


# --- OS / ssl ----------------------------------------------------------------------------------

# Errnos of a connect() that failed before a byte left: the peer was never reached.
_ERRNO_NOT_SENT = frozenset(
    {errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN, errno.ECONNREFUSED}
)
# Errnos of a connection that broke: it may have carried the request first.
_ERRNO_MAYBE_SENT = frozenset({errno.ECONNRESET, errno.ETIMEDOUT, errno.EPIPE, errno.ECONNABORTED})


def _errno_rule(exc: BaseException) -> _Verdict | None:
    code = getattr(exc, "errno", None)
    if code in _ERRNO_NOT_SENT:
        return _NOT_SENT
    if code in _ERRNO_MAYBE_SENT:
        return _MAYBE_SENT
    return None  # ENOENT, EACCES, ...: not a network failure


def _ssl_rule(exc: BaseException) -> _Verdict | None:
    # ssl.SSLError.errno holds OpenSSL codes, not POSIX errnos: it must not reach _errno_rule.
    names = {cls.__qualname__ for cls in type(exc).__mro__ if cls.__module__ == "ssl"}
    if "SSLCertVerificationError" in names:
        return _NOT_SENT  # the handshake failed: no request was written
    if names & {"SSLEOFError", "SSLZeroReturnError", "SSLSyscallError"}:
        return _MAYBE_SENT  # the peer dropped an established connection
    return None


# --- wrappers ----------------------------------------------------------------------------------


def _chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from, as a traceback shows them."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(exc))
        yield exc
        if exc.__cause__ is not None:
            exc = exc.__cause__
        elif exc.__suppress_context__:
            exc = None
        else:
            exc = exc.__context__


def _first_known(exc: BaseException | None) -> _Verdict | None:
    for link in _chain(exc):
        verdict = _own_verdict(link)
        if verdict is not None:
            return verdict
    return None


def _wrapped_connect_rule(inner: BaseException | None) -> _Verdict:
    # A connection-family wrapper is transient whatever it wraps; it is not_applied only when
    # the wrapped error proves it, since the wrapper itself says nothing either way.
    verdict = _first_known(inner)
    return _NOT_SENT if verdict == _NOT_SENT else _MAYBE_SENT


def _sdk_connection_rule(exc: BaseException) -> _Verdict:
    # OpenAI/Anthropic: ``raise APIConnectionError(request=...) from httpx_error``.
    return _wrapped_connect_rule(exc.__cause__)


def _urllib3_max_retry_rule(exc: BaseException) -> _Verdict:
    reason = getattr(exc, "reason", None)
    return _wrapped_connect_rule(reason if isinstance(reason, BaseException) else None)


def _requests_connection_rule(exc: BaseException) -> _Verdict:
    # requests raises ``ConnectionError(max_retry_error)`` inside an ``except``: the urllib3
    # error (usually a MaxRetryError whose .reason says what happened) is args[0].
    inner = exc.args[0] if exc.args and isinstance(exc.args[0], BaseException) else None
    return _wrapped_connect_rule(inner)


def _urllib_url_error_rule(exc: BaseException) -> _Verdict | None:
    # urllib.request wraps the OSError of connect-and-send in URLError(reason).
    reason = getattr(exc, "reason", None)
    return _own_verdict(reason) if isinstance(reason, BaseException) else None


# --- the table -----------------------------------------------------------------------------------


def _rules() -> dict[tuple[str, str], _Rule]:
    rules: dict[tuple[str, str], _Rule] = {
        ("builtins", "ConnectionRefusedError"): _NOT_SENT,
        ("builtins", "ConnectionError"): _MAYBE_SENT,
        ("builtins", "TimeoutError"): _MAYBE_SENT,  # also asyncio.TimeoutError, socket.timeout
        ("builtins", "OSError"): _errno_rule,
        ("socket", "gaierror"): _NOT_SENT,
        ("ssl", "SSLError"): _ssl_rule,
        # urllib3 (and requests, which wraps it). NameResolutionError < NewConnectionError <
        # ConnectTimeoutError: all raised while connecting.
        ("urllib3", "ConnectTimeoutError"): _NOT_SENT,
        ("urllib3", "NewConnectionError"): _NOT_SENT,
        ("urllib3", "NameResolutionError"): _NOT_SENT,
        ("urllib3", "MaxRetryError"): _urllib3_max_retry_rule,
        ("urllib3", "TimeoutError"): _MAYBE_SENT,
        ("urllib3", "ReadTimeoutError"): _MAYBE_SENT,
        ("urllib3", "ProtocolError"): _MAYBE_SENT,
        ("urllib3", "SSLError"): _MAYBE_SENT,
        ("urllib3", "ProxyError"): _MAYBE_SENT,
        ("requests", "ConnectTimeout"): _NOT_SENT,
        ("requests", "ConnectionError"): _requests_connection_rule,
        ("requests", "Timeout"): _MAYBE_SENT,
        ("requests", "ReadTimeout"): _MAYBE_SENT,
        ("requests", "ChunkedEncodingError"): _MAYBE_SENT,
        ("requests", "RetryError"): _MAYBE_SENT,  # urllib3 ran out of status retries (503s)
        ("requests", "HTTPError"): _status_rule,
        ("aiohttp", "ClientConnectorError"): _NOT_SENT,  # + DNS, SSL, proxy-connect subclasses
        # Raised only around connector.connect(): before the request is written.
        ("aiohttp", "ConnectionTimeoutError"): _NOT_SENT,
        ("aiohttp", "ClientConnectionError"): _MAYBE_SENT,
        ("aiohttp", "ClientPayloadError"): _MAYBE_SENT,
        ("aiohttp", "ClientResponseError"): _status_rule,
        ("urllib", "HTTPError"): _status_rule,
        ("urllib", "URLError"): _urllib_url_error_rule,
    }
    # httpx2/httpcore2: pydantic's continuation of httpx, under a new name; the OpenAI and
    # Anthropic SDKs (and mcp) are built on it.
    for pkg in ("httpx", "httpcore", "httpx2", "httpcore2"):
        rules.update(
            {
                (pkg, "ConnectError"): _NOT_SENT,
                (pkg, "ConnectTimeout"): _NOT_SENT,
                (pkg, "PoolTimeout"): _NOT_SENT,  # no connection was ever handed out
                # A scheme the client cannot speak, or a request it refuses to write: the same
                # call fails the same way every time.
                (pkg, "UnsupportedProtocol"): ("fatal", "not_applied"),
                (pkg, "LocalProtocolError"): ("fatal", "unknown"),
                # Bases: read/write timeouts and errors, RemoteProtocolError, CloseError,
                # ProxyError (httpx) and their httpcore twins.
                (pkg, "TransportError"): _MAYBE_SENT,
                (pkg, "NetworkError"): _MAYBE_SENT,
                (pkg, "TimeoutException"): _MAYBE_SENT,
                (pkg, "ProtocolError"): _MAYBE_SENT,
                (pkg, "ProxyError"): _MAYBE_SENT,
            }
        )
    for pkg in ("openai", "anthropic"):
        rules[(pkg, "APIConnectionError")] = _sdk_connection_rule  # + APITimeoutError
    return rules


_RULES = _rules()


def _family_verdict(exc: BaseException) -> _Verdict | None:
    for cls in type(exc).__mro__:
        # The top-level package, not __module__ itself: httpx and the SDKs re-home their
        # exceptions ("httpx._exceptions" -> "httpx"), and that detail may change.
        rule = _RULES.get((cls.__module__.partition(".")[0], cls.__qualname__))
        if rule is not None:
            # The most specific known class decides, even when it has no opinion (None): an
            # ssl.SSLError must not fall through to OSError's errno reading.
            return rule(exc) if callable(rule) else rule
    return None


def _own_verdict(exc: BaseException) -> _Verdict | None:
    """What ``exc`` itself says, ignoring what it was raised from (``None``: nothing)."""
    if isinstance(exc, RequestNotSent):
        return _NOT_SENT
    if isinstance(exc, TransientError):
        return _MAYBE_SENT
    if isinstance(exc, FatalError):
        return "fatal", "unknown"
    if isinstance(exc, BaseExceptionGroup):
        # Concurrent siblings may have succeeded before the group failed: never not_applied.
        kinds = {classify(member) for member in exc.exceptions}
        return ("transient" if kinds == {"transient"} else "fatal"), "unknown"
    verdict = _family_verdict(exc)
    return verdict if verdict is not None else _status_rule(exc)


# --- public ------------------------------------------------------------------------------------


def classify(exc: BaseException) -> Classification:
    """Whether retrying ``exc`` after a backoff can help.

    See the module docstring for the table. An exception nobody recognises is judged by the
    first recognised one in its ``__cause__``/``__context__`` chain, and is fatal if there is
    none (a bug does not go away by waiting).

    Args:
        exc: what the handler or step raised.

    Returns:
        ``"transient"`` or ``"fatal"``.
    """
    if not isinstance(exc, Exception):
        # KeyboardInterrupt, SystemExit, asyncio.CancelledError, statewright's Cancelled:
        # control flow, not failures. Whatever was being handled when one struck (its
        # __context__) must not make it retryable.
        return "fatal"
    verdict = _first_known(exc)  # exc itself first, then what it was raised from
    return verdict[0] if verdict is not None else "fatal"


def outcome_of(exc: BaseException) -> Outcome:
    """Whether the request behind ``exc`` may have had an effect on the other side.

    ``"not_applied"`` only when ``exc`` proves the request never left or was refused without
    effect (DNS failure, connection refused, connect or pool timeout, no route to host, HTTP
    4xx other than 409, :class:`~statewright.errors.RequestNotSent`). Everything else,
    including exceptions this module does not recognise, is ``"unknown"``.

    Args:
        exc: what the handler or step raised.

    Returns:
        ``"not_applied"`` or ``"unknown"``.
    """
    verdict = _own_verdict(exc)
    return verdict[1] if verdict is not None else "unknown"


def _header(headers: object, name: str) -> Any:
    get = getattr(headers, "get", None)
    if not callable(get):
        return None
    try:
        # httpx.Headers, requests' CaseInsensitiveDict, aiohttp's CIMultiDictProxy and
        # email.message.Message all match case-insensitively; a plain dict does not.
        value = get(name)
        if value is None and isinstance(headers, Mapping):
            value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    except Exception:  # a headers-like object we do not understand is no Retry-After
        return None
    return value


def _seconds(value: object, now: float | None) -> float | None:
    """``value`` (seconds as a number or text, or an HTTP-date) as non-negative seconds."""
    seconds: float
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            from email.utils import parsedate_to_datetime

            try:
                when = parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError, OverflowError):
                return None
            if when.tzinfo is None:  # "-0000": UTC with no claim about local time
                when = when.replace(tzinfo=UTC)
            seconds = when.timestamp() - (time.time() if now is None else now)
    else:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _own_retry_after(exc: BaseException, now: float | None) -> float | None:
    seconds = _seconds(getattr(exc, "retry_after", None), now)
    if seconds is not None:
        return seconds
    response = getattr(exc, "response", None)
    for headers in (getattr(response, "headers", None), getattr(exc, "headers", None)):
        if headers is None:
            continue
        # OpenAI and Anthropic send a finer-grained ``retry-after-ms`` next to Retry-After.
        millis = _seconds(_header(headers, "retry-after-ms"), now)
        if millis is not None:
            return millis / 1000
        seconds = _seconds(_header(headers, "retry-after"), now)
        if seconds is not None:
            return seconds
    return None


def retry_after_of(exc: BaseException, now: float | None = None) -> float | None:
    """The wait the server asked for (``Retry-After``), in seconds, if ``exc`` carries one.

    Looks at ``exc.retry_after``, then a ``retry-after-ms`` or ``Retry-After`` header in
    ``exc.response.headers`` or ``exc.headers`` (matched case-insensitively), then at the
    exceptions ``exc`` was raised from (so ``raise TransientError(...) from status_error``
    keeps the server's hint). The value may be seconds (``"120"``, ``"1.5"``) or an HTTP-date
    (``"Wed, 21 Oct 2015 07:28:00 GMT"``), which is turned into seconds from ``now``.

    Args:
        exc: what the handler or step raised.
        now: the current time as a Unix timestamp, for HTTP-dates; defaults to ``time.time()``.

    Returns:
        Seconds to wait, never negative (a date in the past gives 0), or ``None`` when there
        is no hint or it cannot be parsed.
    """
    for link in _chain(exc):
        seconds = _own_retry_after(link, now)
        if seconds is not None:
            return seconds
    return None


def backoff(
    attempt: int,
    *,
    initial: float,
    factor: float,
    maximum: float,
    jitter: float,
    rng: random.Random | None = None,
    around: bool = False,
) -> float:
    """Seconds before retry number ``attempt`` (1-based): ``initial * factor**(attempt-1)``,
    at most ``maximum``, less a random share of up to ``jitter`` of it ("equal jitter", never
    past the cap); or, ``around``, times a random factor in ``[1 - jitter, 1 + jitter]``.

    The one backoff of the package: a workflow's retries (:meth:`RetryPolicy.delay`) and
    alert delivery's (``statewright.observability.delivery.Backoff``) both call it.
    """
    raw = min(maximum, initial * factor ** max(0, attempt - 1))
    if around:
        uniform = rng.uniform if rng is not None else random.uniform
        return raw * (1 + uniform(-jitter, jitter))
    spread = raw * jitter
    return raw - spread + (rng or random).random() * spread


def _check_error_types(name: str, value: object) -> None:
    if not isinstance(value, tuple) or not all(
        isinstance(t, type) and issubclass(t, BaseException) for t in value
    ):
        raise TypeError(f"RetryPolicy.{name} must be a tuple of exception classes, got {value!r}")


@dataclass(frozen=True)
class RetryPolicy:
    """How a workflow type retries failures. Per workflow type.

    Classification can be tuned per type: ``classifier`` first (return ``None`` to defer), then
    ``fatal_errors``, then ``transient_errors`` / ``not_applied_errors``, then the default
    :func:`classify`. ``not_applied_errors`` also make :meth:`outcome` say ``"not_applied"``;
    nothing else changes the default :func:`outcome_of`. The tuples are matched with
    ``isinstance`` against the raised exception itself (not its cause).

    Attributes:
        max_attempts: transient failures allowed in one state before the workflow fails. It
            counts consecutive failures and starts over after a success.
        base_delay: the first backoff, in seconds.
        max_delay: the cap on any backoff (a Retry-After beyond it is honoured, capped at
            ``max_retry_after``).
        multiplier: growth per attempt.
        jitter: fraction of the delay drawn at random ("equal jitter"): 0 disables it.
        max_retry_after: the longest server-requested wait honoured, in seconds.
        max_total_attempts: failures allowed over the workflow's whole life, across states and
            successes (it never starts over), so a workflow that keeps failing a little later
            each time still ends. ``None``: no lifetime limit.
        transient_errors: exception classes to retry whatever the default says.
        fatal_errors: exception classes never to retry whatever the default says.
        not_applied_errors: exception classes that prove nothing was applied (the step may
            simply run again); transient unless ``fatal_errors`` or ``classifier`` say fatal.
        classifier: a function given the exception that returns ``"transient"``, ``"fatal"``
            or ``None`` to fall back to the rules above (any other value also falls back).
    """

    max_attempts: int = 5
    base_delay: float = 1.0
    max_delay: float = 300.0
    multiplier: float = 2.0
    jitter: float = 0.5
    max_retry_after: float = 3600.0
    max_total_attempts: int | None = 50
    transient_errors: tuple[type[BaseException], ...] = ()
    fatal_errors: tuple[type[BaseException], ...] = ()
    not_applied_errors: tuple[type[BaseException], ...] = ()
    classifier: Callable[[BaseException], Classification | None] | None = None

    def __post_init__(self) -> None:
        # Fail at definition time, not on the first failure of a production workflow.
        if self.max_total_attempts is not None and self.max_total_attempts < 1:
            raise ValueError(
                f"RetryPolicy.max_total_attempts must be None or >= 1, "
                f"got {self.max_total_attempts}"
            )
        for name in ("transient_errors", "fatal_errors", "not_applied_errors"):
            _check_error_types(name, getattr(self, name))
        if self.classifier is not None and not callable(self.classifier):
            raise TypeError(f"RetryPolicy.classifier must be callable, got {self.classifier!r}")

    def delay(
        self, attempt: int, retry_after: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based)."""
        if retry_after is not None:
            return min(retry_after, self.max_retry_after)
        return backoff(
            attempt,
            initial=self.base_delay,
            factor=self.multiplier,
            maximum=self.max_delay,
            jitter=self.jitter,
            rng=rng,
        )

    def classify(self, exc: BaseException) -> Classification:
        """Transient or fatal, with this policy's overrides applied.

        Args:
            exc: what the handler or step raised.

        Returns:
            ``"transient"`` or ``"fatal"``.
        """
        if self.classifier is not None:
            verdict = self.classifier(exc)
            if verdict == "transient" or verdict == "fatal":
                return verdict
        if isinstance(exc, self.fatal_errors):
            return "fatal"
        if isinstance(exc, self.transient_errors) or isinstance(exc, self.not_applied_errors):
            return "transient"
        return classify(exc)

    def outcome(self, exc: BaseException) -> Outcome:
        """Whether the failed request may have had an effect, with ``not_applied_errors``.

        Args:
            exc: what the handler or step raised.

        Returns:
            ``"not_applied"`` or ``"unknown"`` (see :func:`outcome_of`).
        """
        if isinstance(exc, self.not_applied_errors):
            return "not_applied"
        return outcome_of(exc)
