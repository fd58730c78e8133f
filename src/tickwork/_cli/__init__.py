"""Private helpers of the ``tickwork`` command (``tickwork.cli``), one job per module."""
