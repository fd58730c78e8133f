"""OpenTelemetry metrics of journaled runs and fleets (extra ``otel``).

When ``opentelemetry-api`` is importable, these instruments are recorded on the meter
``tickwork``; otherwise every function here is a cheap no-op and nothing is imported.

| instrument | kind | what |
|---|---|---|
| ``tickwork.fleet.claims`` | counter | runs claimed by a worker |
| ``tickwork.fleet.lost_leases`` | counter | runs whose lease was lost (taken over, self-fenced) |
| ``tickwork.fleet.parked`` | counter | runs parked (only waiting, held in no memory) |
| ``tickwork.fleet.renew_latency`` | histogram (s) | one renewal of all of a worker's leases |
| ``tickwork.fleet.inbox_lag`` | histogram (s) | from a send to the tick it became |
| ``tickwork.journal.append_latency`` | histogram (s) | one group commit of a run |
"""

from __future__ import annotations

from typing import Any

from tickwork._otel import available

__all__ = ["add", "record", "recording"]

_INSTRUMENTS: dict[str, Any] | None = None

_COUNTERS = {
    "tickwork.fleet.claims": "runs claimed by a worker",
    "tickwork.fleet.lost_leases": "runs whose lease was lost",
    "tickwork.fleet.parked": "runs parked by a worker",
}
_HISTOGRAMS = {
    "tickwork.fleet.renew_latency": "seconds one renewal of a worker's leases took",
    "tickwork.fleet.inbox_lag": "seconds from a send to the tick it became",
    "tickwork.journal.append_latency": "seconds one group commit of a run took",
}


def _instruments() -> dict[str, Any] | None:
    global _INSTRUMENTS
    if not available():
        return None
    if _INSTRUMENTS is None:
        from opentelemetry import metrics

        meter = metrics.get_meter("tickwork")
        made: dict[str, Any] = {}
        for name, description in _COUNTERS.items():
            made[name] = meter.create_counter(name, description=description)
        for name, description in _HISTOGRAMS.items():
            made[name] = meter.create_histogram(name, unit="s", description=description)
        _INSTRUMENTS = made
    return _INSTRUMENTS


def add(name: str, amount: int = 1, **attributes: str) -> None:
    """Add ``amount`` to the counter ``name`` (a no-op without OpenTelemetry)."""
    instruments = _instruments()
    if instruments is not None:
        instruments[name].add(amount, attributes)


def record(name: str, value: float, **attributes: str) -> None:
    """Record ``value`` in the histogram ``name`` (a no-op without OpenTelemetry)."""
    # The instruments once made, without two calls (every durable append records one).
    instruments = _INSTRUMENTS if _INSTRUMENTS is not None else _instruments()
    if instruments is not None:
        instruments[name].record(value, attributes)


def recording(name: str) -> bool:
    """Whether a value recorded in the histogram ``name`` now goes anywhere: not without
    OpenTelemetry, nor while its instrument is the API's stand-in that has no real one
    yet (no meter provider installed: the API drops the value).  A caller may then skip
    measuring it (a durable run asks at every commit; the clock reads cost more than
    this look-up)."""
    instruments = _INSTRUMENTS if _INSTRUMENTS is not None else _instruments()
    if instruments is None:
        return False
    instrument = instruments[name]
    # The API's proxy instruments forward to ``_real_instrument`` once a provider is
    # set; any other instrument (or a proxy of another shape) records.
    return getattr(instrument, "_real_instrument", True) is not None
