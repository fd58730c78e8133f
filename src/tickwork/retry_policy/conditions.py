"""Retry conditions: whether an error is worth another attempt (api.md §12.3)."""

from __future__ import annotations

import re
from collections.abc import Callable

from tickwork.retry_policy._base import (
    _check_exception_types,
    _ExceptionTypes,
    _RetryConditionBase,
)

# --------------------------------------------------------------------------------------
# Retry conditions
# --------------------------------------------------------------------------------------


class retry_if_exception(_RetryConditionBase):
    """Retry when ``predicate(error)`` is true."""

    def __init__(self, predicate: Callable[[BaseException], bool]) -> None:
        if not callable(predicate):
            raise TypeError(f"predicate must be callable, got {predicate!r}")
        self.predicate = predicate

    def __call__(self, error: BaseException) -> bool:
        return bool(self.predicate(error))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.predicate!r})"


class retry_if_exception_type(_RetryConditionBase):
    """Retry when the error is an instance of ``exception_types``."""

    def __init__(self, exception_types: _ExceptionTypes = Exception) -> None:
        self.exception_types = _check_exception_types(exception_types, "exception_types")

    def __call__(self, error: BaseException) -> bool:
        return isinstance(error, self.exception_types)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.exception_types!r})"


class retry_if_not_exception_type(_RetryConditionBase):
    """Retry when the error is **not** an instance of ``exception_types``."""

    def __init__(self, exception_types: _ExceptionTypes = Exception) -> None:
        self.exception_types = _check_exception_types(exception_types, "exception_types")

    def __call__(self, error: BaseException) -> bool:
        return not isinstance(error, self.exception_types)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.exception_types!r})"


class retry_unless_exception_type(retry_if_not_exception_type):
    """The same as ``retry_if_not_exception_type``, under tenacity's other name."""


class retry_if_exception_message(_RetryConditionBase):
    """Retry when ``str(error)`` equals ``message``, or when ``match`` is found in it.

    Exactly one of ``message`` and ``match`` must be given, otherwise ``TypeError``.
    ``match`` is applied with ``re.search`` and may be a string or a compiled pattern.
    """

    def __init__(
        self, message: str | None = None, match: str | re.Pattern[str] | None = None
    ) -> None:
        if (message is None) == (match is None):
            raise TypeError(
                f"{type(self).__name__}() takes exactly one of 'message' (the exact text) "
                f"and 'match' (a regular expression), got message={message!r}, match={match!r}"
            )
        self.message = message
        self.match = match
        self._pattern = re.compile(match) if match is not None else None

    def _matches(self, error: BaseException) -> bool:
        text = str(error)
        if self._pattern is not None:
            return self._pattern.search(text) is not None
        return text == self.message

    def __call__(self, error: BaseException) -> bool:
        return self._matches(error)

    def __repr__(self) -> str:
        if self._pattern is not None:
            return f"{type(self).__name__}(match={self.match!r})"
        return f"{type(self).__name__}(message={self.message!r})"


class retry_if_not_exception_message(retry_if_exception_message):
    """Retry when ``retry_if_exception_message`` with the same arguments would not."""

    def __call__(self, error: BaseException) -> bool:
        return not self._matches(error)


class retry_if_exception_cause_type(_RetryConditionBase):
    """Retry when an exception in the error's ``__cause__`` chain matches.

    Only explicit causes (``raise ... from cause``) are followed, not ``__context__``, and
    the error itself is not checked: combine with ``retry_if_exception_type`` for that.
    """

    def __init__(self, exception_types: _ExceptionTypes = Exception) -> None:
        self.exception_types = _check_exception_types(exception_types, "exception_types")

    def __call__(self, error: BaseException) -> bool:
        seen: set[int] = set()
        cause = error.__cause__
        # A cause chain can loop when user code assigns ``__cause__`` by hand.
        while cause is not None and id(cause) not in seen:
            if isinstance(cause, self.exception_types):
                return True
            seen.add(id(cause))
            cause = cause.__cause__
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.exception_types!r})"


class retry_always(_RetryConditionBase):
    """Retry every error."""

    def __call__(self, error: BaseException) -> bool:
        return True

    def __repr__(self) -> str:
        return "retry_always()"


class retry_never(_RetryConditionBase):
    """Retry no error."""

    def __call__(self, error: BaseException) -> bool:
        return False

    def __repr__(self) -> str:
        return "retry_never()"
