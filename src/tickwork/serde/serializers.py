"""Serializers: how snapshots, journals and state values become strings and back.

``JsonSerializer`` is the safe default. It writes pydantic models and LlamaIndex-style
components as *envelopes* (a dict naming the class by ``module.qualname``) and resolves
those names back into classes either by import or, when an allow-list is given, only from
that list. ``PickleSerializer`` adds a pickle fallback for values JSON cannot express and
must never be used on untrusted data.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import pickle
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from pydantic import BaseModel

from tickwork import errors, events
from tickwork._serde_fields import RESOLVER, qualified_name, resolve_by_import, using_resolver
from tickwork.events import DictLikeModel, StopEvent
from tickwork.serde.plain_text import PLAIN_CLASSES, PlainFields, plain_fields, plain_text

__all__ = [
    "BaseSerializer",
    "JsonPickleSerializer",
    "JsonSerializer",
    "PickleSerializer",
]

_PYDANTIC_MARKER = "__is_pydantic"
_COMPONENT_MARKER = "__is_component"
# Every pickle protocol >= 2 starts with the PROTO opcode; anything else is not ours.
_PICKLE_PROTO_OPCODE = b"\x80"

_registered_framework_types: list[type] = []
_framework_types_by_name: dict[str, type] | None = None


def register_framework_types(*classes: type) -> None:
    """Allow ``classes`` in every allow-listed ``JsonSerializer``, present and future.

    tickwork calls this for its own payload types (journal records and the like) so that
    ``JsonSerializer(allowed_types=[])`` can still decode what the runtime writes. It is
    idempotent; registering a class twice has no further effect.
    """
    global _framework_types_by_name
    for cls in classes:
        if not isinstance(cls, type):
            raise TypeError(f"register_framework_types() takes classes, got {cls!r}")
        if cls not in _registered_framework_types:
            _registered_framework_types.append(cls)
    _framework_types_by_name = None


def _framework_types_by_qualified_name() -> dict[str, type]:
    """Name -> class for the types every allow-list admits (built once, then cached).

    These are every class exported by ``tickwork.events`` and ``tickwork.errors``,
    and whatever ``register_framework_types`` added (the state store registers its
    ``DictState`` when it is imported: it lives above this layer).
    """
    global _framework_types_by_name
    if _framework_types_by_name is None:
        classes: list[type] = [*_registered_framework_types]
        for module in (events, errors):
            for name in module.__all__:
                obj = getattr(module, name)
                if isinstance(obj, type):
                    classes.append(obj)
        registry: dict[str, type] = {}
        for cls in classes:
            _register_class(registry, cls)
        _framework_types_by_name = registry
    return _framework_types_by_name


def _register_class(registry: dict[str, type], cls: type) -> None:
    """Register ``cls`` under ``module.qualname`` and ``module.name``."""
    registry[qualified_name(cls)] = cls
    registry[f"{cls.__module__}.{cls.__name__}"] = cls


def _is_component(value: Any) -> bool:
    """Whether ``value`` looks like a LlamaIndex component (``class_name`` + dict codec)."""
    return (
        not isinstance(value, type)
        and hasattr(value, "class_name")
        and callable(getattr(value, "to_dict", None))
        and callable(getattr(type(value), "from_dict", None))
    )


def _reject_unencodable(value: Any) -> Any:
    """``json.dumps`` hook: name the first value JSON cannot express."""
    raise ValueError(
        f"cannot JSON-serialize a value of type {type(value).__name__}: {value!r}; "
        "use PickleSerializer() for values JSON cannot express"
    )


# model_validate implementations whose result, for a dict of declared fields only, is
# exactly what validating into a bare instance gives (no custom __init__ re-run).
_PLAIN_VALIDATE = {
    DictLikeModel.model_validate.__func__,  # type: ignore[attr-defined]
    StopEvent.model_validate.__func__,  # type: ignore[attr-defined]
}
# cls -> (its validator when cached, the declared field names), for _validate.
_DECLARED: dict[type, tuple[Any, Any]] = {}


def _validate(cls: type[BaseModel], value: Any) -> BaseModel:
    """``cls.model_validate(value)``; for tickwork events holding declared fields only,
    validates straight into a bare instance (a third of the cost: no classmethod layers).

    The cache entry is checked against the class's current validator, so a
    ``model_rebuild()`` is picked up.
    """
    validator = cls.__pydantic_validator__
    entry = _DECLARED.get(cls)
    if entry is None or entry[0] is not validator:
        fast = getattr(cls.model_validate, "__func__", None) in _PLAIN_VALIDATE
        if len(_DECLARED) >= 4096:  # bounded: classes made on the fly must not pile up
            _DECLARED.clear()
        entry = _DECLARED[cls] = (validator, cls.__pydantic_fields__.keys() if fast else None)
    declared = entry[1]
    if declared is not None and type(value) is dict and value.keys() <= declared:
        model = cls.__new__(cls)
        validator.validate_python(value, self_instance=model)
        return model
    validated: BaseModel = cls.model_validate(value)
    return validated


def _make_dumps() -> tuple[Callable[[Any], str], Callable[[Any, int], list[str]] | None]:
    """``json.dumps(value, default=_reject_unencodable)``, with one reusable C encoder,
    and that encoder (``encoder(value, 0)`` is the list of pieces of the text).

    ``json.dumps`` builds a new encoder on every call, which costs twice the encoding of
    a small envelope.  Same output; a reference cycle surfaces as ``RecursionError``
    (no circular-reference bookkeeping), which ``serialize`` reports as such.
    """
    if c_make_encoder is None:  # pragma: no cover - CPython always has the accelerator
        return functools.partial(json.dumps, default=_reject_unencodable), None
    encode = c_make_encoder(
        None, _reject_unencodable, encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    return (lambda value: "".join(encode(value, 0))), encode


_dumps, _pieces = _make_dumps()

_MODEL_TEXT_HEAD = '{"' + _PYDANTIC_MARKER + '": true, "value": '


def model_text(model: BaseModel, tails: dict[type, str] | None = None) -> str:
    """What ``JsonSerializer().serialize(model)`` returns for a pydantic model, written
    as text around the model's dump instead of through an envelope dict.

    The characters are the same: the encoder writes a nested value exactly as it writes
    it alone, and the envelope's keys come in this order.  Snapshots serialize every
    event a run holds, so they take this path (see ``writes_model_text``); ``tails``
    keeps the text after the dump by class (not for classes of ``__main__``, whose
    name follows the running script).  Raises whatever dumping the model raises,
    unwrapped: a caller that wants ``serialize``'s errors calls ``serialize`` when this
    fails.
    """
    cls = type(model)
    serializer = cls.__pydantic_serializer__
    entry = PLAIN_CLASSES.get(cls)  # plain_fields(), inline: this runs once per event
    fields = entry[1] if entry is not None and entry[0] is serializer else _plain(model)
    value = None if fields is None else plain_text(model, fields)
    tail = tails.get(cls) if tails is not None else None
    if tail is None:
        tail = ', "qualified_name": ' + encode_basestring_ascii(qualified_name(cls)) + "}"
        if tails is not None and cls.__module__ != "__main__":
            tails[cls] = tail
    if value is not None:
        return _MODEL_TEXT_HEAD + value + tail
    dumped = serializer.to_python(model, mode="json")
    if _pieces is None:  # pragma: no cover - CPython always has the accelerator
        return _MODEL_TEXT_HEAD + _dumps(dumped) + tail
    return "".join([_MODEL_TEXT_HEAD, *_pieces(dumped, 0), tail])


MODEL_TEXT_HEAD = _MODEL_TEXT_HEAD
"""How ``model_text`` begins (see ``plain_text_parts``)."""


def plain_text_parts(cls: type, tails: dict[type, str]) -> tuple[Any, PlainFields, str] | None:
    """What ``model_text(model, tails)`` is written from for events of ``cls``: its pydantic
    serializer, its plain fields and its tail, when ``model_text`` has decided that the
    class is plain and keeps its tail in ``tails`` (``None`` otherwise).

    While ``cls.__pydantic_serializer__`` is the one returned, ``model_text(model, tails)``
    is ``MODEL_TEXT_HEAD + plain_text(model, fields) + tail`` for every event whose
    ``plain_text`` is not ``None``: a caller writing many events of one class (snapshots)
    keeps these parts and skips ``model_text``'s lookups.
    """
    entry = PLAIN_CLASSES.get(cls)
    tail = tails.get(cls)
    if entry is None or entry[1] is None or tail is None:
        return None
    return entry[0], entry[1], tail


def _pydantic_value_text(model: BaseModel) -> str:
    """The text of ``model``'s dump written by pydantic and the encoder."""
    return _dumps(type(model).__pydantic_serializer__.to_python(model, mode="json"))


def _plain(model: BaseModel) -> PlainFields | None:
    """The plain fields of ``model``'s class (see ``tickwork.serde.plain_text``)."""
    return plain_fields(model, _pydantic_value_text)


def _not_importable(name: str) -> ValueError:
    """The error for a class name that import cannot resolve."""
    return ValueError(
        f"cannot resolve class {name!r} by import; classes defined inside a "
        "function cannot be imported: pass them to "
        "JsonSerializer(allowed_types=[...])"
    )


class BaseSerializer(ABC):
    """Turns values into strings and back; the interface every serializer implements."""

    @abstractmethod
    def serialize(self, value: Any) -> str:
        """Encode ``value`` as a string. Raises ``ValueError`` if it cannot."""

    @abstractmethod
    def deserialize(self, value: str) -> Any:
        """Decode a string written by ``serialize``. Raises ``ValueError`` if it cannot."""

    def to_record(self, value: Any) -> Any:
        """``value`` as JSON-compatible data to embed in a journal record.

        The default is ``serialize``'s string; serializers that can produce data
        the record's own JSON encoding carries (saving a nested parse on every read)
        return that instead.
        """
        return self.serialize(value)

    def from_record(self, data: Any) -> Any:
        """Decode what ``to_record`` produced (strings always go to ``deserialize``)."""
        return self.deserialize(data)

    def resolve_class(self, name: str) -> type:
        """The class named ``module.qualname``, found by import.

        Raises ``ValueError`` naming ``name`` when it cannot be imported (classes defined
        inside functions never can).
        """
        try:
            return resolve_by_import(name)
        except ImportError as err:
            raise _not_importable(name) from err

    def validation_context(self) -> AbstractContextManager[None]:
        """A block in which nested envelope fields resolve classes through this serializer.

        The default does nothing, so nested classes resolve by import.
        """
        return nullcontext()


class JsonSerializer(BaseSerializer):
    """JSON with envelopes for pydantic models and components.

    ``allowed_types=None`` resolves every envelope's class by import. Otherwise only the
    given classes (registered under ``module.__qualname__`` and ``module.__name__``), the
    given ``"module.QualName"`` strings (resolved by import) and tickwork's framework types
    are accepted; any other name raises ``ValueError``. An empty collection therefore
    admits only the framework types.
    """

    _custom_context: bool = True  # until __init__ knows better: the safe slow path

    def __init__(self, *, allowed_types: Iterable[type | str] | None = None) -> None:
        self._allowed_types: tuple[type | str, ...] | None = None
        self._allowed_classes: dict[str, type] = {}
        self._allowed_names: frozenset[str] = frozenset()
        # A subclass with its own validation_context() gets it called (see from_record).
        self._custom_context = (
            type(self).validation_context is not JsonSerializer.validation_context
        )
        if allowed_types is not None:
            self._set_allow_list(tuple(allowed_types))

    def _set_allow_list(self, allowed: tuple[type | str, ...]) -> None:
        classes: dict[str, type] = {}
        names: set[str] = set()
        for entry in allowed:
            if isinstance(entry, type):
                _register_class(classes, entry)
            elif isinstance(entry, str):
                names.add(entry)
            else:
                raise TypeError(
                    f"allowed_types entries must be classes or 'module.QualName' strings, "
                    f"got {entry!r}"
                )
        self._allowed_types = allowed
        self._allowed_classes = classes
        self._allowed_names = frozenset(names)

    @property
    def allowed_types(self) -> tuple[type | str, ...] | None:
        """The allow-list as given (classes and names), or ``None`` for import-anything."""
        return self._allowed_types

    def with_types(self, *classes: type | str) -> JsonSerializer:
        """A copy whose allow-list also admits ``classes``; ``self`` when there is none."""
        if self._allowed_types is None:
            return self
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone._set_allow_list((*self._allowed_types, *classes))
        return clone

    def resolve_class(self, name: str) -> type:
        """The class named ``name``, honouring the allow-list.

        Raises ``ValueError`` naming the class when it is not allowed or cannot be found.
        """
        if self._allowed_types is None or name in self._allowed_names:
            try:
                return resolve_by_import(name)
            except ImportError as err:
                raise _not_importable(name) from err
        cls = self._allowed_classes.get(name) or _framework_types_by_qualified_name().get(name)
        if cls is None:
            raise ValueError(
                f"class {name!r} is not allowed by this serializer; add it to "
                "JsonSerializer(allowed_types=[...]) to allow it"
            )
        return cls

    def validation_context(self) -> AbstractContextManager[None]:
        """Resolve nested envelope classes through ``resolve_class`` in the block."""
        return using_resolver(self.resolve_class)

    def serialize(self, value: Any) -> str:
        """JSON text of ``value`` with models and components wrapped in envelopes.

        Raises ``ValueError`` naming the type and showing the value that JSON cannot
        express (or naming the model whose ``model_dump`` failed).
        """
        try:
            return _dumps(self._encode(value))
        except RecursionError as err:
            raise ValueError(
                f"cannot JSON-serialize a value of type {type(value).__name__}: it is "
                "nested too deeply or contains a reference cycle"
            ) from err
        except TypeError as err:
            raise ValueError(
                f"cannot JSON-serialize a value of type {type(value).__name__}: {err}"
            ) from err

    def deserialize(self, value: str) -> Any:
        """Parse JSON text and rebuild every envelope inside ``validation_context``.

        Raises ``ValueError`` for text that is not JSON and for envelopes whose class is
        unknown, not allowed, or rejects the stored value.
        """
        data = json.loads(value)
        with self.validation_context():
            return self._decode(data)

    def to_record(self, value: Any) -> Any:
        """A model's envelope as data (JSON-safe by construction); anything else as text."""
        if isinstance(value, BaseModel):
            return self._model_envelope(value)
        return self.serialize(value)

    def from_record(self, data: Any) -> Any:
        """Decode an envelope written by ``to_record``, or text from ``serialize``."""
        if not (type(data) is dict and data.get(_PYDANTIC_MARKER) is True):
            if isinstance(data, str):
                return self.deserialize(data)
            raise ValueError(
                f"expected serializer text or a model envelope, got {type(data).__name__}"
            )
        if self._custom_context:
            with self.validation_context():
                return self._decode_model(data)
        # validation_context() without building a context manager: one per event.
        token = RESOLVER.set(self.resolve_class)
        try:
            return self._decode_model(data)
        finally:
            RESOLVER.reset(token)

    def _encode(self, value: Any) -> Any:
        """``value`` as JSON-ready data; leaves are left for ``json.dumps`` to check."""
        if isinstance(value, BaseModel):
            return self._model_envelope(value)
        if _is_component(value):
            return {
                _COMPONENT_MARKER: True,
                "value": value.to_dict(),
                "qualified_name": qualified_name(type(value)),
            }
        if isinstance(value, dict):
            return {key: self._encode(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._encode(item) for item in value]
        return value

    def _model_envelope(self, model: BaseModel) -> dict[str, Any]:
        try:
            # model_dump(mode="json") without its Python-level argument handling.
            dumped = type(model).__pydantic_serializer__.to_python(model, mode="json")
        except ValueError as err:
            raise ValueError(
                f"cannot JSON-serialize {type(model).__name__} {model!r}: {err}"
            ) from err
        return {
            _PYDANTIC_MARKER: True,
            "value": dumped,
            "qualified_name": qualified_name(type(model)),
        }

    def _decode(self, data: Any) -> Any:
        """Rebuild envelopes found anywhere in parsed JSON ``data``."""
        if isinstance(data, dict):
            if data.get(_PYDANTIC_MARKER) is True:
                return self._decode_model(data)
            if data.get(_COMPONENT_MARKER) is True:
                cls = self.resolve_class(str(data.get("qualified_name")))
                return cls.from_dict(data.get("value"))  # type: ignore[attr-defined]
            return {key: self._decode(item) for key, item in data.items()}
        if isinstance(data, list):
            return [self._decode(item) for item in data]
        return data

    def _decode_model(self, envelope: dict[str, Any]) -> BaseModel:
        name = str(envelope.get("qualified_name"))
        cls = self.resolve_class(name)
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            raise ValueError(f"envelope class {name!r} is not a pydantic model")
        return _validate(cls, envelope.get("value"))


def writes_model_text(serializer: BaseSerializer) -> bool:
    """Whether ``serializer.serialize(model)`` is ``model_text(model)`` for every model:
    the serializer is a ``JsonSerializer`` whose encoding methods are not overridden."""
    kind = type(serializer)
    return (
        issubclass(kind, JsonSerializer)
        and kind.serialize is JsonSerializer.serialize
        and kind._encode is JsonSerializer._encode
        and kind._model_envelope is JsonSerializer._model_envelope
    )


class PickleSerializer(JsonSerializer):
    """JSON first, base64-encoded pickle for whatever JSON cannot express.

    **Unsafe for untrusted data**: unpickling can run arbitrary code, and the allow-list
    of ``JsonSerializer`` does not apply to pickled values.
    """

    # Journal records carry this serializer's text: a pickled value is not JSON data.
    to_record = BaseSerializer.to_record
    from_record = BaseSerializer.from_record

    def serialize(self, value: Any) -> str:
        """JSON text when possible, else ``base64(pickle.dumps(value))``.

        Raises ``ValueError`` naming the type when neither works.
        """
        try:
            return super().serialize(value)
        except ValueError:
            pass
        try:
            raw = pickle.dumps(value)
        except Exception as err:
            raise ValueError(
                f"cannot serialize a value of type {type(value).__name__} with JSON or "
                f"pickle: {err}"
            ) from err
        return base64.b64encode(raw).decode("ascii")

    def deserialize(self, value: str) -> Any:
        """Unpickle base64 pickle text; otherwise decode it as JSON.

        Raises ``ValueError`` when neither works, carrying the pickle error if the text
        looked like a pickle.
        """
        pickle_error: Exception | None = None
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if raw[:1] == _PICKLE_PROTO_OPCODE:
            try:
                return pickle.loads(raw)
            except Exception as err:
                pickle_error = err
        try:
            return super().deserialize(value)
        except ValueError as err:
            if pickle_error is not None:
                raise ValueError(f"cannot unpickle value: {pickle_error}") from pickle_error
            raise err


JsonPickleSerializer = PickleSerializer
