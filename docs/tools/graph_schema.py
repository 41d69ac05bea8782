#!/usr/bin/env python3
"""Writes docs/graph.schema.json, the JSON Schema of the graph format.

The kinds and the fields each takes mirror graph/src/raw_node.rs; the test
graph/tests/schema.rs checks that they agree, and validates every example
and test graph against the schema. Run it after changing the format:

    python3 docs/tools/graph_schema.py
"""

import json
import os

COMMON = ["id", "kind", "description", "start", "end", "next", "depends_on", "routes", "fallback"]
RUN = ["retry", "max_attempts", "timeout", "state_updates", "output_schema", "concurrency", "cache"]
KINDS = {
    "task": (["handler", "teammates"], RUN, ["handler"]),
    "script": (["run", "script", "args", "env", "teammates", "sandbox"], RUN, []),
    "llm": (["model", "system", "prompt", "temperature", "max_tokens", "provider"], RUN, ["prompt"]),
    "agent": (["agent", "instructions", "prompt", "tools", "max_turns", "provider", "model", "teammates"], RUN, ["prompt"]),
    "approval": (["prompt", "output_key", "approvers"], ["state_updates", "output_schema"], []),
    "input": (["prompt", "output_key", "schema", "approvers"], ["state_updates", "output_schema"], ["output_key"]),
    "map": (["over", "as", "branch", "output_key", "collect_into", "max_concurrency"], ["state_updates", "output_schema"], ["over", "as", "branch", "collect_into"]),
    "loop": (["body", "until", "max_iterations", "output_key"], ["state_updates"], ["body", "until"]),
    "subgraph": (["graph", "input_map", "output_map"], ["state_updates", "retry", "max_attempts"], ["graph"]),
    "end": (["status", "message"], ["state_updates"], []),
    "function": (["callable", "tool_args", "output_key", "function_sandbox"], RUN, []),
    "python": (["callable", "tool_args", "output_key", "function_sandbox"], RUN, []),
    "rag": (["knowledge", "query", "top_k", "mode", "rag_graph", "rerank", "prompt", "system", "model", "provider", "temperature", "max_tokens"], RUN, ["knowledge"]),
}

string = {"type": "string"}
names = {"type": "array", "items": string}
one_or_many = {"oneOf": [string, names]}
string_map = {"type": "object", "additionalProperties": string}
duration = {"$ref": "#/$defs/duration"}
count = {"type": "integer", "minimum": 1}


def sandbox(cpu):
    """A node's `sandbox:` (with `cpu` for a script's own process)."""
    properties = {
        "memory": {"oneOf": [{"type": "integer", "minimum": 1048576},
                             {"type": "string", "pattern": "^\\s*[0-9]+\\s*([kKmMgG]([iI]?[bB])?|[bB])?\\s*$"}],
                   "description": "Memory: bytes, or 512MiB, 1GiB, 100MB (at least 1MiB)."},
        "cpu": dict(duration, description="CPU time, in whole seconds (5m, 30s)."),
        "processes": dict(count, description="Processes and threads at once."),
        "open_files": dict(count, description="Open files."),
        "network": {"type": "boolean", "description": "false: no network but a loopback."},
    }
    if not cpu:
        del properties["cpu"]
    return {"type": "object", "additionalProperties": False, "properties": properties}

FIELDS = {
    "id": (string, "The node's id (the list form of `nodes:`)."),
    "kind": (None, "What the node runs."),
    "description": (string, "Free text, for people."),
    "start": ({"type": "boolean"}, "Runs in the first wave (the same as an edge from START)."),
    "end": ({"type": "boolean"}, "Marks a terminal node (documentation and the diagram)."),
    "next": (one_or_many, "Unconditional edges to these nodes (several: a static fan-out)."),
    "depends_on": (one_or_many, "Unconditional edges from these nodes."),
    "routes": ({"type": "object", "required": ["router", "map"], "additionalProperties": False,
                "properties": {"router": {"type": "string", "description": "CEL, fn:NAME or a Python function returning a key or a list of keys."},
                               "map": {"type": "object", "additionalProperties": string, "description": "key: target node id (or END)."}}},
               "A router: the targets of the keys it returns."),
    "fallback": (string, "Where to go when the node fails after its attempts (END: end that path)."),
    "retry": ({"oneOf": [count, {"type": "object", "additionalProperties": False, "properties": {
                "max_attempts": count, "initial_interval": duration,
                "backoff": {"type": "number", "minimum": 1}, "max_interval": duration}}]},
              "Attempts in all (default 1), or a policy with the delays between them."),
    "max_attempts": (count, "Attempts in all (a shorthand for retry)."),
    "timeout": (duration, "Per attempt; overrides settings.node_timeout."),
    "state_updates": ({"type": "object"}, "field: template, rendered after the node ran (sees the state and `output`)."),
    "output_schema": ({"type": "object"}, "JSON Schema the node's output must satisfy; its top-level properties are written."),
    "concurrency": ({"type": "object", "required": ["key", "max"], "additionalProperties": False,
                     "properties": {"key": {"type": "string", "minLength": 1, "description": "A template rendered on the state (and a map item's scope) when the step is created."},
                                    "max": count}},
                    "At most `max` of its steps with the same rendered key run at once, across every run of the namespace."),
    "cache": ({"type": "object", "required": ["key", "ttl"], "additionalProperties": False,
               "properties": {"key": {"type": "string", "minLength": 1, "description": "A template rendered on the state (and a map item's scope) when the step is created."},
                              "ttl": duration}},
              "A step whose rendered key (with the graph's name, the node's id and a hash of its definition) was stored within `ttl` in the same namespace does not run: its stored writes are merged (node_cached). Not with `teammates: true`."),
    "teammates": ({"type": "boolean"}, "In a map's branch: the step may message the other items."),
    "handler": (string, "The handler a worker registered."),
    "run": ({"type": "array", "items": string, "minItems": 1}, "argv, run without a shell; files beside the graph are bundled."),
    "script": (string, "An executable beside the graph (with args)."),
    "args": (names, "Arguments to `script`."),
    "env": (string_map, "Extra environment; ${NAME} is a secret substituted on the worker."),
    "model": (string, "The model (default: the provider's)."),
    "system": (string, "The system prompt (a template)."),
    "prompt": (string, "The prompt (a template)."),
    "temperature": ({"type": "number"}, "Sampling temperature."),
    "max_tokens": (count, "Completion length cap."),
    "provider": (string, "A provider of the worker's configuration."),
    "agent": (string, "A named agent (`agents:` or agents/NAME.md) whose fields this node takes; its own override them."),
    "instructions": (string, "The agent's system instructions (a template)."),
    "tools": (names, "Tools the agent may call: entries of `tools:` or worker handlers."),
    "max_turns": (count, "Turn cap."),
    "output_key": (string, "The field the node's value is written to."),
    "schema": ({"type": "object"}, "JSON Schema the answer must satisfy."),
    "approvers": ({"type": "array", "items": string, "minItems": 1}, "Who may answer: identity names, role:operator, role:admin."),
    "over": (string, "The list: a CEL expression (state.items) or a template \"{{ items }}\"."),
    "as": (string, "The item's name in each item's scope."),
    "branch": (string, "The first node of the per-item chain."),
    "collect_into": (string, "The field receiving every item's output_key, in input order."),
    "max_concurrency": ({"oneOf": [count, {"type": "string", "pattern": "\\{\\{"}]}, "Items in flight at most: a number or a template."),
    "body": (string, "The first node of the loop's body chain."),
    "until": (string, "A condition's name, fn:NAME, a Python function, or a sentence a model judges."),
    "max_iterations": (count, "Iteration cap (default 10)."),
    "graph": (string, "The child graph, relative to this file."),
    "input_map": (string_map, "parent field: child field."),
    "output_map": (string_map, "child field: parent field."),
    "status": ({"enum": ["completed", "failed"]}, "How the run ends."),
    "message": (string, "The message of a failed end."),
    "callable": (string, "A function of the functions: file, or module:function."),
    "tool_args": ({"type": "object"}, "Keyword arguments given by the graph (${NAME} secrets allowed)."),
    "sandbox": (sandbox(cpu=True), "Limits of the script's process, each at most the worker's [sandbox] (a node may tighten them, never loosen)."),
    "knowledge": (one_or_many, "The knowledge bases it retrieves from (`knowledge:` entries)."),
    "query": (string, "What it retrieves (a template; default: the prompt, rendered)."),
    "top_k": ({"type": "integer", "minimum": 1, "maximum": 100}, "Passages retrieved (default 5), before graph search adds linked ones."),
    "mode": ({"enum": ["keyword", "vector", "hybrid"]}, "BM25, embeddings, or both fused by RRF (default: hybrid with embeddings, else keyword)."),
    "rag_graph": ({"type": "object", "additionalProperties": False, "required": ["hops"],
                   "properties": {"hops": {"type": "integer", "minimum": 0, "maximum": 3}}},
                  "Graph search over the pages' links, hops deep (default 1; 0 with vector or rerank)."),
    "rerank": ({"type": "object", "additionalProperties": False, "properties": {"model": string, "provider": string}},
               "A model orders the 4 x top_k candidates; graph search is then not applied."),
    "function_sandbox": (sandbox(cpu=False), "Limits of the Python processes that serve the function, each at most the worker's [sandbox]; no cpu (a process serves many calls: bound each with timeout)."),
}


def node_schema(kind):
    own, run, required = KINDS[kind]
    properties = {}
    for name in COMMON + run + own:
        schema, description = FIELDS[name]
        name = {"function_sandbox": "sandbox", "rag_graph": "graph"}.get(name, name)
        if name == "kind":
            properties[name] = {"const": kind, "description": description}
        else:
            properties[name] = dict(schema, description=description)
    node = {"type": "object", "title": kind, "required": ["kind"] + required,
            "properties": properties, "additionalProperties": False}
    if kind == "script":
        node["oneOf"] = [{"required": ["run"]}, {"required": ["script"]}]
    if kind == "rag":
        node["anyOf"] = [{"required": ["query"]}, {"required": ["prompt"]}]
    return node


def main():
    kinds = list(KINDS)
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://weft.invalid/graph.schema.json",
        "title": "Weft graph",
        "description": "A Weft workflow graph (docs/graph-format.md). Generated by docs/tools/graph_schema.py.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "version": {"const": 1},
            "name": string,
            "description": string,
            "settings": {"type": "object", "additionalProperties": False, "properties": {
                "max_steps": count, "max_concurrency": count, "max_node_concurrency": {"type": "integer", "minimum": 0},
                "max_loop_iterations": count, "timeout": duration, "node_timeout": duration,
                "strict_state": {"type": "boolean"}, "durability": {"enum": ["sync", "async", "exit"]},
                "cache": {"type": "boolean", "description": "false: no node's `cache:` is used (nothing looked up or kept)."},
                "budget": {"type": "object", "additionalProperties": False, "minProperties": 1,
                           "properties": {"tokens": count, "cost": {"type": "number", "exclusiveMinimum": 0}},
                           "description": "What the run's model calls may spend (prompt and completion tokens; cost by the coordinator's [prices]), its map items and subgraph children included."},
                "priority": {"enum": ["high", "normal", "low"], "description": "Within a namespace, higher priority runs' steps are dispatched first (weft run --priority overrides it)."}}},
            "functions": {"type": "string", "pattern": "\\.py$", "description": "A Python file beside the graph."},
            "state": {"type": "object", "additionalProperties": {"$ref": "#/$defs/field"}},
            "initial_state": {"type": "object", "description": "Values fields start with: over the declared defaults, under the run's input."},
            "conditions": {"type": "object", "additionalProperties": string},
            "tools": {"type": "object", "additionalProperties": {"$ref": "#/$defs/tool"}},
            "agents": {"type": "object", "additionalProperties": {"$ref": "#/$defs/named_agent"}},
            "knowledge": {"type": "object", "additionalProperties": {"$ref": "#/$defs/knowledge_base"},
                          "description": "Knowledge bases rag nodes retrieve from (docs/retrieval.md)."},
            "nodes": {"oneOf": [
                {"type": "object", "additionalProperties": {"$ref": "#/$defs/node"}},
                {"type": "array", "items": {"allOf": [{"$ref": "#/$defs/node"}, {"required": ["id"]}]}},
            ]},
            "edges": {"type": "array", "items": {"$ref": "#/$defs/edge"}},
        },
        "$defs": {
            "duration": {"oneOf": [{"type": "number", "minimum": 0},
                                   {"type": "string", "pattern": "^\\s*[0-9]+(\\.[0-9]+)?\\s*(ms|s|m|h)?\\s*$"}],
                         "description": "500ms, 0.5s, 10m, 1h, or a number of seconds."},
            "field": {"type": "object", "additionalProperties": False, "properties": {
                "type": {"enum": ["any", "string", "number", "integer", "boolean", "array", "object"]},
                "default": {},
                "reducer": {"type": "string", "description": "concat, merge, add, union, min, max, fn:NAME, or a Python function."},
                "description": string}},
            "named_agent": {"type": "object", "additionalProperties": False, "properties": {
                "instructions": string, "tools": {"type": "array", "items": string},
                "model": string, "provider": string, "max_turns": {"type": "integer", "minimum": 1},
                "teammates": {"type": "boolean"}, "description": string, "name": string}},
            "knowledge_base": {"type": "object", "additionalProperties": False, "properties": {
                "sources": dict(one_or_many, description="Globs over the files beside the graph: * and ? within a directory, ** across them."),
                "chunk": {"type": "object", "additionalProperties": False, "properties": {
                    "size": {"type": "integer", "minimum": 16, "maximum": 100000, "description": "Characters (default 800)."},
                    "overlap": {"type": "integer", "minimum": 0, "description": "Characters shared with the chunk before (default 120), under half the size."}}},
                "embeddings": {"type": "object", "additionalProperties": False, "required": ["model"], "properties": {
                    "model": string, "provider": string,
                    "search": {"enum": ["exact", "approximate"],
                               "description": "How the chunks' embeddings are searched; left out, exactly up to 80,000 chunks of 1,536 dimensions (480,000 of 256), through an HNSW graph above."}}},
                "store": {"type": "object", "additionalProperties": False, "required": ["kind", "url", "table"],
                          "description": "An index kept elsewhere, instead of sources: a PostgreSQL table with pgvector (columns text, embedding, source, heading, links).",
                          "properties": {
                    "kind": {"enum": ["pgvector"]},
                    "url": {"type": "string", "description": "The connection URL; ${NAME} is read from the worker's secrets."},
                    "table": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)?$"}}},
                "description": string},
                "oneOf": [{"required": ["sources"], "not": {"required": ["store"]}},
                          {"required": ["store"], "not": {"anyOf": [{"required": ["sources"]}, {"required": ["chunk"]}]}}]},
            "tool": {"type": "object", "additionalProperties": False, "properties": {
                "description": string, "parameters": {"type": "object"},
                "run": {"type": "array", "items": string, "minItems": 1}, "handler": string}},
            "edge": {"type": "object", "required": ["from", "to"], "additionalProperties": False, "properties": {
                "from": string, "to": string,
                "when": {"type": "string", "description": "A condition's name, inline CEL, or code."},
                "loop": {"type": "boolean", "description": "A declared back-edge."}}},
            "node": {"type": "object", "required": ["kind"],
                     "properties": {"kind": {"enum": kinds}},
                     "allOf": [{"if": {"properties": {"kind": {"const": kind}}},
                                "then": {"$ref": "#/$defs/" + kind}} for kind in kinds]},
        },
    }
    for kind in kinds:
        schema["$defs"][kind] = node_schema(kind)
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "graph.schema.json")
    with open(path, "w") as out:
        json.dump(schema, out, indent=2)
        out.write("\n")


main()
