"""JSON Patch (RFC 6902 ``add`` / ``remove`` / ``replace``) over state sections.

``apply_state_patch`` is public (re-exported by ``tickwork.context.state_store``).
``diff_trees`` is the engine behind ``StateCheckpoint.diff``: it walks two object graphs
side by side, skips subtrees shared by identity, and asks an ``encode`` callback for the
JSON tree of whatever changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["apply_state_patch", "diff_trees", "json_equal", "pointer"]

PatchOp = dict[str, Any]
Encode = Callable[[Any], Any]

_SUPPORTED_OPS = ("add", "remove", "replace")


def pointer(parent: str, token: str | int) -> str:
    """``parent`` extended by one JSON Pointer token (``~`` and ``/`` escaped)."""
    escaped = str(token).replace("~", "~0").replace("/", "~1")
    return f"{parent}/{escaped}"


def _parse_pointer(path: str) -> list[str]:
    """The unescaped tokens of a JSON Pointer; ``[]`` for the root ``""``."""
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"invalid JSON Pointer {path!r}: it must be empty or start with '/'")
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def json_equal(left: Any, right: Any) -> bool:
    """Equality of JSON trees that also tells ``1``, ``1.0`` and ``True`` apart."""
    if type(left) is not type(right):
        return False
    if type(left) is dict:
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    if type(left) is list:
        return len(left) == len(right) and all(map(json_equal, left, right))
    return bool(left == right)


def is_tree_dict(value: Any) -> bool:
    """Whether ``value`` is walked key by key (a plain dict with string keys)."""
    return type(value) is dict and all(type(key) is str for key in value)


def diff_trees(path: str, old: Any, new: Any, encode: Encode) -> list[PatchOp]:
    """Patch operations turning ``encode(old)`` into ``encode(new)``, rooted at ``path``.

    ``encode`` must be compositional: the tree of a plain string-keyed dict is the dict
    of its values' trees, and the tree of a list is the list of its items' trees. Objects
    shared by identity are skipped without being walked. A container whose changes
    would take at least as many operations as it has entries is replaced as a whole.
    """
    ops: list[PatchOp] = []
    _diff_into(ops, path, old, new, encode)
    return ops


def _diff_into(ops: list[PatchOp], path: str, old: Any, new: Any, encode: Encode) -> None:
    if old is new:
        return
    if is_tree_dict(old) and is_tree_dict(new):
        _diff_container(ops, path, new, _dict_changes(path, old, new, encode), encode)
    elif type(old) is list and type(new) is list:
        _diff_container(ops, path, new, _list_changes(path, old, new, encode), encode)
    else:
        new_tree = encode(new)
        if not json_equal(encode(old), new_tree):
            ops.append({"op": "replace", "path": path, "value": new_tree})


def _diff_container(
    ops: list[PatchOp], path: str, new: Any, changes: list[PatchOp], encode: Encode
) -> None:
    if len(changes) > 1 and len(changes) >= len(new):
        ops.append({"op": "replace", "path": path, "value": encode(new)})
    else:
        ops.extend(changes)


def _dict_changes(
    path: str, old: dict[str, Any], new: dict[str, Any], encode: Encode
) -> list[PatchOp]:
    changes: list[PatchOp] = [
        {"op": "remove", "path": pointer(path, key)} for key in old if key not in new
    ]
    for key, value in new.items():
        if key in old:
            _diff_into(changes, pointer(path, key), old[key], value, encode)
        else:
            changes.append({"op": "add", "path": pointer(path, key), "value": encode(value)})
    return changes


def _list_changes(path: str, old: list[Any], new: list[Any], encode: Encode) -> list[PatchOp]:
    common = min(len(old), len(new))
    changes: list[PatchOp] = []
    for index in range(common):
        _diff_into(changes, pointer(path, index), old[index], new[index], encode)
    for index in range(common, len(new)):
        changes.append({"op": "add", "path": pointer(path, index), "value": encode(new[index])})
    # Remove from the end so earlier indexes stay valid.
    for index in range(len(old) - 1, common - 1, -1):
        changes.append({"op": "remove", "path": pointer(path, index)})
    return changes


def apply_state_patch(state: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """``state`` with the JSON Patch ``patch`` applied; ``state`` is not mutated.

    Supports ``add``, ``remove`` and ``replace`` with RFC 6901 pointers (``~1`` and ``~0``
    escapes; ``""`` is the root). Containers on patched paths are copied once per call;
    everything else, including the values taken from ``patch``, is shared.
    Raises ``ValueError`` naming the operation for any other op, and naming the path
    for a target that does not exist.
    """
    owned: set[int] = set()
    root: Any = state
    for operation in patch:
        root = _apply_one(root, operation, owned)
    result: dict[str, Any] = root
    return result


def _own(container: Any, owned: set[int], path: str) -> Any:
    """``container`` itself if this call already copied it, else a fresh shallow copy."""
    if id(container) in owned:
        return container
    if isinstance(container, dict):
        clone: Any = dict(container)
    elif isinstance(container, list):
        clone = list(container)
    else:
        raise ValueError(
            f"JSON Patch path {path!r} goes through a {type(container).__name__}, "
            "which is not a container"
        )
    owned.add(id(clone))
    return clone


def _apply_one(root: Any, operation: dict[str, Any], owned: set[int]) -> Any:
    """Apply one operation to ``root`` and return the (possibly new) root."""
    op = operation.get("op")
    if op not in _SUPPORTED_OPS:
        raise ValueError(
            f"unsupported JSON Patch op {op!r}; only 'add', 'remove' and 'replace' are allowed"
        )
    path = str(operation.get("path", ""))
    tokens = _parse_pointer(path)
    if not tokens:
        if op == "remove":
            raise ValueError("JSON Patch 'remove' cannot remove the root")
        return operation.get("value")
    new_root = _own(root, owned, path)
    parent = new_root
    for token in tokens[:-1]:
        key = _container_key(parent, token, path, allow_end=False)
        child = _own(parent[key], owned, path)
        parent[key] = child
        parent = child
    _apply_at(parent, tokens[-1], str(op), operation, path)
    return new_root


def _container_key(container: Any, token: str, path: str, *, allow_end: bool) -> Any:
    """``token`` as a key of ``container``; ``ValueError`` naming ``path`` when absent."""
    if isinstance(container, dict):
        if token not in container and not allow_end:
            raise ValueError(f"JSON Patch path {path!r} does not exist")
        return token
    if isinstance(container, list):
        limit = len(container) + (1 if allow_end else 0)
        if token == "-" and allow_end:
            return len(container)
        if token.isdigit() and int(token) < limit:
            return int(token)
    raise ValueError(f"JSON Patch path {path!r} does not exist")


def _apply_at(parent: Any, token: str, op: str, operation: dict[str, Any], path: str) -> None:
    value = operation.get("value")
    if op == "add":
        key = _container_key(parent, token, path, allow_end=True)
        if isinstance(parent, list):
            parent.insert(key, value)
        else:
            parent[key] = value
        return
    key = _container_key(parent, token, path, allow_end=False)
    if op == "remove":
        del parent[key]
    else:
        parent[key] = value
