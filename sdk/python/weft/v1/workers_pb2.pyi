from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkerMessage(_message.Message):
    __slots__ = ("hello", "result", "heartbeat", "call_result", "drain", "refused", "send", "results", "tool_call", "permit", "usage", "stream")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    CALL_RESULT_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    SEND_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    PERMIT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    result: TaskResult
    heartbeat: Heartbeat
    call_result: CallResult
    drain: Drain
    refused: TaskRefused
    send: TeamSend
    results: ResultBatch
    tool_call: ToolCall
    permit: CallPermit
    usage: CallUsage
    stream: TaskStream
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., result: _Optional[_Union[TaskResult, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., call_result: _Optional[_Union[CallResult, _Mapping]] = ..., drain: _Optional[_Union[Drain, _Mapping]] = ..., refused: _Optional[_Union[TaskRefused, _Mapping]] = ..., send: _Optional[_Union[TeamSend, _Mapping]] = ..., results: _Optional[_Union[ResultBatch, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCall, _Mapping]] = ..., permit: _Optional[_Union[CallPermit, _Mapping]] = ..., usage: _Optional[_Union[CallUsage, _Mapping]] = ..., stream: _Optional[_Union[TaskStream, _Mapping]] = ...) -> None: ...

class TaskStream(_message.Message):
    __slots__ = ("run_id", "task_key", "text", "kind")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    text: str
    kind: str
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ..., text: _Optional[str] = ..., kind: _Optional[str] = ...) -> None: ...

class CallPermit(_message.Message):
    __slots__ = ("run_id", "task_key", "request_id", "provider", "model", "tokens")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    request_id: int
    provider: str
    model: str
    tokens: int
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ..., request_id: _Optional[int] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., tokens: _Optional[int] = ...) -> None: ...

class CallUsage(_message.Message):
    __slots__ = ("run_id", "task_key", "grant", "provider", "model", "prompt_tokens", "completion_tokens", "cached_tokens", "rate_limited", "retry_after_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    grant: int
    provider: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    rate_limited: bool
    retry_after_ms: int
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ..., grant: _Optional[int] = ..., provider: _Optional[str] = ..., model: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., rate_limited: _Optional[bool] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("run_id", "task_key", "call_id", "tool", "arguments_json", "timeout_ms")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    call_id: int
    tool: str
    arguments_json: str
    timeout_ms: int
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ..., call_id: _Optional[int] = ..., tool: _Optional[str] = ..., arguments_json: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class ResultBatch(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[TaskResult]
    def __init__(self, results: _Optional[_Iterable[_Union[TaskResult, _Mapping]]] = ...) -> None: ...

class TeamSend(_message.Message):
    __slots__ = ("run_id", "task_key", "send_id", "to", "content_json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    SEND_ID_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    CONTENT_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    send_id: int
    to: str
    content_json: str
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ..., send_id: _Optional[int] = ..., to: _Optional[str] = ..., content_json: _Optional[str] = ...) -> None: ...

class TaskRefused(_message.Message):
    __slots__ = ("run_id", "task_key")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ...) -> None: ...

class Drain(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CoordinatorMessage(_message.Message):
    __slots__ = ("welcome", "task", "cancel", "heartbeat", "call", "forget", "deliver", "send_ack", "tasks", "tool_result", "permit")
    WELCOME_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    FORGET_FIELD_NUMBER: _ClassVar[int]
    DELIVER_FIELD_NUMBER: _ClassVar[int]
    SEND_ACK_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    TOOL_RESULT_FIELD_NUMBER: _ClassVar[int]
    PERMIT_FIELD_NUMBER: _ClassVar[int]
    welcome: Welcome
    task: TaskAssignment
    cancel: CancelTask
    heartbeat: Heartbeat
    call: FunctionCall
    forget: ForgetRun
    deliver: TeamDelivery
    send_ack: SendAck
    tasks: TaskBatch
    tool_result: ToolResult
    permit: PermitAnswer
    def __init__(self, welcome: _Optional[_Union[Welcome, _Mapping]] = ..., task: _Optional[_Union[TaskAssignment, _Mapping]] = ..., cancel: _Optional[_Union[CancelTask, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., call: _Optional[_Union[FunctionCall, _Mapping]] = ..., forget: _Optional[_Union[ForgetRun, _Mapping]] = ..., deliver: _Optional[_Union[TeamDelivery, _Mapping]] = ..., send_ack: _Optional[_Union[SendAck, _Mapping]] = ..., tasks: _Optional[_Union[TaskBatch, _Mapping]] = ..., tool_result: _Optional[_Union[ToolResult, _Mapping]] = ..., permit: _Optional[_Union[PermitAnswer, _Mapping]] = ...) -> None: ...

class PermitAnswer(_message.Message):
    __slots__ = ("run_id", "task_key", "request_id", "grant", "refused")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    request_id: int
    grant: int
    refused: str
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ..., request_id: _Optional[int] = ..., grant: _Optional[int] = ..., refused: _Optional[str] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("run_id", "task_key", "call_id", "value_json", "error")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    call_id: int
    value_json: str
    error: str
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ..., call_id: _Optional[int] = ..., value_json: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class TaskBatch(_message.Message):
    __slots__ = ("tasks",)
    TASKS_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskAssignment]
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskAssignment, _Mapping]]] = ...) -> None: ...

class TeamDelivery(_message.Message):
    __slots__ = ("run_id", "task_key", "message")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    message: TeamMessage
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ..., message: _Optional[_Union[TeamMessage, _Mapping]] = ...) -> None: ...

class SendAck(_message.Message):
    __slots__ = ("run_id", "send_id", "error")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    SEND_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    send_id: int
    error: str
    def __init__(self, run_id: _Optional[str] = ..., send_id: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class TeamMessage(_message.Message):
    __slots__ = ("content_json", "seq")
    FROM_FIELD_NUMBER: _ClassVar[int]
    CONTENT_JSON_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    content_json: str
    seq: int
    def __init__(self, content_json: _Optional[str] = ..., seq: _Optional[int] = ..., **kwargs) -> None: ...

class Team(_message.Message):
    __slots__ = ("me", "members", "inbox")
    ME_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    INBOX_FIELD_NUMBER: _ClassVar[int]
    me: str
    members: _containers.RepeatedScalarFieldContainer[str]
    inbox: _containers.RepeatedCompositeFieldContainer[TeamMessage]
    def __init__(self, me: _Optional[str] = ..., members: _Optional[_Iterable[str]] = ..., inbox: _Optional[_Iterable[_Union[TeamMessage, _Mapping]]] = ...) -> None: ...

class ForgetRun(_message.Message):
    __slots__ = ("run_id",)
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    def __init__(self, run_id: _Optional[str] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("protocol_version", "name", "slots", "labels", "kinds", "handlers", "functions", "tools", "takes_batches", "tool_infos", "keeps_nodes", "keeps_bundles", "handler_reads")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    HANDLERS_FIELD_NUMBER: _ClassVar[int]
    FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TAKES_BATCHES_FIELD_NUMBER: _ClassVar[int]
    TOOL_INFOS_FIELD_NUMBER: _ClassVar[int]
    KEEPS_NODES_FIELD_NUMBER: _ClassVar[int]
    KEEPS_BUNDLES_FIELD_NUMBER: _ClassVar[int]
    HANDLER_READS_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    name: str
    slots: int
    labels: _containers.ScalarMap[str, str]
    kinds: _containers.RepeatedScalarFieldContainer[str]
    handlers: _containers.RepeatedScalarFieldContainer[str]
    functions: _containers.RepeatedScalarFieldContainer[str]
    tools: _containers.RepeatedScalarFieldContainer[str]
    takes_batches: bool
    tool_infos: _containers.RepeatedCompositeFieldContainer[ToolInfo]
    keeps_nodes: bool
    keeps_bundles: bool
    handler_reads: _containers.RepeatedCompositeFieldContainer[HandlerReads]
    def __init__(self, protocol_version: _Optional[int] = ..., name: _Optional[str] = ..., slots: _Optional[int] = ..., labels: _Optional[_Mapping[str, str]] = ..., kinds: _Optional[_Iterable[str]] = ..., handlers: _Optional[_Iterable[str]] = ..., functions: _Optional[_Iterable[str]] = ..., tools: _Optional[_Iterable[str]] = ..., takes_batches: _Optional[bool] = ..., tool_infos: _Optional[_Iterable[_Union[ToolInfo, _Mapping]]] = ..., keeps_nodes: _Optional[bool] = ..., keeps_bundles: _Optional[bool] = ..., handler_reads: _Optional[_Iterable[_Union[HandlerReads, _Mapping]]] = ...) -> None: ...

class HandlerReads(_message.Message):
    __slots__ = ("handler", "fields")
    HANDLER_FIELD_NUMBER: _ClassVar[int]
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    handler: str
    fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, handler: _Optional[str] = ..., fields: _Optional[_Iterable[str]] = ...) -> None: ...

class ToolInfo(_message.Message):
    __slots__ = ("name", "description", "parameters_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ...) -> None: ...

class Welcome(_message.Message):
    __slots__ = ("worker_id", "heartbeat_interval_ms", "max_result_bytes", "max_batch", "worker_timeout_ms")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_RESULT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    WORKER_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    heartbeat_interval_ms: int
    max_result_bytes: int
    max_batch: int
    worker_timeout_ms: int
    def __init__(self, worker_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ..., max_result_bytes: _Optional[int] = ..., max_batch: _Optional[int] = ..., worker_timeout_ms: _Optional[int] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("at_unix_ms",)
    AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    at_unix_ms: int
    def __init__(self, at_unix_ms: _Optional[int] = ...) -> None: ...

class TaskAssignment(_message.Message):
    __slots__ = ("run_id", "task_key", "node", "attempt", "kind", "config_json", "state", "scope_json", "item", "timeout_ms", "bundle", "traceparent", "team", "prompts_json", "remote_tools", "flow_grant", "flow_ask", "node_ref", "bundle_keep", "bundle_held")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_JSON_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    PROMPTS_JSON_FIELD_NUMBER: _ClassVar[int]
    REMOTE_TOOLS_FIELD_NUMBER: _ClassVar[int]
    FLOW_GRANT_FIELD_NUMBER: _ClassVar[int]
    FLOW_ASK_FIELD_NUMBER: _ClassVar[int]
    NODE_REF_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_KEEP_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_HELD_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    node: str
    attempt: int
    kind: str
    config_json: str
    state: _containers.RepeatedCompositeFieldContainer[StateField]
    scope_json: str
    item: ItemRef
    timeout_ms: int
    bundle: _containers.RepeatedCompositeFieldContainer[BlobRef]
    traceparent: str
    team: Team
    prompts_json: str
    remote_tools: _containers.RepeatedCompositeFieldContainer[ToolInfo]
    flow_grant: int
    flow_ask: bool
    node_ref: int
    bundle_keep: int
    bundle_held: int
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ..., node: _Optional[str] = ..., attempt: _Optional[int] = ..., kind: _Optional[str] = ..., config_json: _Optional[str] = ..., state: _Optional[_Iterable[_Union[StateField, _Mapping]]] = ..., scope_json: _Optional[str] = ..., item: _Optional[_Union[ItemRef, _Mapping]] = ..., timeout_ms: _Optional[int] = ..., bundle: _Optional[_Iterable[_Union[BlobRef, _Mapping]]] = ..., traceparent: _Optional[str] = ..., team: _Optional[_Union[Team, _Mapping]] = ..., prompts_json: _Optional[str] = ..., remote_tools: _Optional[_Iterable[_Union[ToolInfo, _Mapping]]] = ..., flow_grant: _Optional[int] = ..., flow_ask: _Optional[bool] = ..., node_ref: _Optional[int] = ..., bundle_keep: _Optional[int] = ..., bundle_held: _Optional[int] = ...) -> None: ...

class StateField(_message.Message):
    __slots__ = ("name", "version", "json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: int
    json: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[int] = ..., json: _Optional[str] = ...) -> None: ...

class ItemRef(_message.Message):
    __slots__ = ("map", "index", "step")
    MAP_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    map: str
    index: int
    step: int
    def __init__(self, map: _Optional[str] = ..., index: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class BlobRef(_message.Message):
    __slots__ = ("path", "sha256", "mode")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    path: str
    sha256: str
    mode: int
    def __init__(self, path: _Optional[str] = ..., sha256: _Optional[str] = ..., mode: _Optional[int] = ...) -> None: ...

class CancelTask(_message.Message):
    __slots__ = ("run_id", "task_key")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ...) -> None: ...

class TaskResult(_message.Message):
    __slots__ = ("run_id", "task_key", "output", "error", "messages_read")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_READ_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    task_key: int
    output: TaskOutput
    error: TaskError
    messages_read: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, run_id: _Optional[str] = ..., task_key: _Optional[int] = ..., output: _Optional[_Union[TaskOutput, _Mapping]] = ..., error: _Optional[_Union[TaskError, _Mapping]] = ..., messages_read: _Optional[_Iterable[int]] = ...) -> None: ...

class TaskOutput(_message.Message):
    __slots__ = ("json", "output_json", "notes_json")
    JSON_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    NOTES_JSON_FIELD_NUMBER: _ClassVar[int]
    json: str
    output_json: str
    notes_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, json: _Optional[str] = ..., output_json: _Optional[str] = ..., notes_json: _Optional[_Iterable[str]] = ...) -> None: ...

class TaskError(_message.Message):
    __slots__ = ("kind", "message", "notes_json")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    NOTES_JSON_FIELD_NUMBER: _ClassVar[int]
    kind: str
    message: str
    notes_json: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[str] = ..., message: _Optional[str] = ..., notes_json: _Optional[_Iterable[str]] = ...) -> None: ...

class FunctionCall(_message.Message):
    __slots__ = ("call_id", "run_id", "name", "args_json", "timeout_ms", "judge", "python", "bundle", "tool")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGS_JSON_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    PYTHON_FIELD_NUMBER: _ClassVar[int]
    BUNDLE_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    run_id: str
    name: str
    args_json: str
    timeout_ms: int
    judge: bool
    python: PythonCall
    bundle: _containers.RepeatedCompositeFieldContainer[BlobRef]
    tool: ToolContext
    def __init__(self, call_id: _Optional[int] = ..., run_id: _Optional[str] = ..., name: _Optional[str] = ..., args_json: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., judge: _Optional[bool] = ..., python: _Optional[_Union[PythonCall, _Mapping]] = ..., bundle: _Optional[_Iterable[_Union[BlobRef, _Mapping]]] = ..., tool: _Optional[_Union[ToolContext, _Mapping]] = ...) -> None: ...

class ToolContext(_message.Message):
    __slots__ = ("node", "attempt", "task_key", "scope_json", "item")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TASK_KEY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_JSON_FIELD_NUMBER: _ClassVar[int]
    ITEM_FIELD_NUMBER: _ClassVar[int]
    node: str
    attempt: int
    task_key: int
    scope_json: str
    item: int
    def __init__(self, node: _Optional[str] = ..., attempt: _Optional[int] = ..., task_key: _Optional[int] = ..., scope_json: _Optional[str] = ..., item: _Optional[int] = ...) -> None: ...

class PythonCall(_message.Message):
    __slots__ = ("module", "function", "dir", "form")
    MODULE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_FIELD_NUMBER: _ClassVar[int]
    DIR_FIELD_NUMBER: _ClassVar[int]
    FORM_FIELD_NUMBER: _ClassVar[int]
    module: str
    function: str
    dir: str
    form: str
    def __init__(self, module: _Optional[str] = ..., function: _Optional[str] = ..., dir: _Optional[str] = ..., form: _Optional[str] = ...) -> None: ...

class CallResult(_message.Message):
    __slots__ = ("call_id", "run_id", "value_json", "error", "tool")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    call_id: int
    run_id: str
    value_json: str
    error: str
    tool: bool
    def __init__(self, call_id: _Optional[int] = ..., run_id: _Optional[str] = ..., value_json: _Optional[str] = ..., error: _Optional[str] = ..., tool: _Optional[bool] = ...) -> None: ...

class FetchBlobRequest(_message.Message):
    __slots__ = ("sha256",)
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    def __init__(self, sha256: _Optional[str] = ...) -> None: ...

class FetchBlobResponse(_message.Message):
    __slots__ = ("content",)
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    def __init__(self, content: _Optional[bytes] = ...) -> None: ...

class IndexUpload(_message.Message):
    __slots__ = ("want", "piece", "failed")
    WANT_FIELD_NUMBER: _ClassVar[int]
    PIECE_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    want: IndexWanted
    piece: IndexPiece
    failed: str
    def __init__(self, want: _Optional[_Union[IndexWanted, _Mapping]] = ..., piece: _Optional[_Union[IndexPiece, _Mapping]] = ..., failed: _Optional[str] = ...) -> None: ...

class IndexWanted(_message.Message):
    __slots__ = ("run_id", "key", "knowledge", "timeout_ms", "worker")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    WORKER_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    key: str
    knowledge: str
    timeout_ms: int
    worker: str
    def __init__(self, run_id: _Optional[str] = ..., key: _Optional[str] = ..., knowledge: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., worker: _Optional[str] = ...) -> None: ...

class IndexPiece(_message.Message):
    __slots__ = ("data", "sha256", "last", "built_json")
    DATA_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    BUILT_JSON_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    sha256: str
    last: bool
    built_json: str
    def __init__(self, data: _Optional[bytes] = ..., sha256: _Optional[str] = ..., last: _Optional[bool] = ..., built_json: _Optional[str] = ...) -> None: ...

class IndexDownload(_message.Message):
    __slots__ = ("build", "waiting", "piece", "kept")
    BUILD_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    PIECE_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    build: IndexBuild
    waiting: str
    piece: IndexPiece
    kept: IndexKept
    def __init__(self, build: _Optional[_Union[IndexBuild, _Mapping]] = ..., waiting: _Optional[str] = ..., piece: _Optional[_Union[IndexPiece, _Mapping]] = ..., kept: _Optional[_Union[IndexKept, _Mapping]] = ...) -> None: ...

class IndexBuild(_message.Message):
    __slots__ = ("max_bytes",)
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    max_bytes: int
    def __init__(self, max_bytes: _Optional[int] = ...) -> None: ...

class IndexKept(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: str
    def __init__(self, error: _Optional[str] = ...) -> None: ...
