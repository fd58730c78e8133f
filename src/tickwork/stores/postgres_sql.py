"""The SQL of the Postgres journal store, and the rows it reads back as records.

Every statement is built once per store, for its schema.  Each write is one statement
where it can be (a data-modifying ``WITH``): one round trip, one transaction, and the
fence (``owner``, ``epoch``, ``last_seq``) checked by the same statement that writes, so
that a refused write leaves nothing behind.
"""

from __future__ import annotations

import functools
from typing import Any

from tickwork.stores.postgres_schema import quote_ident
from tickwork.stores.records import InboxItem, RunEntry, RunOutcome, StreamItem, WorkerEntry

__all__ = [
    "ENTRY_WIDTH",
    "FINISHED_SQL",
    "append_statement",
    "claim_statement",
    "entry_columns",
    "entry_from_row",
    "inbox_item_from_row",
    "snapshot_statement",
    "stream_item_from_row",
    "worker_from_row",
]

FINISHED_SQL = "('completed', 'failed', 'timed_out', 'cancelled')"
"""The terminal statuses, as an SQL list."""


def _epoch(column: str) -> str:
    return f"extract(epoch FROM {column})::float8"


def entry_columns(alias: str) -> str:
    """The columns ``entry_from_row`` reads, from the runs table aliased ``alias``."""
    a = f"{alias}."
    return ", ".join(
        (
            f"{a}run_id",
            f"{a}workflow_name",
            f"{a}status",
            f"{a}last_seq",
            _epoch(f"{a}created_at"),
            _epoch(f"{a}updated_at"),
            f"{a}options",
            f"{a}start_event",
            f"{a}elapsed_alive",
            f"{a}queue",
            f"{a}priority",
            f"{a}owner",
            f"{a}epoch",
            _epoch(f"{a}lease_until"),
            _epoch(f"{a}wake_at"),
            f"{a}claims_without_progress",
            # ``json`` 'null' and SQL NULL load alike: say which one it was.
            f"({a}outcome_result IS NOT NULL OR {a}outcome_error IS NOT NULL)",
            f"{a}outcome_result",
            f"{a}outcome_error",
        )
    )


ENTRY_WIDTH = 19
"""How many columns ``entry_columns`` selects."""


def entry_from_row(row: tuple[Any, ...]) -> RunEntry:
    """A ``RunEntry`` from the first ``ENTRY_WIDTH`` columns of ``row``."""
    (
        run_id,
        workflow_name,
        status,
        last_seq,
        created_at,
        updated_at,
        options,
        start_event,
        elapsed_alive,
        queue,
        priority,
        owner,
        epoch,
        lease_until,
        wake_at,
        claims,
        has_outcome,
        result,
        error,
    ) = row[:ENTRY_WIDTH]
    return RunEntry(
        run_id,
        workflow_name,
        status,
        int(last_seq),
        created_at,
        updated_at,
        dict(options) if options else {},
        start_event,
        float(elapsed_alive),
        queue,
        int(priority),
        owner,
        int(epoch),
        lease_until,
        wake_at,
        int(claims),
        RunOutcome(result, error) if has_outcome else None,
    )


def inbox_item_from_row(row: tuple[Any, ...]) -> InboxItem:
    """An ``InboxItem`` from ``item_id, run_id, kind, payload, key, created_at``."""
    item_id, run_id, kind, payload, key, created_at = row
    return InboxItem(int(item_id), run_id, kind, payload, key, float(created_at))


def stream_item_from_row(row: tuple[Any, ...]) -> StreamItem:
    """A ``StreamItem`` from ``seq, event``."""
    return StreamItem(int(row[0]), row[1])


def worker_from_row(row: tuple[Any, ...]) -> WorkerEntry:
    """A ``WorkerEntry`` from ``worker_id, info, started_at, last_seen, runs``."""
    worker_id, info, started_at, last_seen, runs = row
    return WorkerEntry(worker_id, dict(info or {}), started_at, last_seen, tuple(runs or ()))


# The ways a run becomes claimable, each a condition one index serves (the partial
# indexes of the schema): queued; running with an expired lease; running without an
# owner (which has no lease either: a CHECK constraint); parked and due; parked with an
# unconsumed inbox item.
_CLAIMABLE = (
    ("queued", "c.status = 'queued'"),
    ("expired", "c.status = 'running' AND c.lease_until < now()"),
    ("unowned", "c.status = 'running' AND c.lease_until IS NULL"),
    ("due", "c.status = 'parked' AND c.wake_at <= now()"),
    (
        "called",
        "c.status = 'parked' AND c.run_id IN "
        "(SELECT i.run_id FROM {schema}.inbox AS i WHERE i.consumed_seq IS NULL)",
    ),
)
_CLAIM_ORDER = "ORDER BY priority DESC, created_at, run_id LIMIT %(limit)s"


# A claim of run ``r``, or its failure as a poison run (claimed ``max_claims`` times
# without progress): one SET for both, so that either happens in the claiming statement.
_POISON = "r.claims_without_progress >= %(max_claims)s"
_TAKE = f"""
    epoch = r.epoch + CASE WHEN {_POISON} THEN 0 ELSE 1 END,
    owner = CASE WHEN {_POISON} THEN NULL ELSE %(owner)s END,
    lease_until = CASE WHEN {_POISON} THEN NULL
        ELSE now() + make_interval(secs => %(lease_seconds)s) END,
    status = CASE WHEN {_POISON} THEN 'failed' ELSE 'running' END,
    wake_at = CASE WHEN {_POISON} THEN r.wake_at ELSE NULL END,
    claims_without_progress = r.claims_without_progress + CASE WHEN {_POISON} THEN 0 ELSE 1 END,
    outcome_result = CASE WHEN {_POISON} THEN 'null'::json ELSE r.outcome_result END,
    outcome_error = CASE WHEN {_POISON} THEN json_build_object(
        'exception_type', 'tickwork.stores.records.JournalError',
        'exception_message', 'run ' || quote_literal(r.run_id) || ' was claimed '
            || r.claims_without_progress || ' times without progress (a poison run: it '
            || 'kills or stalls every worker that takes it)')
        ELSE r.outcome_error END,
    updated_at = now()
"""


@functools.lru_cache(maxsize=64)
def claim_statement(schema: str, *, one_run: bool, by_queue: bool) -> str:
    """Claim runs: one named run (``%(run_id)s``, claimable or parked or already ours),
    or up to ``%(limit)s`` claimable runs of ``%(names)s`` (and ``%(queues)s``) in claim
    order, skipping the rows other claimers hold.  Returns the entries, poison runs
    (now ``failed``) included."""
    runs = f"{quote_ident(schema)}.runs"
    returning = f"RETURNING {entry_columns('r')}"
    if one_run:
        return (
            f"UPDATE {runs} AS r SET {_TAKE} WHERE r.run_id = %(run_id)s AND ("
            "r.status IN ('queued', 'parked') OR (r.status = 'running' AND ("
            "r.lease_until IS NULL OR r.lease_until < now() OR r.owner = %(owner)s))) "
            f"{returning}"
        )
    # Each way of being claimable takes its first ``limit`` runs in claim order from its
    # own index, skipping rows other claimers hold; the first ``limit`` of all of them
    # are claimed.  (One scan with the conditions OR-ed would read every unfinished run
    # of the workflows at each claim.)
    queue = " AND c.queue = ANY(%(queues)s)" if by_queue else ""
    candidates = ", ".join(
        f"{name} AS (SELECT c.run_id, c.priority, c.created_at FROM {runs} AS c "
        f"WHERE {condition.replace('{schema}', quote_ident(schema))} "
        f"AND c.workflow_name = ANY(%(names)s){queue} "
        f"ORDER BY c.priority DESC, c.created_at, c.run_id LIMIT %(limit)s "
        "FOR UPDATE OF c SKIP LOCKED)"
        for name, condition in _CLAIMABLE
    )
    union = " UNION ".join(f"SELECT * FROM {name}" for name, _ in _CLAIMABLE)
    return (
        f"WITH {candidates}, picked AS (SELECT run_id FROM ({union}) AS x {_CLAIM_ORDER}) "
        f"UPDATE {runs} AS r SET {_TAKE} FROM picked WHERE r.run_id = picked.run_id "
        f"{returning}"
    )


@functools.lru_cache(maxsize=256)
def append_statement(
    schema: str,
    *,
    fenced: bool,
    records: bool,
    one_record: bool,
    progress: bool,
    patch: bool,
    consumed: bool,
    stream: bool,
    final: bool,
) -> str:
    """One append as one statement: the runs row is updated first (fenced by owner,
    epoch and ``last_seq`` when ``fenced``), and everything else is written only through
    the row it returns, so a refused fence writes nothing.  The statement returns one
    row when the runs row was updated, none when it was not.  Records that are
    ``progress`` reset the run's poison counter.  The arrays go in binary (``%b``): as
    text, every quote of every JSON record would be escaped on the way.

    ``one_record`` (a batch of one, what a sequential step appends) passes the record
    as ``%(last)s`` and ``%(data)s`` instead of arrays: unpacking two arrays is an
    eighth of the server's work for such an append."""
    s = quote_ident(schema)
    sets = ["updated_at = now()"]
    where = ["run_id = %(run_id)s"]
    if records:
        sets.append("last_seq = %(last)s" if fenced else "last_seq = GREATEST(last_seq, %(last)s)")
        if progress:
            sets.append("claims_without_progress = 0")
    if final:
        sets += [
            "status = %(final)s",
            "outcome_result = %(result)s::json",
            "outcome_error = %(error)s::json",
            "lease_until = NULL",  # the owner stays: its final snapshot is still fenced
        ]
    if fenced:
        where += ["owner = %(owner)s", "epoch = %(epoch)s"]
        if records:
            where.append("last_seq = %(first)s - 1")
    parts = [
        f"fenced AS (UPDATE {s}.runs SET {', '.join(sets)} WHERE {' AND '.join(where)} "
        "RETURNING run_id, last_seq)"
    ]
    if records and one_record:
        parts.append(
            f"recs AS (INSERT INTO {s}.records (run_id, seq, data) "
            "SELECT f.run_id, %(last)s::bigint, %(data)s::json FROM fenced AS f)"
        )
    elif records:
        parts.append(
            f"recs AS (INSERT INTO {s}.records (run_id, seq, data) "
            "SELECT f.run_id, x.seq, x.data::json FROM fenced AS f, "
            "unnest(%(seqs)b::bigint[], %(datas)b::text[]) AS x(seq, data))"
        )
    if patch:
        parts.append(
            f"patch AS (INSERT INTO {s}.state_patches (run_id, after_seq, data) "
            "SELECT f.run_id, %(patch_seq)s, %(patch)s::json FROM fenced AS f "
            "ON CONFLICT (run_id, after_seq) DO UPDATE SET data = excluded.data)"
        )
    if consumed:
        parts.append(
            f"consumed AS (UPDATE {s}.inbox AS i "
            "SET consumed_seq = COALESCE(%(at)s::bigint, f.last_seq) FROM fenced AS f "
            "WHERE i.run_id = f.run_id AND i.item_id = ANY(%(consumed)b::bigint[]) "
            "AND i.consumed_seq IS NULL)"
        )
    if stream:
        parts.append(
            f"published AS (INSERT INTO {s}.stream (run_id, seq, event) "
            "SELECT f.run_id, x.seq, x.event::json FROM fenced AS f, "
            "unnest(%(stream_seqs)b::bigint[], %(stream_events)b::text[]) AS x(seq, event) "
            "ON CONFLICT (run_id, seq) DO UPDATE SET event = excluded.event)"
        )
    # ``SELECT 1``, not ``count(*)``: an aggregate is one more plan node to set up.
    return f"WITH {', '.join(parts)} SELECT 1 FROM fenced"


@functools.lru_cache(maxsize=16)
def snapshot_statement(schema: str, *, fenced: bool) -> str:
    """Replace the run's compacting snapshot (taken before ``%(seq)s``) and drop the
    records and patches it covers; returns 1 when the run exists (and the fence held)."""
    s = quote_ident(schema)
    fence = " AND owner = %(owner)s AND epoch = %(epoch)s" if fenced else ""
    return (
        f"WITH target AS (SELECT run_id FROM {s}.runs WHERE run_id = %(run_id)s{fence} "
        "FOR UPDATE), "
        f"snap AS (INSERT INTO {s}.snapshots (run_id, seq, data) "
        "SELECT run_id, %(seq)s, %(data)s::json FROM target "
        "ON CONFLICT (run_id) DO UPDATE SET seq = excluded.seq, data = excluded.data, "
        "written_at = now()), "
        f"old_records AS (DELETE FROM {s}.records AS x USING target AS t "
        "WHERE x.run_id = t.run_id AND x.seq < %(seq)s), "
        f"old_patches AS (DELETE FROM {s}.state_patches AS x USING target AS t "
        "WHERE x.run_id = t.run_id AND x.after_seq < %(seq)s) "
        "SELECT count(*) FROM target"
    )
