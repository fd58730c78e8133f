"""Hypothesis strategies for JSON-able values, shared by the tests that compare a text
written by tickwork with ``json.dumps``'s."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(*, key_size: int, text_size: int, max_leaves: int) -> st.SearchStrategy[Any]:
    """Any value ``json.dumps`` writes: scalars (huge integers, NaN and infinities
    included) nested in lists and string-keyed dictionaries."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.text(max_size=text_size)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(max_size=key_size), inner, max_size=3)
        ),
        max_leaves=max_leaves,
    )
