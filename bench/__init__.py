"""tickwork's benchmark suite: ``python -m bench`` (or ``nox -s bench``).

One module per scenario, each exposing ``SCENARIO``; ``bench.run`` measures them and prints
the table. See ``quality.md`` for what each scenario is for and the goals it is held to.
"""
