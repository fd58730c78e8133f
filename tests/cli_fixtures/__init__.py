"""Example workflow modules used by the CLI and drawing tests (``tests/test_cli.py``)."""
