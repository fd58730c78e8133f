"""Events: the messages steps accept, return and publish.

``DictLikeModel`` is a pydantic model that also carries *dynamic fields* (any keyword that
is not a declared field), which is how ``StartEvent(topic="x")`` works without a schema.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, ValuesView
from datetime import datetime
from enum import Enum
from typing import Annotated, Any, ClassVar, Optional

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    WithJsonSchema,
    model_serializer,
)
from typing_extensions import Self

from tickwork._lazy import built_on_first_use
from tickwork._serde_fields import (
    UnreconstructedException,
    dump_event,
    dump_event_type,
    dump_exception,
    load_event,
    load_event_type,
    load_exception,
)

__all__ = [
    "CollectionReleaseEvent",
    "DictLikeModel",
    "Event",
    "EventType",
    "HumanResponseEvent",
    "IdleReleasedEvent",
    "InputRequiredEvent",
    "InternalDispatchEvent",
    "SerializableEvent",
    "SerializableEventType",
    "SerializableException",
    "SerializableOptionalEvent",
    "SerializableOptionalException",
    "StartEvent",
    "StepFailedEvent",
    "StepState",
    "StepStateChanged",
    "StopEvent",
    "UnhandledEvent",
    "UnreconstructedException",
    "WorkflowCancelledEvent",
    "WorkflowFailedEvent",
    "WorkflowIdleEvent",
    "WorkflowTimedOutEvent",
]


_FastInit = tuple[Any, frozenset[str], int]
"""``(validator, field names, exact count)``: see ``_FAST_INIT``."""

_FAST_INIT: dict[type, _FastInit] = {}
"""Class -> ``(its validator, the names of its fields, its exact count)``, for
``DictLikeModel.__init__`` (``_fast_init_of``).

Keywords that are all fields are validated at once, by the validator remembered here:
reading ``self.__pydantic_validator__`` costs some 400 instructions per event built (a
pydantic instance's attribute reads go through its ``__getattr__`` hook).  A class is
remembered only once its own validator is built; ``DictLikeModel.model_rebuild`` (which
replaces it) forgets it.  A plain dict read as ``_FAST_INIT[cls]``: a dict subclass with
``__missing__`` is subscripted through a method call, some 300 instructions more."""


def _exact_count(cls: type[BaseModel]) -> int:
    """The number of fields of ``cls`` if validating it from keywords succeeds only when
    every field is named by one of them, ``-1`` otherwise.

    Then as many keywords as fields, validated, were exactly the fields: ``__init__``
    skips checking their names (the usual event, such as ``Tick(number=n)``).  That holds
    when every field is required and the keyword naming it is the only way to fill it:
    no alias, no validator of the class's own that could fill it, extra keywords
    ignored (not kept).
    """
    if (
        cls.model_config.get("extra") not in (None, "ignore")
        or any(
            "__get_pydantic_core_schema__" in vars(base)  # a schema of its own making
            for base in cls.__mro__[: cls.__mro__.index(BaseModel)]
        )
    ):
        return -1
    decorators = cls.__pydantic_decorators__
    if (
        decorators.validators
        or decorators.field_validators
        or decorators.root_validators
        or decorators.model_validators
        or cls.__pydantic_post_init__ is not None
    ):
        return -1
    fields = cls.__pydantic_fields__
    if all(
        info.is_required() and info.alias is None and info.validation_alias is None
        for info in fields.values()
    ):
        return len(fields)
    return -1


def _fast_init_of(cls: type[BaseModel]) -> _FastInit:
    """``(validator, field names, exact count)`` of ``cls``, remembered once its
    validator is built (before that, the validator is the class's own lookup, which
    builds it on first use).  Bounded: a program making event classes on the fly does
    not keep them all alive through the table."""
    own = cls.__dict__
    validator = own.get("__pydantic_validator__")
    if validator is None or not own.get("__pydantic_complete__", False):
        return cls.__pydantic_validator__, frozenset(cls.__pydantic_fields__), -1
    if len(_FAST_INIT) >= 4096:
        _FAST_INIT.clear()
    entry = _FAST_INIT[cls] = (validator, frozenset(cls.__pydantic_fields__), _exact_count(cls))
    return entry


@built_on_first_use
class DictLikeModel(BaseModel):
    """A pydantic model whose undeclared keyword arguments become *dynamic fields*.

    Dynamic fields live in the private dict ``_data`` and are reachable as attributes and
    through the mapping API (``ev["k"]``, ``keys()``, ``items()``...), which covers only
    the dynamic fields, never the declared ones.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, defer_build=True)

    # ``_data`` (and ``StopEvent._result``) live in ``__pydantic_private__`` but are not
    # declared with ``PrivateAttr``: pydantic re-initializes declared private attributes
    # once per class in the MRO on every instantiation, which made building an event
    # ~10x slower than building a plain model.  They are handled by hand instead.
    _manual_private: ClassVar[dict[str, Any]] = {"_data": None}

    def _priv(self) -> dict[str, Any]:
        private = self.__pydantic_private__
        if private is None:
            private = {}
            object.__setattr__(self, "__pydantic_private__", private)
        return private

    def _dyn(self) -> dict[str, Any]:
        """The dynamic-field dict, created on first use (so every path gets one)."""
        private = self._priv()
        data: dict[str, Any] | None = private.get("_data")
        if data is None:
            data = private["_data"] = {}
        return data

    def __init__(self, **params: Any) -> None:
        try:
            validator, names, count = _FAST_INIT[type(self)]
        except KeyError:
            validator, names, count = _fast_init_of(type(self))
        if len(params) == count:  # validated, they are exactly the fields (_exact_count)
            try:
                validator.validate_python(params, self_instance=self)
                return
            except ValidationError:
                if names.issuperset(params):
                    raise
            # Some keyword is not a field: start over (the validation changed nothing).
        else:
            for key in params:  # a loop: cheaper than ``params.keys() <= names``
                if key not in names:
                    break
            else:  # every keyword is a field: what ``BaseModel.__init__`` does
                validator.validate_python(params, self_instance=self)
                return
        self._init_with_dynamic_fields(params)

    def _init_with_dynamic_fields(self, params: dict[str, Any]) -> None:
        """``__init__`` when some keyword is not a field: the dynamic fields (and private
        attributes) are set aside, the fields validated."""
        declared = type(self).__pydantic_fields__
        fields: dict[str, Any] = {}
        private: dict[str, Any] = {}
        dynamic: dict[str, Any] = {}
        privates = type(self).__private_attributes__
        manual = type(self)._manual_private
        for key, value in params.items():
            if key in declared:
                fields[key] = value
            elif key in privates or key in manual:
                private[key] = value
            else:
                dynamic[key] = value
        super().__init__(**fields)
        data = private.pop("_data", None)
        if data is not None:
            self._priv()["_data"] = dict(data)
        for key, value in private.items():
            setattr(self, key, value)
        if dynamic:
            self._dyn().update(dynamic)

    @classmethod
    def model_rebuild(
        cls,
        *,
        force: bool = False,
        raise_errors: bool = True,
        _parent_namespace_depth: int = 2,
        _types_namespace: Any = None,
    ) -> bool | None:
        """Rebuild the class's schema (pydantic's ``model_rebuild``), and forget the
        validator ``__init__`` remembered for it."""
        _FAST_INIT.pop(cls, None)
        try:
            return super().model_rebuild(
                force=force,
                raise_errors=raise_errors,
                # One frame more (this one) between pydantic and the caller's namespace.
                _parent_namespace_depth=_parent_namespace_depth + 1,
                _types_namespace=_types_namespace,
            )
        finally:  # and what another thread may have remembered meanwhile
            _FAST_INIT.pop(cls, None)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented if not isinstance(other, BaseModel) else False
        assert isinstance(other, DictLikeModel)
        return bool(
            self.__dict__ == other.__dict__
            and self._normalized_private() == other._normalized_private()
        )

    def _normalized_private(self) -> dict[str, Any]:
        private = dict(self.__pydantic_private__ or {})
        for name, default in type(self)._manual_private.items():
            if name == "_data":
                private["_data"] = private.get("_data") or {}
            else:
                private.setdefault(name, default)
        return private

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: Any = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Any:
        """Validate ``obj``; a ``"_data"`` key goes back into the dynamic fields."""
        if isinstance(obj, dict) and obj.keys() <= cls.__pydantic_fields__.keys():
            # Validate into a bare instance: ``BaseModel.model_validate`` would run the
            # custom ``__init__``, which validates the same data a second time.
            model = cls.__new__(cls)
            if strict is None and from_attributes is None and context is None:
                cls.__pydantic_validator__.validate_python(obj, self_instance=model)
            else:
                cls.__pydantic_validator__.validate_python(
                    obj,
                    strict=strict,
                    from_attributes=from_attributes,
                    context=context,
                    self_instance=model,
                )
            return model
        if isinstance(obj, dict) and not isinstance(obj, cls):
            obj = dict(obj)
            data = obj.pop("_data", None) or {}
            declared = {k: v for k, v in obj.items() if k in cls.__pydantic_fields__}
            rest = {k: v for k, v in obj.items() if k not in cls.__pydantic_fields__}
            model = super().model_validate(
                declared,
                strict=strict,
                from_attributes=from_attributes,
                context=context,
            )
            cls._restore_extra(model, rest)
            model._dyn().update(data)
            return model
        return super().model_validate(
            obj, strict=strict, from_attributes=from_attributes, context=context
        )

    @classmethod
    def _restore_extra(cls, model: DictLikeModel, rest: dict[str, Any]) -> None:
        """Put keys that are neither declared nor ``_data`` back where ``__init__`` would."""
        for key, value in rest.items():
            if key in cls.__private_attributes__:
                setattr(model, key, value)
            else:
                model._dyn()[key] = value

    def __copy__(self) -> Self:
        """A shallow copy with its own dynamic-field dict (values are shared).

        Pydantic's shallow copy would share ``_data`` itself, so adding a key to a copy
        (``get_state()`` hands out copies) would leak into the original.
        """
        clone = super().__copy__()
        private = dict(clone.__pydantic_private__ or {})
        private["_data"] = dict(self._dyn())
        object.__setattr__(clone, "__pydantic_private__", private)
        return clone

    @model_serializer(mode="wrap")
    def _dump_with_data(self, handler: Any) -> Any:
        dumped = handler(self)
        private = self.__pydantic_private__  # read, never create: dumps are hot
        data = private.get("_data") if private else None
        if data and isinstance(dumped, dict):
            dumped["_data"] = dict(data)
        return dumped

    def __getattr__(self, name: str) -> Any:
        manual = type(self)._manual_private
        if name in manual:
            if name == "_data":
                return self._dyn()
            return self._priv().get(name, manual[name])
        if not name.startswith("_"):
            # A dynamic field, without pydantic's lookup raising first (run() keywords are
            # read as attributes of the start event): pydantic finds a name that is not
            # private in the extras or on the class, so one found in neither is dynamic.
            try:
                private = object.__getattribute__(self, "__pydantic_private__")
                extra = object.__getattribute__(self, "__pydantic_extra__")
            except AttributeError:  # not fully built yet: the general path below
                private = extra = None
            dynamic = private.get("_data") if private else None
            if dynamic and name in dynamic and not extra and not hasattr(type(self), name):
                return dynamic[name]
        if not name.startswith("__"):
            try:
                return super().__getattr__(name)  # type: ignore[misc]
            except AttributeError:
                pass
            try:
                data = object.__getattribute__(self, "__pydantic_private__")
            except AttributeError:
                data = None
            dynamic = data.get("_data") if data is not None else None
            if dynamic is not None and name in dynamic:
                return dynamic[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self)._manual_private:
            self._priv()[name] = value
        elif name in type(self).__pydantic_fields__ or name in type(self).__private_attributes__:
            super().__setattr__(name, value)
        elif isinstance(getattr(type(self), name, None), property):
            object.__setattr__(self, name, value)
        else:
            self._dyn()[name] = value

    def __getitem__(self, key: str) -> Any:
        return self._dyn()[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._dyn()[key] = value

    def get(self, key: str, default: Any = None) -> Any:
        """The dynamic field ``key``, or ``default``."""
        return self._dyn().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._dyn()

    def keys(self) -> KeysView[str]:
        """The names of the dynamic fields."""
        return self._dyn().keys()

    def values(self) -> ValuesView[Any]:
        """The values of the dynamic fields."""
        return self._dyn().values()

    def items(self) -> ItemsView[str, Any]:
        """The dynamic fields as ``(name, value)`` pairs."""
        return self._dyn().items()

    def __len__(self) -> int:
        return len(self._dyn())

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]
        return iter(self._dyn())

    def to_dict(self) -> dict[str, Any]:
        """The dynamic-field dict itself (not a copy)."""
        return self._dyn()

    def __bool__(self) -> bool:
        return True


@built_on_first_use
class Event(DictLikeModel, defer_build=True):
    """Base class of everything passed between steps."""


@built_on_first_use
class StartEvent(Event, defer_build=True):
    """The event a run starts with; ``run(**kwargs)`` becomes its dynamic fields."""


@built_on_first_use
class StopEvent(Event, defer_build=True):
    """Returned by a step to end the run; ``result`` becomes the run's result."""

    _manual_private: ClassVar[dict[str, Any]] = {"_data": None, "_result": None}

    def __init__(self, result: Any = None, **params: Any) -> None:
        super().__init__(**params)
        if result is not None:
            self._priv()["_result"] = result

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Any:
        """Validate ``obj``, restoring a ``"result"`` key into the private result."""
        if isinstance(obj, dict) and "result" in obj and "result" not in cls.__pydantic_fields__:
            obj = dict(obj)
            result = obj.pop("result")
            model = super().model_validate(obj, **kwargs)
            model._result = result
            return model
        return super().model_validate(obj, **kwargs)

    def _get_result(self) -> Any:
        return self._result

    @property
    def result(self) -> Any:
        """The run's result carried by this event."""
        return self._get_result()

    @model_serializer(mode="wrap")
    def _dump_with_result(self, handler: Any) -> Any:
        dumped = handler(self)
        if isinstance(dumped, dict):
            data = self._dyn()
            if data:
                dumped["_data"] = dict(data)
            if self._result is not None and "result" not in type(self).__pydantic_fields__:
                dumped["result"] = self._result
        return dumped

    def __repr__(self) -> str:
        parts = [f"{k}={v!r}" for k, v in self._dyn().items()]
        parts += [f"{k}={v!r}" for k, v in self.model_dump().items() if k != "_data"]
        return f"{type(self).__name__}({', '.join(parts)})"

    def __str__(self) -> str:
        return str(self._result)


def _exception_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "exception_type": {"type": "string"},
            "exception_message": {"type": "string"},
        },
    }


_EVENT_SCHEMA = WithJsonSchema({"type": "object", "description": "an event envelope"})

SerializableEvent = Annotated[
    Any,
    BeforeValidator(load_event),
    PlainSerializer(dump_event),
    _EVENT_SCHEMA,
]
SerializableOptionalEvent = Annotated[
    Optional[Any],
    BeforeValidator(lambda v: None if v is None else load_event(v)),
    PlainSerializer(lambda v: None if v is None else dump_event(v)),
    _EVENT_SCHEMA,
]
SerializableException = Annotated[
    Any,
    BeforeValidator(load_exception),
    PlainSerializer(dump_exception),
    WithJsonSchema(_exception_schema()),
]
SerializableOptionalException = Annotated[
    Optional[Any],
    BeforeValidator(lambda v: None if v is None else load_exception(v)),
    PlainSerializer(lambda v: None if v is None else dump_exception(v)),
    WithJsonSchema(_exception_schema()),
]
SerializableEventType = Annotated[
    Any,
    BeforeValidator(load_event_type),
    PlainSerializer(dump_event_type),
    WithJsonSchema({"type": "string"}),
]

EventType = type[Event]


@built_on_first_use
class WorkflowTimedOutEvent(StopEvent, defer_build=True):
    """Published last when the run's alive-time budget runs out."""

    timeout: float
    active_steps: list[str]


@built_on_first_use
class WorkflowCancelledEvent(StopEvent, defer_build=True):
    """Published last when the run is cancelled with ``cancel_run()``."""


@built_on_first_use
class WorkflowFailedEvent(StopEvent, defer_build=True):
    """Published last when a step failure (or a stuck stream) ends the run."""

    step_name: str
    exception: SerializableException
    attempts: Optional[int] = None
    elapsed_seconds: Optional[float] = None


@built_on_first_use
class IdleReleasedEvent(StopEvent, defer_build=True):
    """Kept for compatibility; tickwork never produces it."""


@built_on_first_use
class InputRequiredEvent(Event, defer_build=True):
    """Returned (or published) when the run needs a human; it is published to the stream."""


@built_on_first_use
class HumanResponseEvent(Event, defer_build=True):
    """Sent by the caller to answer an ``InputRequiredEvent``."""


@built_on_first_use
class StepFailedEvent(Event, defer_build=True):
    """Delivered to a ``@catch_error`` handler when a step's retries are exhausted."""

    step_name: str
    input_event: SerializableEvent
    exception: SerializableException
    attempts: int
    elapsed_seconds: float
    failed_at: datetime


@built_on_first_use
class CollectionReleaseEvent(Event, defer_build=True):
    """The trigger of a ``list[E]`` join invocation; never published or routed."""

    events: list[SerializableEvent] = Field(default_factory=list)
    stream_id: str = ""
    binding_id: str = ""


@built_on_first_use
class InternalDispatchEvent(Event, defer_build=True):
    """Base of the runtime's own events; hidden from ``stream_events()`` by default."""


class StepState(Enum):
    """What a ``StepStateChanged`` event reports."""

    PREPARING = "preparing"
    RUNNING = "running"
    NOT_RUNNING = "not_running"


@built_on_first_use
class StepStateChanged(InternalDispatchEvent, defer_build=True):
    """A work item was queued, dispatched to a slot, or finished."""

    name: str
    step_state: StepState
    worker_id: str
    input_event_name: str
    output_event_name: Optional[str] = None


@built_on_first_use
class WorkflowIdleEvent(InternalDispatchEvent, defer_build=True):
    """The run became quiescent: nothing queued, running or undelivered."""


@built_on_first_use
class UnhandledEvent(InternalDispatchEvent, defer_build=True):
    """An added event reached no step and no waiter."""

    event_type: str
    qualified_name: str
    step_name: Optional[str] = None
    idle: bool
