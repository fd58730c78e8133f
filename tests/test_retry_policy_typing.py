"""The retry primitives' protocols, as ``mypy --strict`` sees them (api.md §12.1).

``RetryCondition``, ``WaitStrategy`` and ``StopCondition`` are protocols, so tenacity's
own objects, tickwork's primitives and any callable of the right shape type-check as
arguments of ``retry_any``/``retry_all``, ``wait_chain``/``wait_combine``,
``stop_any``/``stop_all`` and ``retry_policy``; callables of the wrong shape do not.
Each test writes a small module and checks it with ``mypy.api.run``.  Skipped when mypy
or tenacity is not installed.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")
pytest.importorskip("tenacity")

import tickwork  # noqa: E402 - after the importorskips on purpose

SRC = Path(tickwork.__file__).resolve().parents[1]

# Only the retry modules are analysed; the rest of tickwork is skipped (it would take
# ten seconds more and has nothing to do with these annotations).  Skipped modules turn
# into Any, which would make every call type-check: ``test_wrong_shapes_are_rejected``
# is the guard against that.
CONFIG = """\
[mypy]
strict = True
mypy_path = {src}
cache_dir = {cache}

[mypy-tickwork.*]
follow_imports = skip

[mypy-tickwork.retry_policy,tickwork.retry_policy.*,tickwork._deprecation]
follow_imports = normal
"""

IMPORTS = """\
from __future__ import annotations

import tenacity

from tickwork.retry_policy import (
    RetryCondition,
    RetryPolicy,
    StopCondition,
    WaitStrategy,
    retry_all,
    retry_any,
    retry_if_exception_type,
    retry_policy,
    stop_after_attempt,
    stop_after_delay,
    stop_all,
    stop_any,
    wait_chain,
    wait_combine,
    wait_exponential,
    wait_fixed,
)
"""

WELL_TYPED = """\
def is_timeout(error: BaseException) -> bool:
    return isinstance(error, TimeoutError)


class TooManyTries:
    def __call__(self, attempts: int, elapsed: float, *, upcoming_sleep: float = 0.0) -> bool:
        return attempts >= 5


class Doubling:
    def __call__(self, attempts: int) -> float:
        return 2.0**attempts


class TenacityShaped:
    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return retry_state.attempt_number > 2


retry: RetryCondition = retry_any(
    tenacity.retry_if_exception_type(ValueError),
    tenacity.retry_if_exception_message(match="busy") | tenacity.retry_if_exception_type(OSError),
    retry_if_exception_type(KeyError),
    is_timeout,
    lambda error: False,
)
both: RetryCondition = retry_all(tenacity.retry_if_exception_type(LookupError), is_timeout)
mixed_operators = retry_if_exception_type(KeyError) | tenacity.retry_if_exception_type(OSError)

stop: StopCondition = stop_any(
    tenacity.stop_after_attempt(3),
    tenacity.stop_after_delay(10) | tenacity.stop_after_attempt(5),
    stop_after_attempt(4),
    TooManyTries(),
    TenacityShaped(),
)
stop_both: StopCondition = stop_all(tenacity.stop_before_delay(5), stop_after_delay(9))

wait: WaitStrategy = wait_chain(tenacity.wait_fixed(1), wait_fixed(2), Doubling())
wait_sum: WaitStrategy = wait_combine(
    tenacity.wait_exponential(multiplier=1),
    tenacity.wait_random(0, 1) + tenacity.wait_fixed(3),
    wait_exponential(),
    Doubling(),
)

policies: list[RetryPolicy] = [
    retry_policy(retry=retry, wait=wait, stop=stop),
    retry_policy(
        retry=tenacity.retry_if_exception_type(OSError),
        wait=tenacity.wait_fixed(1),
        stop=tenacity.stop_after_attempt(2),
    ),
    retry_policy(retry=is_timeout, wait=Doubling(), stop=TooManyTries()),
]
"""

# Every line ending in ``# error`` must be reported, and no other.
WRONG_SHAPES = """\
def no_arguments() -> bool:
    return True


def returns_text(attempts: int) -> str:
    return "soon"


retry_any(no_arguments)  # error
retry_all(tenacity.wait_fixed(1))  # error
retry_any(wait_fixed(1))  # error
wait_chain(returns_text)  # error
wait_combine(stop_after_attempt(3))  # error
stop_any(3)  # error
stop_all(no_arguments)  # error
retry_policy(wait=returns_text)  # error
retry_policy(stop=tenacity.wait_fixed(1))  # error
"""


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One mypy cache for the module: the second check reuses the first one's analysis."""
    return tmp_path_factory.mktemp("mypy-cache")


def check(tmp_path: Path, cache_dir: Path, body: str) -> tuple[str, int, str]:
    """mypy's report, exit status and the checked source for ``IMPORTS + body``."""
    source = IMPORTS + "\n\n" + textwrap.dedent(body)
    module = tmp_path / "snippet.py"
    module.write_text(source)
    config = tmp_path / "mypy.ini"
    config.write_text(CONFIG.format(src=SRC, cache=cache_dir))
    report, errors, status = mypy_api.run(
        ["--config-file", str(config), "--no-error-summary", str(module)]
    )
    assert errors == "", errors
    return report, status, source


def test_tenacity_objects_and_custom_callables_type_check(tmp_path: Path, cache_dir: Path) -> None:
    report, status, _ = check(tmp_path, cache_dir, WELL_TYPED)
    assert status == 0, report
    assert "error" not in report, report


def test_wrong_shapes_are_rejected(tmp_path: Path, cache_dir: Path) -> None:
    report, status, source = check(tmp_path, cache_dir, WRONG_SHAPES)
    assert status == 1, report
    expected = {
        number
        for number, line in enumerate(source.splitlines(), start=1)
        if line.endswith("# error")
    }
    reported = {int(n) for n in re.findall(r"^.*snippet\.py:(\d+): error:", report, re.M)}
    assert reported == expected, report
