from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RunStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RUN_STATUS_UNSPECIFIED: _ClassVar[RunStatus]
    RUN_STATUS_RUNNING: _ClassVar[RunStatus]
    RUN_STATUS_WAITING: _ClassVar[RunStatus]
    RUN_STATUS_COMPLETED: _ClassVar[RunStatus]
    RUN_STATUS_FAILED: _ClassVar[RunStatus]
    RUN_STATUS_CANCELLED: _ClassVar[RunStatus]
RUN_STATUS_UNSPECIFIED: RunStatus
RUN_STATUS_RUNNING: RunStatus
RUN_STATUS_WAITING: RunStatus
RUN_STATUS_COMPLETED: RunStatus
RUN_STATUS_FAILED: RunStatus
RUN_STATUS_CANCELLED: RunStatus

class GraphBundle(_message.Message):
    __slots__ = ("graph_path", "files")
    GRAPH_PATH_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    graph_path: str
    files: _containers.RepeatedCompositeFieldContainer[BundleFile]
    def __init__(self, graph_path: _Optional[str] = ..., files: _Optional[_Iterable[_Union[BundleFile, _Mapping]]] = ...) -> None: ...

class BundleFile(_message.Message):
    __slots__ = ("path", "content", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: bytes
    mode: int
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ..., mode: _Optional[int] = ...) -> None: ...

class SubmitRequest(_message.Message):
    __slots__ = ("bundle", "input_json", "priority", "input_refs", "no_cache")
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    INPUT_REFS_FIELD_NUMBER: _ClassVar[int]
    NO_CACHE_FIELD_NUMBER: _ClassVar[int]
    bundle: GraphBundle
    input_json: str
    priority: str
    input_refs: _containers.RepeatedCompositeFieldContainer[InputReference]
    no_cache: bool
    def __init__(self, bundle: _Optional[_Union[GraphBundle, _Mapping]] = ..., input_json: _Optional[str] = ..., priority: _Optional[str] = ..., input_refs: _Optional[_Iterable[_Union[InputReference, _Mapping]]] = ..., no_cache: _Optional[bool] = ...) -> None: ...

class InputReference(_message.Message):
    __slots__ = ("field", "run_id", "from_field")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_FIELD_NUMBER: _ClassVar[int]
    field: str
    run_id: str
    from_field: str
    def __init__(self, field: _Optional[str] = ..., run_id: _Optional[str] = ..., from_field: _Optional[str] = ...) -> None: ...

class SubmitResponse(_message.Message):
    __slots__ = ("run_id", "warnings", "referable")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    REFERABLE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    referable: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_id: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ..., referable: _Optional[_Iterable[str]] = ...) -> None: ...

class ValidateRequest(_message.Message):
    __slots__ = ("bundle",)
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    bundle: GraphBundle
    def __init__(self, bundle: _Optional[_Union[GraphBundle, _Mapping]] = ...) -> None: ...

class ValidateResponse(_message.Message):
    __slots__ = ("findings",)
    FINDINGS_FIELD_NUMBER: _ClassVar[int]
    findings: _containers.RepeatedCompositeFieldContainer[Finding]
    def __init__(self, findings: _Optional[_Iterable[_Union[Finding, _Mapping]]] = ...) -> None: ...

class Finding(_message.Message):
    __slots__ = ("severity", "message", "nodes", "line")
    SEVERITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    severity: str
    message: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    line: int
    def __init__(self, severity: _Optional[str] = ..., message: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ..., line: _Optional[int] = ...) -> None: ...

class GetRunRequest(_message.Message):
    __slots__ = ("run_id", "omit_state", "with_diagram", "kept_input")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    OMIT_STATE_FIELD_NUMBER: _ClassVar[int]
    WITH_DIAGRAM_FIELD_NUMBER: _ClassVar[int]
    KEPT_INPUT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    omit_state: bool
    with_diagram: bool
    kept_input: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_id: _Optional[str] = ..., omit_state: _Optional[bool] = ..., with_diagram: _Optional[bool] = ..., kept_input: _Optional[_Iterable[str]] = ...) -> None: ...

class RunInfo(_message.Message):
    __slots__ = ("run_id", "graph_name", "status", "state_json", "error", "waiting", "event_count", "created_unix_ms", "unhosted", "children", "namespace", "submitted_by", "answers", "ended_unix_ms", "diagram_svg", "trace_id", "usage", "input_fields", "forked_from_run", "forked_from_step", "forked_from_point")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    GRAPH_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    EVENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    UNHOSTED_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_BY_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    ENDED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    DIAGRAM_SVG_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELDS_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_RUN_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_POINT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    graph_name: str
    status: RunStatus
    state_json: str
    error: RunError
    waiting: _containers.RepeatedCompositeFieldContainer[WaitingNode]
    event_count: int
    created_unix_ms: int
    unhosted: _containers.RepeatedCompositeFieldContainer[UnhostedWait]
    children: _containers.RepeatedCompositeFieldContainer[ChildRun]
    namespace: str
    submitted_by: str
    answers: _containers.RepeatedCompositeFieldContainer[Answer]
    ended_unix_ms: int
    diagram_svg: str
    trace_id: str
    usage: Usage
    input_fields: _containers.RepeatedScalarFieldContainer[str]
    forked_from_run: str
    forked_from_step: int
    forked_from_point: int
    def __init__(self, run_id: _Optional[str] = ..., graph_name: _Optional[str] = ..., status: _Optional[_Union[RunStatus, str]] = ..., state_json: _Optional[str] = ..., error: _Optional[_Union[RunError, _Mapping]] = ..., waiting: _Optional[_Iterable[_Union[WaitingNode, _Mapping]]] = ..., event_count: _Optional[int] = ..., created_unix_ms: _Optional[int] = ..., unhosted: _Optional[_Iterable[_Union[UnhostedWait, _Mapping]]] = ..., children: _Optional[_Iterable[_Union[ChildRun, _Mapping]]] = ..., namespace: _Optional[str] = ..., submitted_by: _Optional[str] = ..., answers: _Optional[_Iterable[_Union[Answer, _Mapping]]] = ..., ended_unix_ms: _Optional[int] = ..., diagram_svg: _Optional[str] = ..., trace_id: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., input_fields: _Optional[_Iterable[str]] = ..., forked_from_run: _Optional[str] = ..., forked_from_step: _Optional[int] = ..., forked_from_point: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("calls", "prompt_tokens", "completion_tokens", "cached_tokens", "cost")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    cost: float
    def __init__(self, calls: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., cost: _Optional[float] = ...) -> None: ...

class Answer(_message.Message):
    __slots__ = ("node", "by", "approved")
    NODE_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    node: str
    by: str
    approved: bool
    def __init__(self, node: _Optional[str] = ..., by: _Optional[str] = ..., approved: _Optional[bool] = ...) -> None: ...

class ChildRun(_message.Message):
    __slots__ = ("node", "run_id")
    NODE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    node: str
    run_id: str
    def __init__(self, node: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class UnhostedWait(_message.Message):
    __slots__ = ("node", "needs", "tasks")
    NODE_FIELD_NUMBER: _ClassVar[int]
    NEEDS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    node: str
    needs: str
    tasks: int
    def __init__(self, node: _Optional[str] = ..., needs: _Optional[str] = ..., tasks: _Optional[int] = ...) -> None: ...

class RunError(_message.Message):
    __slots__ = ("kind", "node", "message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: str
    node: str
    message: str
    def __init__(self, kind: _Optional[str] = ..., node: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class WaitingNode(_message.Message):
    __slots__ = ("node", "kind", "prompt")
    NODE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    node: str
    kind: str
    prompt: str
    def __init__(self, node: _Optional[str] = ..., kind: _Optional[str] = ..., prompt: _Optional[str] = ...) -> None: ...

class ListRunsRequest(_message.Message):
    __slots__ = ("limit", "after")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    limit: int
    after: str
    def __init__(self, limit: _Optional[int] = ..., after: _Optional[str] = ...) -> None: ...

class ListRunsResponse(_message.Message):
    __slots__ = ("runs", "next")
    RUNS_FIELD_NUMBER: _ClassVar[int]
    NEXT_FIELD_NUMBER: _ClassVar[int]
    runs: _containers.RepeatedCompositeFieldContainer[RunInfo]
    next: str
    def __init__(self, runs: _Optional[_Iterable[_Union[RunInfo, _Mapping]]] = ..., next: _Optional[str] = ...) -> None: ...

class ListIndexesRequest(_message.Message):
    __slots__ = ("namespace",)
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    def __init__(self, namespace: _Optional[str] = ...) -> None: ...

class ListIndexesResponse(_message.Message):
    __slots__ = ("indexes",)
    INDEXES_FIELD_NUMBER: _ClassVar[int]
    indexes: _containers.RepeatedCompositeFieldContainer[IndexInfo]
    def __init__(self, indexes: _Optional[_Iterable[_Union[IndexInfo, _Mapping]]] = ...) -> None: ...

class FetchIndexRequest(_message.Message):
    __slots__ = ("namespace", "key")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: str
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[str] = ...) -> None: ...

class FetchIndexResponse(_message.Message):
    __slots__ = ("content",)
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    def __init__(self, content: _Optional[bytes] = ...) -> None: ...

class IndexInfo(_message.Message):
    __slots__ = ("namespace", "key", "knowledge", "files", "bytes", "chunks", "index_bytes", "model", "embedding_calls", "build_ms", "built_by", "built_at_ms", "used_at_ms", "run_id", "vector_search")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    INDEX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_CALLS_FIELD_NUMBER: _ClassVar[int]
    BUILD_MS_FIELD_NUMBER: _ClassVar[int]
    BUILT_BY_FIELD_NUMBER: _ClassVar[int]
    BUILT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    USED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    VECTOR_SEARCH_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    key: str
    knowledge: str
    files: int
    bytes: int
    chunks: int
    index_bytes: int
    model: str
    embedding_calls: int
    build_ms: int
    built_by: str
    built_at_ms: int
    used_at_ms: int
    run_id: str
    vector_search: str
    def __init__(self, namespace: _Optional[str] = ..., key: _Optional[str] = ..., knowledge: _Optional[str] = ..., files: _Optional[int] = ..., bytes: _Optional[int] = ..., chunks: _Optional[int] = ..., index_bytes: _Optional[int] = ..., model: _Optional[str] = ..., embedding_calls: _Optional[int] = ..., build_ms: _Optional[int] = ..., built_by: _Optional[str] = ..., built_at_ms: _Optional[int] = ..., used_at_ms: _Optional[int] = ..., run_id: _Optional[str] = ..., vector_search: _Optional[str] = ...) -> None: ...

class WatchRunRequest(_message.Message):
    __slots__ = ("run_id", "types")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, run_id: _Optional[str] = ..., types: _Optional[_Iterable[str]] = ..., **kwargs) -> None: ...

class ForkRequest(_message.Message):
    __slots__ = ("run_id", "at", "point", "set_json")
    class SetJsonEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    SET_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    at: int
    point: int
    set_json: _containers.ScalarMap[str, str]
    def __init__(self, run_id: _Optional[str] = ..., at: _Optional[int] = ..., point: _Optional[int] = ..., set_json: _Optional[_Mapping[str, str]] = ...) -> None: ...

class GetHistoryRequest(_message.Message):
    __slots__ = ("run_id", "at", "point")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    at: int
    point: int
    def __init__(self, run_id: _Optional[str] = ..., at: _Optional[int] = ..., point: _Optional[int] = ...) -> None: ...

class HistoryWave(_message.Message):
    __slots__ = ("step", "point", "at_unix_ms", "status", "changed", "removed")
    STEP_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    step: int
    point: int
    at_unix_ms: int
    status: str
    changed: _containers.RepeatedScalarFieldContainer[str]
    removed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, step: _Optional[int] = ..., point: _Optional[int] = ..., at_unix_ms: _Optional[int] = ..., status: _Optional[str] = ..., changed: _Optional[_Iterable[str]] = ..., removed: _Optional[_Iterable[str]] = ...) -> None: ...

class RunHistory(_message.Message):
    __slots__ = ("waves", "step", "point", "state_json")
    WAVES_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    STATE_JSON_FIELD_NUMBER: _ClassVar[int]
    waves: _containers.RepeatedCompositeFieldContainer[HistoryWave]
    step: int
    point: int
    state_json: str
    def __init__(self, waves: _Optional[_Iterable[_Union[HistoryWave, _Mapping]]] = ..., step: _Optional[int] = ..., point: _Optional[int] = ..., state_json: _Optional[str] = ...) -> None: ...

class StreamRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ..., **kwargs) -> None: ...

class StreamDelta(_message.Message):
    __slots__ = ("offset", "node", "item", "attempt", "kind", "text")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    offset: int
    node: str
    item: int
    attempt: int
    kind: str
    text: str
    def __init__(self, offset: _Optional[int] = ..., node: _Optional[str] = ..., item: _Optional[int] = ..., attempt: _Optional[int] = ..., kind: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class RunEvent(_message.Message):
    __slots__ = ("seq", "at_unix_ms", "wave_started", "node_started", "node_finished", "node_retrying", "node_failed", "node_skipped", "state_changed", "loop_reset", "map_item_finished", "task_unhosted", "waiting_for_input", "input_received", "run_finished", "loop_iteration", "subgraph_started", "message_sent", "model_called", "tool_called", "run_submitted", "run_retried", "cancel_requested", "task_redispatched", "retrieved", "index_built", "task_throttled", "node_cached", "node_not_cached")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    WAVE_STARTED_FIELD_NUMBER: _ClassVar[int]
    NODE_STARTED_FIELD_NUMBER: _ClassVar[int]
    NODE_FINISHED_FIELD_NUMBER: _ClassVar[int]
    NODE_RETRYING_FIELD_NUMBER: _ClassVar[int]
    NODE_FAILED_FIELD_NUMBER: _ClassVar[int]
    NODE_SKIPPED_FIELD_NUMBER: _ClassVar[int]
    STATE_CHANGED_FIELD_NUMBER: _ClassVar[int]
    LOOP_RESET_FIELD_NUMBER: _ClassVar[int]
    MAP_ITEM_FINISHED_FIELD_NUMBER: _ClassVar[int]
    TASK_UNHOSTED_FIELD_NUMBER: _ClassVar[int]
    WAITING_FOR_INPUT_FIELD_NUMBER: _ClassVar[int]
    INPUT_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    RUN_FINISHED_FIELD_NUMBER: _ClassVar[int]
    LOOP_ITERATION_FIELD_NUMBER: _ClassVar[int]
    SUBGRAPH_STARTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SENT_FIELD_NUMBER: _ClassVar[int]
    MODEL_CALLED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLED_FIELD_NUMBER: _ClassVar[int]
    RUN_SUBMITTED_FIELD_NUMBER: _ClassVar[int]
    RUN_RETRIED_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    TASK_REDISPATCHED_FIELD_NUMBER: _ClassVar[int]
    RETRIEVED_FIELD_NUMBER: _ClassVar[int]
    INDEX_BUILT_FIELD_NUMBER: _ClassVar[int]
    TASK_THROTTLED_FIELD_NUMBER: _ClassVar[int]
    NODE_CACHED_FIELD_NUMBER: _ClassVar[int]
    NODE_NOT_CACHED_FIELD_NUMBER: _ClassVar[int]
    seq: int
    at_unix_ms: int
    wave_started: WaveStarted
    node_started: NodeStarted
    node_finished: NodeFinished
    node_retrying: NodeRetrying
    node_failed: NodeFailed
    node_skipped: NodeSkipped
    state_changed: StateChanged
    loop_reset: LoopReset
    map_item_finished: MapItemFinished
    task_unhosted: TaskUnhosted
    waiting_for_input: WaitingForInput
    input_received: InputReceived
    run_finished: RunFinished
    loop_iteration: LoopIteration
    subgraph_started: SubgraphStarted
    message_sent: MessageSent
    model_called: ModelCalled
    tool_called: ToolCalled
    run_submitted: RunSubmitted
    run_retried: RunRetried
    cancel_requested: CancelRequested
    task_redispatched: TaskRedispatched
    retrieved: Retrieved
    index_built: IndexBuilt
    task_throttled: TaskThrottled
    node_cached: NodeCached
    node_not_cached: NodeNotCached
    def __init__(self, seq: _Optional[int] = ..., at_unix_ms: _Optional[int] = ..., wave_started: _Optional[_Union[WaveStarted, _Mapping]] = ..., node_started: _Optional[_Union[NodeStarted, _Mapping]] = ..., node_finished: _Optional[_Union[NodeFinished, _Mapping]] = ..., node_retrying: _Optional[_Union[NodeRetrying, _Mapping]] = ..., node_failed: _Optional[_Union[NodeFailed, _Mapping]] = ..., node_skipped: _Optional[_Union[NodeSkipped, _Mapping]] = ..., state_changed: _Optional[_Union[StateChanged, _Mapping]] = ..., loop_reset: _Optional[_Union[LoopReset, _Mapping]] = ..., map_item_finished: _Optional[_Union[MapItemFinished, _Mapping]] = ..., task_unhosted: _Optional[_Union[TaskUnhosted, _Mapping]] = ..., waiting_for_input: _Optional[_Union[WaitingForInput, _Mapping]] = ..., input_received: _Optional[_Union[InputReceived, _Mapping]] = ..., run_finished: _Optional[_Union[RunFinished, _Mapping]] = ..., loop_iteration: _Optional[_Union[LoopIteration, _Mapping]] = ..., subgraph_started: _Optional[_Union[SubgraphStarted, _Mapping]] = ..., message_sent: _Optional[_Union[MessageSent, _Mapping]] = ..., model_called: _Optional[_Union[ModelCalled, _Mapping]] = ..., tool_called: _Optional[_Union[ToolCalled, _Mapping]] = ..., run_submitted: _Optional[_Union[RunSubmitted, _Mapping]] = ..., run_retried: _Optional[_Union[RunRetried, _Mapping]] = ..., cancel_requested: _Optional[_Union[CancelRequested, _Mapping]] = ..., task_redispatched: _Optional[_Union[TaskRedispatched, _Mapping]] = ..., retrieved: _Optional[_Union[Retrieved, _Mapping]] = ..., index_built: _Optional[_Union[IndexBuilt, _Mapping]] = ..., task_throttled: _Optional[_Union[TaskThrottled, _Mapping]] = ..., node_cached: _Optional[_Union[NodeCached, _Mapping]] = ..., node_not_cached: _Optional[_Union[NodeNotCached, _Mapping]] = ...) -> None: ...

class NodeNotCached(_message.Message):
    __slots__ = ("node", "item", "reason")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node: str
    item: int
    reason: str
    def __init__(self, node: _Optional[str] = ..., item: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class NodeCached(_message.Message):
    __slots__ = ("node", "item", "stored_by", "age_ms")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    STORED_BY_FIELD_NUMBER: _ClassVar[int]
    AGE_MS_FIELD_NUMBER: _ClassVar[int]
    node: str
    item: int
    stored_by: str
    age_ms: int
    def __init__(self, node: _Optional[str] = ..., item: _Optional[int] = ..., stored_by: _Optional[str] = ..., age_ms: _Optional[int] = ...) -> None: ...

class TaskThrottled(_message.Message):
    __slots__ = ("node", "item", "limit", "wait_ms")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    node: str
    item: int
    limit: str
    wait_ms: int
    def __init__(self, node: _Optional[str] = ..., item: _Optional[int] = ..., limit: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class WaveStarted(_message.Message):
    __slots__ = ("step", "nodes")
    STEP_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    step: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, step: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ...) -> None: ...

class NodeStarted(_message.Message):
    __slots__ = ("node", "attempt", "item")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    node: str
    attempt: int
    item: int
    def __init__(self, node: _Optional[str] = ..., attempt: _Optional[int] = ..., item: _Optional[int] = ...) -> None: ...

class NodeFinished(_message.Message):
    __slots__ = ("node", "item", "worker", "usage")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    node: str
    item: int
    worker: str
    usage: Usage
    def __init__(self, node: _Optional[str] = ..., item: _Optional[int] = ..., worker: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ...) -> None: ...

class NodeRetrying(_message.Message):
    __slots__ = ("node", "next_attempt", "delay_ms", "error")
    NODE_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    node: str
    next_attempt: int
    delay_ms: int
    error: str
    def __init__(self, node: _Optional[str] = ..., next_attempt: _Optional[int] = ..., delay_ms: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class NodeFailed(_message.Message):
    __slots__ = ("node", "item", "error", "fallback")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_FIELD_NUMBER: _ClassVar[int]
    node: str
    item: int
    error: str
    fallback: str
    def __init__(self, node: _Optional[str] = ..., item: _Optional[int] = ..., error: _Optional[str] = ..., fallback: _Optional[str] = ...) -> None: ...

class NodeSkipped(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: str
    def __init__(self, node: _Optional[str] = ...) -> None: ...

class StateChanged(_message.Message):
    __slots__ = ("step", "fields", "values", "folded")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class FoldedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    STEP_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    FOLDED_FIELD_NUMBER: _ClassVar[int]
    step: int
    fields: _containers.RepeatedScalarFieldContainer[str]
    values: _containers.ScalarMap[str, str]
    folded: _containers.ScalarMap[str, int]
    def __init__(self, step: _Optional[int] = ..., fields: _Optional[_Iterable[str]] = ..., values: _Optional[_Mapping[str, str]] = ..., folded: _Optional[_Mapping[str, int]] = ...) -> None: ...

class LoopReset(_message.Message):
    __slots__ = ("head",)
    FROM_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    head: str
    def __init__(self, head: _Optional[str] = ..., **kwargs) -> None: ...

class MapItemFinished(_message.Message):
    __slots__ = ("node", "index", "done", "total")
    NODE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    node: str
    index: int
    done: int
    total: int
    def __init__(self, node: _Optional[str] = ..., index: _Optional[int] = ..., done: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class LoopIteration(_message.Message):
    __slots__ = ("node", "iteration", "max_iterations", "done", "reason")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITERATION_FIELD_NUMBER: _ClassVar[int]
    MAX_ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node: str
    iteration: int
    max_iterations: int
    done: bool
    reason: str
    def __init__(self, node: _Optional[str] = ..., iteration: _Optional[int] = ..., max_iterations: _Optional[int] = ..., done: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class MessageSent(_message.Message):
    __slots__ = ("node", "to", "bytes", "content_json")
    NODE_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CONTENT_JSON_FIELD_NUMBER: _ClassVar[int]
    node: str
    to: str
    bytes: int
    content_json: str
    def __init__(self, node: _Optional[str] = ..., to: _Optional[str] = ..., bytes: _Optional[int] = ..., content_json: _Optional[str] = ..., **kwargs) -> None: ...

class ModelCalled(_message.Message):
    __slots__ = ("node", "item", "model", "prompt_tokens", "completion_tokens", "latency_ms", "provider", "cached_tokens", "cost")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    node: str
    item: int
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: int
    provider: str
    cached_tokens: int
    cost: float
    def __init__(self, node: _Optional[str] = ..., item: _Optional[int] = ..., model: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., latency_ms: _Optional[int] = ..., provider: _Optional[str] = ..., cached_tokens: _Optional[int] = ..., cost: _Optional[float] = ...) -> None: ...

class Retrieved(_message.Message):
    __slots__ = ("node", "item", "knowledge", "mode", "hits", "latency_ms")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    node: str
    item: int
    knowledge: _containers.RepeatedScalarFieldContainer[str]
    mode: str
    hits: _containers.RepeatedCompositeFieldContainer[RetrievedHit]
    latency_ms: int
    def __init__(self, node: _Optional[str] = ..., item: _Optional[int] = ..., knowledge: _Optional[_Iterable[str]] = ..., mode: _Optional[str] = ..., hits: _Optional[_Iterable[_Union[RetrievedHit, _Mapping]]] = ..., latency_ms: _Optional[int] = ...) -> None: ...

class RetrievedHit(_message.Message):
    __slots__ = ("source", "heading", "score")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    HEADING_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    source: str
    heading: str
    score: float
    def __init__(self, source: _Optional[str] = ..., heading: _Optional[str] = ..., score: _Optional[float] = ...) -> None: ...

class IndexBuilt(_message.Message):
    __slots__ = ("node", "item", "knowledge", "key", "files", "bytes", "chunks", "index_bytes", "embedding_calls", "latency_ms", "vector_search")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    INDEX_BYTES_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_CALLS_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    VECTOR_SEARCH_FIELD_NUMBER: _ClassVar[int]
    node: str
    item: int
    knowledge: str
    key: str
    files: int
    bytes: int
    chunks: int
    index_bytes: int
    embedding_calls: int
    latency_ms: int
    vector_search: str
    def __init__(self, node: _Optional[str] = ..., item: _Optional[int] = ..., knowledge: _Optional[str] = ..., key: _Optional[str] = ..., files: _Optional[int] = ..., bytes: _Optional[int] = ..., chunks: _Optional[int] = ..., index_bytes: _Optional[int] = ..., embedding_calls: _Optional[int] = ..., latency_ms: _Optional[int] = ..., vector_search: _Optional[str] = ...) -> None: ...

class ToolCalled(_message.Message):
    __slots__ = ("node", "item", "tool", "error", "latency_ms")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    LATENCY_MS_FIELD_NUMBER: _ClassVar[int]
    node: str
    item: int
    tool: str
    error: str
    latency_ms: int
    def __init__(self, node: _Optional[str] = ..., item: _Optional[int] = ..., tool: _Optional[str] = ..., error: _Optional[str] = ..., latency_ms: _Optional[int] = ...) -> None: ...

class SubgraphStarted(_message.Message):
    __slots__ = ("node", "run_id")
    NODE_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    node: str
    run_id: str
    def __init__(self, node: _Optional[str] = ..., run_id: _Optional[str] = ...) -> None: ...

class TaskUnhosted(_message.Message):
    __slots__ = ("node", "needs")
    NODE_FIELD_NUMBER: _ClassVar[int]
    NEEDS_FIELD_NUMBER: _ClassVar[int]
    node: str
    needs: str
    def __init__(self, node: _Optional[str] = ..., needs: _Optional[str] = ...) -> None: ...

class TaskRedispatched(_message.Message):
    __slots__ = ("node", "attempt", "item", "reason", "worker")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    node: str
    attempt: int
    item: int
    reason: str
    worker: str
    def __init__(self, node: _Optional[str] = ..., attempt: _Optional[int] = ..., item: _Optional[int] = ..., reason: _Optional[str] = ..., worker: _Optional[str] = ...) -> None: ...

class WaitingForInput(_message.Message):
    __slots__ = ("node", "kind", "prompt")
    NODE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    node: str
    kind: str
    prompt: str
    def __init__(self, node: _Optional[str] = ..., kind: _Optional[str] = ..., prompt: _Optional[str] = ...) -> None: ...

class InputReceived(_message.Message):
    __slots__ = ("node", "by")
    NODE_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    node: str
    by: str
    def __init__(self, node: _Optional[str] = ..., by: _Optional[str] = ...) -> None: ...

class RunSubmitted(_message.Message):
    __slots__ = ("by", "namespace", "forked_from_run", "forked_from_step", "forked_from_point")
    BY_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_RUN_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_STEP_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_POINT_FIELD_NUMBER: _ClassVar[int]
    by: str
    namespace: str
    forked_from_run: str
    forked_from_step: int
    forked_from_point: int
    def __init__(self, by: _Optional[str] = ..., namespace: _Optional[str] = ..., forked_from_run: _Optional[str] = ..., forked_from_step: _Optional[int] = ..., forked_from_point: _Optional[int] = ...) -> None: ...

class RunRetried(_message.Message):
    __slots__ = ("by",)
    BY_FIELD_NUMBER: _ClassVar[int]
    by: str
    def __init__(self, by: _Optional[str] = ...) -> None: ...

class CancelRequested(_message.Message):
    __slots__ = ("by",)
    BY_FIELD_NUMBER: _ClassVar[int]
    by: str
    def __init__(self, by: _Optional[str] = ...) -> None: ...

class RunFinished(_message.Message):
    __slots__ = ("status", "error")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    status: RunStatus
    error: RunError
    def __init__(self, status: _Optional[_Union[RunStatus, str]] = ..., error: _Optional[_Union[RunError, _Mapping]] = ...) -> None: ...

class ResumeRequest(_message.Message):
    __slots__ = ("run_id", "node", "value_json", "comment")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    node: str
    value_json: str
    comment: str
    def __init__(self, run_id: _Optional[str] = ..., node: _Optional[str] = ..., value_json: _Optional[str] = ..., comment: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class RetryRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class DeleteRunRequest(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class DeleteRunResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
