"""Typed events: one class per event type, its fields typed, usable with
`match`, against a real coordinator and worker; and every event type of
the wire contract has its class, with the wire message's fields."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import weft
from weft.events import TYPES

RUNS_PROTO = Path(__file__).resolve().parents[3] / "proto" / "protos" / "weft" / "v1" / "runs.proto"

FAN_AND_ASK = {
    "name": "fan_and_ask",
    "state": {"items": {"type": "array", "default": [1, 2, 3]},
              "results": {"type": "array", "default": []}},
    "nodes": {
        "fan": {"kind": "map", "start": True, "over": "state.items", "as": "item",
                "branch": "double", "output_key": "doubled", "collect_into": "results",
                "next": "approve"},
        "double": {"kind": "script",
                   "run": ["python3", "-c", "import json, sys; t = json.load(sys.stdin); "
                           "print(json.dumps({'doubled': t['scope']['item'] * 2}))"]},
        "approve": {"kind": "approval", "prompt": "Keep {{ results }}?", "end": True},
    },
}


def describe(event: weft.Event) -> str:
    match event:
        case weft.RunSubmitted(by=by, forked_from=None):
            return f"submitted by {by}"
        case weft.WaveStarted(step, nodes):
            return f"wave {step}: {','.join(nodes)}"
        case weft.MapItemFinished(node="fan", done=done, total=total):
            return f"fan {done}/{total}"
        case weft.StateChanged(values=values):
            return f"results {values.get('results')}"
        case weft.WaitingForInput(node, "approval", prompt):
            return f"{node}? {prompt}"
        case weft.InputReceived(node=node):
            return f"{node} answered"
        case weft.RunFinished(status="completed", error=None):
            return "completed"
        case _:
            return ""


def test_a_runs_events_are_typed_and_matched(cluster):
    client = weft.Client(cluster.url)
    run = client.submit(FAN_AND_ASK)
    assert run.wait(timeout=60).status == "waiting"
    client.resume(run.run_id, "approve", "approve")
    assert run.wait(timeout=60).status == "completed"
    events = list(run.events())
    said = [line for line in map(describe, events) if line]
    assert said == [
        "submitted by anonymous",
        "wave 1: fan",
        "fan 1/3",
        "fan 2/3",
        "fan 3/3",
        "results [2, 4, 6]",
        "wave 2: approve",
        "approve? Keep [2, 4, 6]?",
        "approve answered",
        "results None",
        "completed",
    ]
    # Typed, and still the dict-like `Event` they were.
    finished = [e for e in events if isinstance(e, weft.MapItemFinished)]
    assert all(isinstance(e.index, int) and e.type == "map_item_finished" for e in finished)
    assert finished[0]["total"] == 3 and finished[0].get("done") == 1
    end = events[-1]
    assert isinstance(end, weft.RunFinished) and end.ends_or_pauses
    changed = next(e for e in events if isinstance(e, weft.StateChanged))
    assert changed.fields_changed == ["results"] and changed["fields"] == ["results"]


def messages(proto: str) -> dict[str, str]:
    """Each top-level message of a .proto file's text: its body by name."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^message (\w+) \{", proto, re.MULTILINE):
        depth, end = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(proto[end], 0)
            end += 1
        found[match.group(1)] = proto[match.end():end - 1]
    return found


def field_names(body: str) -> set[str]:
    """The field names of a message's body (comments left out)."""
    body = re.sub(r"//[^\n]*", "", body)
    pattern = r"^\s*(?:optional\s+|repeated\s+)?(?:map<[^>]+>|[\w.]+)\s+(\w+)\s*=\s*\d+\s*;"
    return set(re.findall(pattern, body, re.MULTILINE))


def test_every_event_type_has_its_class_with_the_wire_messages_fields():
    proto = messages(RUNS_PROTO.read_text())
    oneof = re.search(r"oneof event \{([^}]*)\}", proto["RunEvent"]).group(1)
    kinds = dict((name, message) for message, name in re.findall(r"(\w+) (\w+) = \d+;", oneof))
    wire = {name: field_names(proto[message]) for name, message in kinds.items()}
    assert len(wire) > 20 and set(TYPES) == set(wire), set(TYPES) ^ set(wire)
    base = {f.name for f in dataclasses.fields(weft.Event)}
    renamed = {"from_": "from", "fields_changed": "fields", "content": "content_json"}
    forked = {"forked_from": {"forked_from_run", "forked_from_step", "forked_from_point"}}
    for kind, cls in TYPES.items():
        attributes = [f.name for f in dataclasses.fields(cls) if f.name not in base]
        names = set()
        for attribute in attributes:
            names |= forked.get(attribute, {renamed.get(attribute, attribute)})
        assert names == wire[kind], kind
        assert set(cls.__match_args__) <= set(attributes), kind
        assert getattr(weft, cls.__name__) is cls


def test_each_events_fields_are_what_weft_watch_json_prints(cluster):
    """The fields of each event equal its JSON form as the `weft` command
    line prints it (`weft watch RUN --json`), on a run with a map, its
    state, an approval asked and answered, and the end, and on a fork of
    it."""
    import json
    import subprocess

    from conftest import binary

    client = weft.Client(cluster.url)

    def answered(run: weft.Run) -> None:
        for event in run.events():
            if event.type == "waiting_for_input":
                client.resume(run.run_id, "approve", "approve", comment="fine")
        assert run.wait(timeout=30).status == "completed"

    run = client.submit(FAN_AND_ASK)
    answered(run)
    # And a fork of it after the map, whose `run_submitted` names where it
    # came from, and which asks for the approval again in its own log.
    fork = run.fork(at=1)
    answered(fork)
    for watched_run in (run, fork):
        events = list(watched_run.events())
        watched = subprocess.run(
            [str(binary("weft")), "watch", watched_run.run_id, "--json", "--coordinator", cluster.url],
            capture_output=True, text=True, timeout=60)
        assert watched.returncode == 0, watched.stderr
        printed = [json.loads(line) for line in watched.stdout.splitlines() if line.strip()]
        assert [p["type"] for p in printed] == [e.type for e in events]
        for event, body in zip(events, printed):
            assert event.fields == {k: v for k, v in body.items() if k != "type"}, event.type
    assert events[0].fields["forked_from"] == {"run": run.run_id, "step": 1}, events[0]
    assert [e.type for e in events].count("waiting_for_input") == 1, [e.type for e in events]
