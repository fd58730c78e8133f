"""``tickwork db``: manage the schema of a Postgres journal.

Command::

    tickwork db migrate --dsn DSN [--schema SCHEMA]

``migrate`` creates the schema (``tickwork`` by default) and its tables, or brings them
to this version of tickwork; it is safe to run from several processes at once and does
nothing when the schema is up to date.  It prints the schema's version on stdout.
Needs the ``tickwork[postgres]`` extra.
"""

from __future__ import annotations

import argparse

from tickwork._cli.console import EXIT_OK, CliError, Console

__all__ = ["add_db_command"]


def add_db_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``db`` and its actions to the ``tickwork`` command's subcommands."""
    db = commands.add_parser("db", help="manage the schema of a Postgres journal")
    actions = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    migrate = actions.add_parser(
        "migrate", help="create or upgrade the tickwork tables in a Postgres schema"
    )
    migrate.add_argument(
        "--dsn", required=True, metavar="DSN", help="libpq connection string or URL"
    )
    migrate.add_argument(
        "--schema",
        default="tickwork",
        metavar="SCHEMA",
        help="the schema holding the tables (default: tickwork)",
    )
    migrate.set_defaults(command=_command_db_migrate)


def _command_db_migrate(args: argparse.Namespace, console: Console) -> int:
    try:
        from tickwork.stores.postgres import PostgresJournal
        from tickwork.stores.postgres_schema import LATEST_VERSION
    except ImportError as error:
        raise CliError(
            f"tickwork db needs the postgres extra ({error}): pip install 'tickwork[postgres]'"
        ) from None
    store = PostgresJournal(args.dsn, args.schema, migrate=False)
    try:
        applied = store.migrate()
    finally:
        store.close()
    if applied:
        done = ", ".join(str(version) for version in applied)
        console.progress("db", f"applied migration(s) {done}", "green")
    print(f"schema {args.schema!r} is at version {LATEST_VERSION}")
    return EXIT_OK
