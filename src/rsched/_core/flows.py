"""Flows: steps run in chains and groups, as users write them and as Redis keeps them (pure).

``step(task, payload, **options)`` is one job, ``chain(a, b, c)`` runs its parts one after
another, ``group(parts)`` runs them all at once and ends when all of them ended; they nest
freely. :func:`plan` turns such a tree into numbered steps with their parents and children: the
graph the scripts walk (lua/includes/flow_end.lua releases a step when the last of its parents
ended, in the script that records that end). A chain from a group of m parts into a group of n
parts goes through a *barrier*: a step that runs nothing and ends when its parents ended, so
the graph holds m + n edges, not m x n.

A step's execution id is ``<flow id>~<step number>`` (steps are numbered from 1 in the order
they are written): '~' is no character of an id, so a step's id names its flow, and its job
lives in its flow's partition (rsched._core.partitions.job_partition).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args

import orjson

from rsched._core.errors import InvalidFlow, InvalidJob
from rsched._core.job import JobOptions, Lane
from rsched._core.keys import stream_name
from rsched._core.limits import job_limits, with_limits
from rsched._core.rules import (
    Priority,
    check_labels,
    check_name,
    check_priority,
    encode_payload,
    labels_text,
)

OnFailure = Literal["fail", "continue"]
FlowState = Literal["running", "completed", "failed", "cancelled"]
#: What a step is at: ``waiting`` (for its parents), ``queued`` (its job waits in its stream),
#: ``running``, ``completed``, ``dead`` (retries exhausted), ``expired`` (its start deadline
#: passed), ``cancelled`` (by cancel_flow or a failed flow: never run, or stopped).
StepState = Literal[
    "waiting", "queued", "running", "completed", "dead", "expired", "cancelled"
]  # fmt: skip

#: Between a flow id and a step's number in the step's execution id.
STEP_SEP = "~"
#: Most steps of one flow (a flow of this many is created in STEPS_PER_CALL-step calls).
STEPS_MAX = 100_000
#: Steps written by one call of lua/flow_create.lua (each call is atomic; the last one starts
#: the flow, so no step runs before the whole flow is written).
STEPS_PER_CALL = 1_000
#: Longest flow id: its steps' ids add '~' and up to 6 digits, and must stay ids.
FLOW_ID_MAX = 190
#: The job options a step may carry (those of ``Client.enqueue`` that make sense in a flow).
STEP_OPTIONS = frozenset(
    {
        "queue", "priority", "timeout_s", "max_retries", "retry_base_s", "retry_multiplier",
        "retry_max_s", "retry_jitter", "start_deadline", "limits", "labels",
    }
)  # fmt: skip

# Step states as the flow hash stores them (field "<n>.s"); no field: waiting.
#: The codes of a step that ended.
ENDED_CODES = frozenset("cdex")
STATE_CODES: dict[str, StepState] = {
    "q": "queued", "r": "running", "c": "completed", "d": "dead", "e": "expired",
    "x": "cancelled",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Step:
    """One job of a flow (see :func:`step`)."""

    task: str
    payload: Mapping[str, Any] | None = None
    on_failure: OnFailure = "fail"
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Chain:
    """Parts run one after another (see :func:`chain`)."""

    parts: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Group:
    """Parts run at once; the group ends when all of them ended (see :func:`group`)."""

    parts: tuple[Node, ...]


Node = Step | Chain | Group


def step(
    task: str,
    payload: Mapping[str, Any] | None = None,
    *,
    on_failure: OnFailure = "fail",
    **job_options: Any,
) -> Step:
    """One job of a flow: ``task`` with ``payload``, and the job options of
    :meth:`rsched.Client.enqueue` (``queue``, ``priority``, ``timeout_s``, ``max_retries``,
    ``retry_base_s``, ``retry_multiplier``, ``retry_max_s``, ``retry_jitter``,
    ``start_deadline``, ``limits``, ``labels``). ``on_failure`` says what the flow does when
    this step ends dead (retries exhausted), expired or cancelled: ``"fail"`` (the flow fails,
    its steps not started never run) or ``"continue"`` (the flow goes on; the step's place in
    its children's ``parent_results`` holds ``{"error": type, "message": ...}``). Checked when
    the flow is run (``Client.run_flow``). Since 0.1.0."""
    return Step(task, payload, on_failure, dict(job_options))


def chain(*parts: Node) -> Chain:
    """Parts run one after another: each starts when the one before it ended (a group ends
    when all its parts ended). Since 0.1.0."""
    return Chain(tuple(parts))


def group(*parts: Node | Iterable[Node]) -> Group:
    """Parts run all at once: ``group(a, b, c)`` or ``group(step(...) for i in ...)``; the
    group ends when all its parts ended, and what follows it gets their results in this order.
    Since 0.1.0."""
    if len(parts) == 1 and not isinstance(parts[0], Step | Chain | Group):
        return Group(tuple(parts[0]))
    return Group(tuple(parts))  # type: ignore[arg-type]


#: The task of a schedule's job that starts a flow (``Schedule(flow=...)``): every worker has
#: it built in; its payload is ``{"flow": <the flow as a document>}``.
FLOW_TASK = "rsched.flow"


def to_doc(node: Node) -> dict[str, Any]:
    """A flow as a JSON document (what a schedule stores and a schedules file writes):
    ``{"step": task, "payload": {...}, "on_failure": ..., <options>}``, ``{"chain": [...]}``,
    ``{"group": [...]}``."""
    if isinstance(node, Step):
        doc: dict[str, Any] = {"step": node.task}
        if node.payload:
            doc["payload"] = dict(node.payload)
        if node.on_failure != "fail":
            doc["on_failure"] = node.on_failure
        for name, value in node.options.items():
            doc[name] = [_limit_doc(v) for v in value] if name == "limits" else value
        return doc
    kind = "chain" if isinstance(node, Chain) else "group"
    return {kind: [to_doc(part) for part in node.parts]}


def _limit_doc(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    return to_dict() if callable(to_dict) else value


def from_doc(doc: object, where: str = "flow") -> Node:
    """The flow a document describes (:func:`to_doc`); raises InvalidFlow naming the place
    (``flow.chain[1].group[0]``) and the fix."""
    if not isinstance(doc, Mapping):
        raise InvalidFlow(where, 'give {"step": task, ...}, {"chain": [...]} or {"group": [...]}')
    kinds = [k for k in ("step", "chain", "group") if k in doc]
    if len(kinds) != 1:
        raise InvalidFlow(where, "give exactly one of step, chain and group")
    kind = kinds[0]
    if kind == "step":
        options = {k: v for k, v in doc.items() if k not in ("step", "payload", "on_failure")}
        return Step(
            str(doc["step"]),
            doc.get("payload"),
            doc.get("on_failure", "fail"),
            options,
        )
    parts = doc[kind]
    extra = sorted(set(doc) - {kind})
    if extra:
        raise InvalidFlow(f"{where}.{extra[0]}", f"a {kind} takes no option: give it to its steps")
    if not isinstance(parts, list):
        raise InvalidFlow(f"{where}.{kind}", "give a list of parts")
    nodes = tuple(from_doc(p, f"{where}.{kind}[{i}]") for i, p in enumerate(parts))
    return Chain(nodes) if kind == "chain" else Group(nodes)


@dataclass(frozen=True, slots=True)
class PlannedStep:
    """A step as the flow hash keeps it (``number`` from 1). A barrier runs nothing: it ends
    when its parents ended and hands their results on to its children."""

    number: int
    task: str
    payload: str  # JSON
    queue: str
    priority: Priority
    opts: str  # the ``opts`` field of its job (options, limits)
    on_failure: OnFailure
    labels: str  # labels_text, '' = none
    parents: tuple[int, ...]
    children: tuple[int, ...] = ()
    barrier: bool = False
    # The streams (queue or queue#level) its children go to: the keys its end may write.
    lanes: tuple[Lane, ...] = ()

    def encode(self, queue: str) -> bytes:
        """The hash field's value (lua/includes/flow_release.lua reads it): [task, payload,
        queue, level, opts, flags, parents, children, next lanes, labels], as short as it can
        be, for a flow of thousands of steps: the flow's ``queue`` (its default), an empty
        payload or default options as '', and the empty parts at the end left out."""
        flags = ("c" if self.on_failure == "continue" else "") + ("b" if self.barrier else "")
        lanes = ",".join(stream_name(q, p) for q, p in self.lanes)
        parts = [
            self.task,
            "" if self.payload == "{}" else self.payload,
            "" if self.queue == queue else self.queue,
            "" if self.priority == "normal" else self.priority,
            "" if self.opts == "{}" else self.opts,
            flags,
            ",".join(map(str, self.parents)),
            ",".join(map(str, self.children)),
            "" if lanes == queue else lanes,
            self.labels,
        ]
        while parts and parts[-1] == "":
            parts.pop()
        return orjson.dumps(parts)


@dataclass(frozen=True, slots=True)
class FlowPlan:
    """A flow's steps, numbered, with the roots (steps without parents) that start it, and the
    queue of those that name none."""

    steps: tuple[PlannedStep, ...]
    queue: str = "default"

    @property
    def roots(self) -> list[int]:
        return [s.number for s in self.steps if not s.parents]

    @property
    def lanes(self) -> list[Lane]:
        """Every (queue, level) a step of the flow runs on."""
        return list(dict.fromkeys((s.queue, s.priority) for s in self.steps if not s.barrier))


def plan(
    flow: Node,
    *,
    queue: str = "default",
    max_payload_bytes: float = 64 * 1024,
) -> FlowPlan:
    """Number the steps of ``flow`` and link them; each step's task, payload and options are
    checked (``queue`` is the default of those that name none). Raises InvalidFlow naming the
    step (``steps[n]``, numbered as written, from 1) and the field."""
    builder = _Builder(queue, max_payload_bytes)
    builder.add(flow, (), "flow")
    if not builder.steps:
        raise InvalidFlow("flow", "it has no step: give at least one step(...)")
    if len(builder.steps) > STEPS_MAX:
        raise InvalidFlow(
            "flow", f"{len(builder.steps)} steps, more than {STEPS_MAX}: split it into flows"
        )
    return builder.done()


class _Builder:
    def __init__(self, queue: str, max_payload_bytes: float) -> None:
        self.queue = queue
        self.max_payload_bytes = max_payload_bytes
        self.steps: list[dict[str, Any]] = []
        self.written = 0

    def add(self, node: object, parents: tuple[int, ...], where: str) -> tuple[int, ...]:
        """Add ``node`` after ``parents``; returns its tails (what follows it waits for)."""
        if isinstance(node, Step):
            return (self._step(node, parents),)
        if isinstance(node, Chain):
            if not node.parts:
                raise InvalidFlow(where, "an empty chain(): give it at least one part")
            tails = parents
            for i, part in enumerate(node.parts):
                if len(tails) > 1 and _heads(part) > 1:
                    tails = (self._barrier(tails),)
                tails = self.add(part, tails, f"{where}.chain[{i}]")
            return tails
        if isinstance(node, Group):
            if not node.parts:
                raise InvalidFlow(where, "an empty group(): give it at least one part")
            if len(parents) > 1 and _heads(node) > 1:
                parents = (self._barrier(parents),)
            out: list[int] = []
            for i, part in enumerate(node.parts):
                out += self.add(part, parents, f"{where}.group[{i}]")
            return tuple(out)
        raise InvalidFlow(
            where, f"give step(...), chain(...) or group(...), not {type(node).__name__}"
        )

    def _barrier(self, parents: tuple[int, ...]) -> int:
        number = len(self.steps) + 1
        self.steps.append({"number": number, "parents": parents, "barrier": True})
        return number

    def _step(self, s: Step, parents: tuple[int, ...]) -> int:
        number = len(self.steps) + 1
        self.written += 1  # steps as the user wrote them (barriers are not)
        where = f"steps[{self.written}]"
        self.steps.append({"number": number, "parents": parents, **self._checked(s, where)})
        return number

    def _checked(self, s: Step, where: str) -> dict[str, Any]:
        options = dict(s.options)
        unknown = sorted(set(options) - STEP_OPTIONS)
        if unknown:
            raise InvalidFlow(
                f"{where}.{unknown[0]}", f"no such step option; give one of {sorted(STEP_OPTIONS)}"
            )
        if s.on_failure not in get_args(OnFailure):
            raise InvalidFlow(f"{where}.on_failure", "give 'fail' or 'continue'")
        try:
            task = check_name(s.task, "task name")
            queue = check_name(options.pop("queue", None) or self.queue, "queue name")
            priority = check_priority(options.pop("priority", "normal"))
            payload = {} if s.payload is None else dict(s.payload)
            body = encode_payload(payload, self.max_payload_bytes)
            labels = options.pop("labels", None)
            text = labels_text(check_labels(labels)) if labels else ""
        except ValueError as exc:
            raise InvalidFlow(where, str(exc)) from None
        try:
            held = job_limits(options.pop("limits", ()), payload)
            opts = JobOptions.checked(**options)
        except InvalidJob as exc:
            raise InvalidFlow(f"{where}.{exc.field}", str(exc)) from None
        return {
            "task": task,
            "payload": body.decode(),
            "queue": queue,
            "priority": priority,
            "opts": with_limits(opts.encode(), held),
            "on_failure": s.on_failure,
            "labels": text,
        }

    def done(self) -> FlowPlan:
        children: dict[int, list[int]] = {}
        for s in self.steps:
            for p in s["parents"]:
                children.setdefault(p, []).append(s["number"])
        by_number = {s["number"]: s for s in self.steps}
        out = []
        for s in self.steps:
            kids = tuple(children.get(s["number"], ()))
            lanes = _lanes(kids, by_number, children)
            if s.get("barrier"):
                out.append(
                    PlannedStep(s["number"], "", "", "", "normal", "", "fail", "", s["parents"],
                                kids, barrier=True, lanes=lanes)
                )  # fmt: skip
            else:
                out.append(PlannedStep(**s, children=kids, lanes=lanes))
        return FlowPlan(tuple(out), self.queue)


def _lanes(
    kids: Sequence[int], steps: Mapping[int, dict[str, Any]], children: Mapping[int, list[int]]
) -> tuple[Lane, ...]:
    """The lanes a step's end may release jobs into: its children's, through barriers."""
    seen: dict[Lane, None] = {}
    todo = list(kids)
    while todo:
        s = steps[todo.pop()]
        if s.get("barrier"):
            todo += children.get(s["number"], [])
        else:
            seen[(s["queue"], s["priority"])] = None
    return tuple(seen)


def _heads(node: Node) -> int:
    """How many steps start a node (a chain starts with its first part's)."""
    if isinstance(node, Step):
        return 1
    if isinstance(node, Chain):
        return _heads(node.parts[0]) if node.parts else 0
    return sum(_heads(p) for p in node.parts)


def step_id(flow_id: str, number: int) -> str:
    """The execution id of a flow's step."""
    return f"{flow_id}{STEP_SEP}{number}"


def flow_of(execution_id: str) -> tuple[str, int] | None:
    """(flow id, step number) of a step's execution id; None for any other job."""
    flow_id, sep, number = execution_id.rpartition(STEP_SEP)
    if not sep or not number.isdigit():
        return None
    return flow_id, int(number)


@dataclass(frozen=True, slots=True)
class FlowRun:
    """What :meth:`rsched.Client.run_flow` did: the flow's id, its steps and its roots (the
    steps that started at once); ``created`` is False when a flow with that id existed (nothing
    was written)."""

    flow_id: str
    steps: int
    roots: int
    created: bool = True


@dataclass(frozen=True, slots=True)
class FlowStep:
    """One step of a flow as :meth:`rsched.Client.flow` reads it. ``execution_id`` is its
    job's (``rsched job ID``); ``attempts`` how many attempts ended or run (0 before it started);
    ``parents`` the numbers of the steps it follows; ``result`` what its handler returned (kept
    ``result_ttl_s``), or for a failed step of ``on_failure="continue"`` its error record.
    A barrier (between a group and a group) runs nothing; it is listed with task ``""``."""

    number: int
    task: str
    execution_id: str
    state: StepState
    queue: str
    parents: tuple[int, ...]
    children: tuple[int, ...]
    on_failure: OnFailure = "fail"
    attempts: int = 0
    result: Any = None
    barrier: bool = False


@dataclass(frozen=True, slots=True)
class FlowInfo:
    """A flow (see :meth:`rsched.Client.flow`): ``state`` is ``running``, ``completed`` (every
    step ended, none failed but those of ``on_failure="continue"``), ``failed`` (a step of
    ``on_failure="fail"`` ended dead, expired or cancelled: the steps not started never run)
    or ``cancelled`` (``cancel_flow``). ``schedule_id`` names the schedule whose occurrence
    started it. ``failed_step`` the number of the step that failed it. Times are aware UTC."""

    flow_id: str
    state: FlowState
    created_at: datetime
    ended_at: datetime | None = None
    schedule_id: str | None = None
    steps: tuple[FlowStep, ...] = ()
    step_count: int = 0
    done_count: int = 0
    failed_step: int | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def duration(self) -> timedelta | None:
        return None if self.ended_at is None else self.ended_at - self.created_at

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: its fields (``steps`` empty in a listing), times in ISO 8601, and
        ``duration_s``."""
        data = dataclasses.asdict(self)
        for name in ("created_at", "ended_at"):
            value = data[name]
            data[name] = value.isoformat() if value is not None else None
        data["duration_s"] = self.duration.total_seconds() if self.duration is not None else None
        return data


def read_step(number: int, raw: bytes | str, queue: str = "default") -> dict[str, Any]:
    """A step's stored definition (PlannedStep.encode) as a dict, ``queue`` the flow's;
    tolerant of a hand-written one (missing parts read as empty)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        data = []
    if not isinstance(data, list):
        data = []
    data = [*data, *[""] * (10 - len(data))]

    def ints(text: object) -> tuple[int, ...]:
        return tuple(int(x) for x in str(text).split(",") if x.isdigit())

    children = ints(data[7])
    return {
        "number": number,
        "task": str(data[0]),
        "queue": str(data[2]) or queue,
        "level": str(data[3]) if data[3] in ("high", "low") else "normal",
        "on_failure": "continue" if "c" in str(data[5]) else "fail",
        "barrier": "b" in str(data[5]),
        "parents": ints(data[6]),
        "children": children,
        "lanes": str(data[8]) or (queue if children else ""),
    }


def ms_time(text: object) -> datetime | None:
    """A stored time in ms as an aware UTC datetime (None: none or unreadable)."""
    try:
        return datetime.fromtimestamp(int(str(text)) / 1000, UTC)
    except (TypeError, ValueError, OverflowError):
        return None
