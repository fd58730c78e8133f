"""Private helpers of the ``tickwork`` command (:mod:`tickwork.cli`), one job per module."""
