"""tickwork internals."""
