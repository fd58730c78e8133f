"""``Workflow``: a class of ``@step`` methods wired together by the events they exchange.

The constructor infers the start and stop event classes from the step signatures;
``run()`` validates once (cached), builds the reducer's config once per instance and
starts a run on the caller's event loop, returning its ``WorkflowHandler``.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import string
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from tickwork._serde_fields import qualified_name
from tickwork.context.context import Context
from tickwork.errors import (
    ContextStateError,
    WorkflowConfigurationError,
    WorkflowRuntimeError,
    WorkflowValidationError,
)
from tickwork.events import Event, StartEvent, StopEvent
from tickwork.handler import WorkflowHandler
from tickwork.resource import ResourceManager
from tickwork.resource_checks import validate_step_resources
from tickwork.runtime.default import DEFAULT_RUNTIME, InProcessRuntime
from tickwork.runtime.step_shapes import discover_step_functions

if TYPE_CHECKING:
    import logging

    from tickwork.runtime.session import LIVE_RUNS, RunSession, detect_backend
    from tickwork.runtime.types.state import RunConfig
    from tickwork.runtime.verbose import VerbosePrinter
    from tickwork.serde.serializers import BaseSerializer
    from tickwork.stores.records import Lease
    from tickwork.stores.remote import RemoteHandler

__all__ = ["Workflow", "WorkflowMeta"]


_GRAPH_CHECKS = frozenset({"dead_end", "reachability", "terminal_event"})
_ID_ALPHABET = string.ascii_letters + string.digits
_ID_SPACE = len(_ID_ALPHABET) ** 10
# Two-digit groups: the pair for ``d`` is the digit ``d % 62`` then the digit ``d // 62``.
_ID_PAIRS = [_ID_ALPHABET[d % 62] + _ID_ALPHABET[d // 62] for d in range(62 * 62)]

# Bound once: ``Context._for_step`` makes a new bound method at every access, which a
# session would keep for its whole life.
_STEP_CONTEXT = Context._for_step
_FRESH_STORE = Context._fresh_store


class WorkflowMeta(type):
    """Gives every workflow class its own registry of free-function steps."""

    def __init__(cls, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> None:
        super().__init__(name, bases, namespace)
        cls._step_functions: dict[str, Callable[..., Any]] = {}
        cls._registry_version = 0


def _choose_sink() -> Callable[[str], None]:
    from tickwork.runtime.verbose import choose_sink  # verbose workflows only

    return choose_sink()


def _check_timeout(timeout: Any) -> None:
    """``None`` (no budget) or a positive finite number of seconds; ``0`` is refused
    because a run that times out before its first step is never what was meant."""
    if timeout is None:
        return
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise WorkflowValidationError(
            f"Workflow(timeout={timeout!r}): timeout must be None (no timeout) or a "
            "positive finite number of seconds"
        )


def _check_concurrent_runs(value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise WorkflowValidationError(
            f"Workflow(num_concurrent_runs={value!r}): num_concurrent_runs must be a "
            "positive int or None"
        )


def _unique_subclass(
    workflow_name: str, types: list[type], base: type, role: str, verb: str
) -> type:
    """The one subclass of ``base`` in ``types``; ``verb`` is "accept" or "return"."""
    found: list[type] = []
    for candidate in types:
        if isinstance(candidate, type) and issubclass(candidate, base) and candidate not in found:
            found.append(candidate)
    if not found:
        raise WorkflowConfigurationError(
            f"workflow {workflow_name} has no {role}: no step {verb}s a {base.__name__}"
        )
    if len(found) > 1:
        names = ", ".join(t.__name__ for t in found)
        raise WorkflowConfigurationError(
            f"workflow {workflow_name} has {len(found)} {role} classes ({names}); a workflow "
            f"has exactly one {role} class, so its steps may {verb} only one of them"
        )
    return found[0]


def _check_journal(journal: Any) -> Any:
    """The ``journal`` option as stored: a bool or a store whose ``check()`` passed."""
    if journal is None or isinstance(journal, bool):
        return bool(journal)
    # Imported here: a workflow without a journal store never loads the stores.
    from tickwork.stores.store import JournalStore

    if isinstance(journal, JournalStore):
        _probe_journal(journal)
        return journal
    raise WorkflowConfigurationError(
        f"Workflow(journal={journal!r}): journal must be True, False or a journal store "
        "(e.g. tickwork.journal.SqliteJournal('runs.db'))"
    )


def _probe_journal(journal: Any) -> None:
    """Call the store's optional synchronous ``check()``: a store that cannot be used
    (a bad path, a damaged file) raises ``JournalError`` here, not inside a run."""
    if isinstance(journal, bool):
        return
    probe = getattr(journal, "check", None)
    if callable(probe):
        probe()


def _describe_argument(value: Any) -> str:
    """How an argument of the wrong kind is named in an error message."""
    if isinstance(value, type):
        return f"the class {value.__name__}"
    return f"{type(value).__name__} {value!r:.80}"


def _check_run_arguments(ctx: Any, start_event: Any) -> None:
    """The type checks of ``run()``'s arguments, which need neither a loop nor a config."""
    if ctx is not None and not isinstance(ctx, Context):
        raise ValueError(
            f"run(ctx=...) must be a tickwork Context or None, got {_describe_argument(ctx)}; "
            "create one with Context(workflow)"
        )
    if start_event is not None and not isinstance(start_event, StartEvent):
        raise ValueError(
            f"run(start_event=...) must be a StartEvent instance or None, got "
            f"{_describe_argument(start_event)}; pass an instance of the workflow's start event "
            "class, or keyword arguments to build one"
        )


def _logger() -> logging.Logger:
    """The ``tickwork`` logger; ``logging`` is imported by the first warning (or the
    runtime), not by ``from tickwork import Workflow``."""
    import logging

    return logging.getLogger("tickwork")


def _log_ignored_arguments(
    resuming: bool, start_event: StartEvent | None, kwargs: dict[str, Any]
) -> None:
    """Warn about the ``run()`` arguments a resume or an explicit start event ignores."""
    if resuming and (start_event is not None or kwargs):
        _logger().warning(
            "run() resumes a snapshot of a running workflow; the start event and "
            "keyword arguments %s are ignored",
            sorted(kwargs),
        )
    elif not resuming and start_event is not None and kwargs:
        _logger().warning(
            "run(start_event=...) ignores the extra keyword arguments %s", sorted(kwargs)
        )


_STEP_CONTEXT = Context._for_step
"""How a run builds a step's Context: bound once, not once per run."""


def _bind_runtime() -> None:
    """Import the session and bind the names ``_start_run`` calls in this module.

    ``from tickwork import Workflow`` and defining workflow classes need none of the
    runtime, so ``import`` does not load it: a workflow's first config build does (every
    run goes through it first), and the per-run path reads plain globals, as it did.
    """
    from tickwork.runtime.session import LIVE_RUNS, RunSession, detect_backend

    globals().update(LIVE_RUNS=LIVE_RUNS, RunSession=RunSession, detect_backend=detect_backend)


def _new_run_id() -> str:
    """Ten random letters and digits, drawn with one call to the OS's random source."""
    number = secrets.randbelow(_ID_SPACE)
    pairs = _ID_PAIRS
    # Two base-62 digits at a time, least significant first (every run asks for one).
    number, d1 = divmod(number, 3844)
    number, d2 = divmod(number, 3844)
    number, d3 = divmod(number, 3844)
    number, d4 = divmod(number, 3844)
    return pairs[d1] + pairs[d2] + pairs[d3] + pairs[d4] + pairs[number]


class Workflow(metaclass=WorkflowMeta):
    """Base class of workflows: subclass it and decorate methods with ``@step``."""

    _step_functions: dict[str, Callable[..., Any]]
    _registry_version: int

    def __init__(
        self,
        timeout: float | None = 45.0,
        disable_validation: bool = False,
        verbose: bool = False,
        resource_manager: ResourceManager | None = None,
        num_concurrent_runs: int | None = None,
        runtime: Any = None,
        workflow_name: str | None = None,
        skip_graph_checks: set[str] | None = None,
        serializer: BaseSerializer | None = None,
        journal: Any = False,
    ) -> None:
        _check_concurrent_runs(num_concurrent_runs)
        _check_timeout(timeout)
        self._timeout = timeout
        self._disable_validation = disable_validation
        self._verbose = verbose
        self._num_concurrent_runs = num_concurrent_runs
        self._explicit_name = workflow_name
        self._serializer = serializer
        self._journal = _check_journal(journal)
        steps = self._get_steps()
        if not steps:
            raise WorkflowConfigurationError(f"workflow {self.workflow_name} has no steps")
        self._start_event_class = self._infer_start_class(steps)
        self._stop_event_class = self._infer_stop_class(steps)
        self._events = self._collect_events(steps)
        self._resource_manager = resource_manager or ResourceManager()
        self._skip_graph_checks = self._check_skip_names(skip_graph_checks)
        self._runtime = self._resolve_runtime(runtime)
        self._verbose_sink = _choose_sink() if verbose else None
        self._locked = False
        self._validated_version: int | None = None
        self._run_config: RunConfig | None = None
        self._run_config_version: int | None = None
        self._run_slots: Any = None

    # -- construction helpers -------------------------------------------------------------

    def _infer_start_class(self, steps: dict[str, Callable[..., Any]]) -> type[StartEvent]:
        accepted = [t for fn in steps.values() for t in fn._step_config.accepted_events]  # type: ignore[attr-defined]
        return _unique_subclass(self.workflow_name, accepted, StartEvent, "start event", "accept")

    def _infer_stop_class(self, steps: dict[str, Callable[..., Any]]) -> type[StopEvent]:
        returned = [t for fn in steps.values() for t in fn._step_config.return_types]  # type: ignore[attr-defined]
        return _unique_subclass(self.workflow_name, returned, StopEvent, "stop event", "return")

    @staticmethod
    def _collect_events(steps: dict[str, Callable[..., Any]]) -> list[type[Event]]:
        events: list[type[Event]] = []
        for fn in steps.values():
            cfg = fn._step_config  # type: ignore[attr-defined]
            for t in [*cfg.accepted_events, *cfg.return_types]:
                if isinstance(t, type) and issubclass(t, Event) and t not in events:
                    events.append(t)
        return events

    def _check_skip_names(self, names: set[str] | None) -> frozenset[str]:
        if not names:
            return frozenset()
        unknown = set(names) - _GRAPH_CHECKS
        if unknown:
            raise WorkflowValidationError(
                f"Workflow(skip_graph_checks=...): unknown check(s) {sorted(unknown)}; "
                f"valid checks are {sorted(_GRAPH_CHECKS)}"
            )
        return frozenset(names)

    @staticmethod
    def _resolve_runtime(runtime: Any) -> Any:
        if runtime is None:
            return DEFAULT_RUNTIME
        if not isinstance(runtime, InProcessRuntime):
            raise WorkflowConfigurationError(
                f"Workflow(runtime={runtime!r}): runtime must be None or a tickwork runtime"
            )
        return runtime

    # -- properties ---------------------------------------------------------------------

    @property
    def workflow_name(self) -> str:
        """The explicit name, or ``module.QualName`` of the class.

        A class of a script run as ``python flows.py`` is named ``flows.QualName`` (the
        name the script can be imported under, see ``main_module_name``), so that its
        journaled runs can be resumed by a process that imports it.
        """
        if self._explicit_name:
            return self._explicit_name
        return qualified_name(type(self))

    @property
    def start_event_class(self) -> type[StartEvent]:
        """The inferred start event class."""
        return self._start_event_class

    @property
    def stop_event_class(self) -> type[StopEvent]:
        """The inferred stop event class."""
        return self._stop_event_class

    @property
    def events(self) -> list[type[Event]]:
        """Every event class accepted or returned by the steps."""
        return list(self._events)

    @property
    def serializer(self) -> BaseSerializer | None:
        """The explicit serializer, or ``None``."""
        return self._serializer

    @property
    def runtime(self) -> Any:
        """The runtime that hosts this workflow's runs."""
        return self._runtime

    def _verbose_printer(self) -> VerbosePrinter:
        """The printer of verbose runs (its sink was chosen at construction)."""
        from tickwork.runtime.verbose import VerbosePrinter  # verbose runs only

        return VerbosePrinter(self._verbose_sink or print, self._timeout)

    # -- steps ----------------------------------------------------------------------------

    def _get_steps(self) -> dict[str, Callable[..., Any]]:
        """Step name -> callable: bound method steps, then free-function steps.

        Discovery walks the class with ``inspect.getattr_static``, so the table is kept
        until the class's step registry changes (``add_step``): every run asks for it.
        Read-only for callers.
        """
        version = type(self)._registry_version
        cached: tuple[int, dict[str, Callable[..., Any]]] | None = self.__dict__.get("_steps_cache")
        if cached is not None and cached[0] == version:
            return cached[1]
        out: dict[str, Callable[..., Any]] = {}
        for name, fn in discover_step_functions(type(self)).items():
            if name in type(self)._step_functions:
                out[name] = fn
            else:
                out[name] = getattr(self, name)
        self._steps_cache = (version, out)
        return out

    @classmethod
    def add_step(cls, func: Callable[..., Any]) -> None:
        """Register a free function decorated with ``@step`` as a step of this class."""
        if getattr(func, "_step_config", None) is None:
            raise WorkflowValidationError(
                f"cannot add {getattr(func, '__name__', func)!r} to {cls.__name__}: it is "
                "not a step; decorate it with @step first"
            )
        name = func.__name__
        if name in discover_step_functions(cls):
            raise WorkflowValidationError(
                f"cannot add step {name!r} to {cls.__name__}: the name is taken by another step"
            )
        cls._step_functions[name] = func
        cls._registry_version += 1

    # -- validation -----------------------------------------------------------------------

    def validate(
        self, *, validate_resource_configs: bool = True, validate_resources: bool = False
    ) -> bool:
        """Run every check (api.md §6.5); returns whether the workflow uses HITL."""
        from tickwork.representation.checks import validate_steps

        steps = self._get_steps()
        if not steps:
            raise WorkflowConfigurationError(f"workflow {self.workflow_name} has no steps")
        start = self._infer_start_class(steps)
        self._infer_stop_class(steps)
        uses_hitl = validate_steps(self.workflow_name, steps, start, set(self._skip_graph_checks))
        if validate_resource_configs or validate_resources:
            validate_step_resources(
                steps, configs=validate_resource_configs, factories=validate_resources
            )
        return uses_hitl

    def _prepare_run(self) -> RunConfig:
        """Validate once per registry version and build the reducer config."""
        version = type(self)._registry_version
        if self._validated_version != version:
            # The checks are imported by the first run, not by ``import tickwork``.
            from tickwork.representation.checks import check_catch_error_structure, validate_steps

            steps = self._get_steps()
            if self._disable_validation:
                check_catch_error_structure(steps)
            else:
                validate_steps(
                    self.workflow_name,
                    steps,
                    self._start_event_class,
                    set(self._skip_graph_checks),
                )
                validate_step_resources(steps, configs=True, factories=False)
            self._validated_version = version
        return self._reducer_config()

    def _reducer_config(self) -> RunConfig:
        """The reducer's config for this instance, rebuilt when the step registry changes."""
        version = type(self)._registry_version
        if self._run_config is None or self._run_config_version != version:
            from tickwork.runtime.config import build_run_config
            from tickwork.runtime.step_worker import StepInvokers

            _bind_runtime()
            self._step_table = self._get_steps()
            self._run_config = build_run_config(
                self.workflow_name, self._step_table, self._timeout, self._start_event_class
            )
            self._invokers = StepInvokers(self._step_table, self._run_config)
            self._run_config_version = version
        return self._run_config

    # -- running --------------------------------------------------------------------------

    def run(
        self,
        ctx: Context[Any] | None = None,
        start_event: StartEvent | None = None,
        **kwargs: Any,
    ) -> WorkflowHandler:
        """Start a run on the current event loop and return its handler.

        Every argument is checked before the event loop is looked for, so a bad argument
        raises its own error (``ValueError``, ``WorkflowRuntimeError``,
        ``ContextStateError``, ...) even when no loop is running; only a call whose
        arguments are all valid raises ``RuntimeError`` for the missing loop.  A journal
        store that cannot be used (its directory was removed, its file is damaged)
        raises ``JournalError`` here too, before the run starts.
        """
        _check_run_arguments(ctx, start_event)
        run_id = kwargs.pop("run_id", None)
        return self._start_run(ctx, start_event, kwargs, run_id, None)

    def _start_run(
        self,
        ctx: Context[Any] | None,
        start_event: StartEvent | None,
        kwargs: dict[str, Any],
        run_id: str | None,
        options: Mapping[str, Any] | None,
        lease: Lease | None = None,
        lease_seconds: float | None = None,
    ) -> WorkflowHandler:
        """Start (or resume) a run; ``options`` are a journaled run's stored options.

        A resumed run keeps its original options: its ``timeout`` replaces the
        instance's for that run.  A journaled run is registered in its store, start
        event and options included, before the handler is returned, and owned by this
        process: through ``lease`` (a claim's, taken for ``lease_seconds``) or a lease
        it takes.
        """
        self._locked = True
        config = self._prepare_run()
        _probe_journal(self._journal)
        if options is not None and "timeout" in options and options["timeout"] != config.timeout:
            config = dataclasses.replace(config, timeout=options["timeout"])
        run_id = run_id or _new_run_id()
        live = LIVE_RUNS.get(run_id)
        if live is not None and live.live:
            raise RuntimeError(f"a run with run_id {run_id!r} is already live in this process")
        if ctx is not None and ctx._step is not None:
            raise ContextStateError(
                "a workflow cannot be started from a step's context; pass a new Context"
            )
        if ctx is not None and ctx._session is not None and ctx._session.live:
            raise ContextStateError("the context is already running a workflow")
        # A run started without a Context gets none until its handler's is asked for
        # (``WorkflowHandler.ctx``), nor an untyped state store until one is used
        # (``RunSession.store``): a live run holds neither otherwise.  ``context`` then
        # stands for the Context it would have been given, to compute its first state.
        context = Context(self) if ctx is None else ctx
        resumable = context._resumable_state(config)
        if resumable is not None:
            start: StartEvent | None = None
            init = resumable
        else:
            start = self._build_start_event(config, start_event, kwargs)
            init = context._next_run_state(config)
        detect_backend()
        _log_ignored_arguments(resumable is not None, start_event, kwargs)
        session = RunSession(
            workflow=self,
            config=config,
            invokers=self._invokers,
            init_state=init,
            run_id=run_id,
            store=context._store_for_run() if ctx is None else context.store,
            make_store=_FRESH_STORE,
            make_step_context=_STEP_CONTEXT,
            start_event=start,
            run_slots=self._concurrency_slots(),
            keep_journal=self._journal is not False and self._journal is not None,
            journal_store=None if isinstance(self._journal, bool) else self._journal,
            serializer=context._serializer,
        )
        session.register(
            None if resumable is not None else {"timeout": config.timeout}, lease, lease_seconds
        )
        if ctx is not None:
            ctx._bind_run(session)
        LIVE_RUNS[run_id] = session
        session.start()
        return WorkflowHandler(ctx, session)

    async def submit(
        self,
        run_id: str | None = None,
        *,
        start_event: StartEvent | None = None,
        queue: str = "default",
        priority: int = 0,
        **kwargs: Any,
    ) -> RemoteHandler:
        """Queue a run for a worker fleet and return its ``RemoteHandler``.

        The run is durable in the workflow's journal store when this returns, and any
        ``tickwork worker`` serving this workflow (and ``queue``) may claim it; higher
        ``priority`` runs are claimed first.  Idempotent on ``run_id``: submitting an
        existing run id again starts nothing and returns a handler of that run.  The
        start event is built from ``kwargs`` (or given as ``start_event``), as for
        ``run``, which stays local to this process.
        """
        store = self._journal
        if store is None or isinstance(store, bool):
            raise WorkflowConfigurationError(
                f"{self.workflow_name}.submit() needs a journal store that workers share: "
                "create the workflow with Workflow(journal=SqliteJournal(...)) or a "
                "PostgresJournal"
            )
        _check_run_arguments(None, start_event)
        config = self._prepare_run()
        start = self._build_start_event(config, start_event, kwargs)
        ctx: Context[Any] = Context(self)
        serializer = ctx._serializer
        run_id = run_id or _new_run_id()
        await store.submit_run(
            run_id,
            self.workflow_name,
            ctx.to_dict(),
            start_event=serializer.to_record(start),
            options={"timeout": config.timeout},
            queue=queue,
            priority=priority,
        )
        from tickwork.stores.remote import RemoteHandler

        return RemoteHandler(store, run_id, serializer)

    def _build_start_event(
        self, config: RunConfig, start_event: StartEvent | None, kwargs: dict[str, Any]
    ) -> StartEvent:
        if start_event is not None:
            if not config.routes_for(type(start_event)):
                raise WorkflowRuntimeError(
                    f"no step accepts the start event {type(start_event).__name__}; this "
                    f"workflow's start_event_class is {self._start_event_class.__name__}"
                )
            return start_event
        try:
            return self._start_event_class(**kwargs)
        except ValidationError as error:
            raise WorkflowRuntimeError(
                f"cannot build the start event {self._start_event_class.__name__} from "
                f"run() keyword arguments {sorted(kwargs)}: {error}"
            ) from error

    def _concurrency_slots(self) -> Any:
        if self._num_concurrent_runs is None:
            return None
        if self._run_slots is None:
            from tickwork.runtime.run_slots import RunSlots

            self._run_slots = RunSlots(self._num_concurrent_runs)
        return self._run_slots
