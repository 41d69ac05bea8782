"""Model usage as the client reads it from the JSON forms the native core
hands over (those `weft status --json` and `weft watch --json` print): on
a run (its sum, with the cost the coordinator's `[prices]` give) and on a
step's `node_finished` and `model_called` events."""

from weft.events import event_from_json
from weft.types import Usage, run_from_json


def run(run_id: str, **fields) -> dict:
    """A run's JSON form as the native client gives it."""
    base = {
        "run_id": run_id, "graph": "g", "status": "completed", "state": {}, "error": None,
        "waiting": [], "unhosted": [], "children": [], "answers": [], "namespace": "default",
        "submitted_by": "", "forked_from": None, "event_count": 3, "created_unix_ms": 1,
        "ended_unix_ms": 2, "trace_id": "",
        "usage": {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0},
    }
    return {**base, **fields}


def test_a_runs_usage_and_cost_are_read():
    usage = {"calls": 3, "prompt_tokens": 1200, "completion_tokens": 90, "cached_tokens": 512, "cost": 0.0041}
    assert run_from_json(run("run-1", usage=usage)).usage == Usage(3, 1200, 90, 512, 0.0041)
    # A run that called no model has an empty usage, and no cost.
    assert run_from_json(run("run-2")).usage == Usage()


def test_a_steps_usage_and_a_calls_tokens_are_numbers():
    usage = {"calls": 1, "prompt_tokens": 40, "completion_tokens": 7, "cached_tokens": 0}
    event = event_from_json(4, 0, {"type": "node_finished", "node": "ask", "item": 2, "usage": dict(usage)})
    # As `weft watch --json` has it: no cost without prices.
    assert event.fields["usage"] == usage
    assert event.usage == Usage(1, 40, 7, 0, None)
    event = event_from_json(3, 0, {
        "type": "model_called", "node": "ask", "item": None, "model": "tiny", "prompt_tokens": 40,
        "completion_tokens": 7, "latency_ms": 12, "provider": "default", "cached_tokens": 20, "cost": 0.5,
    })
    assert (event["cached_tokens"], event["provider"], event["cost"]) == (20, "default", 0.5)
    assert (event.prompt_tokens, event.latency_ms, event.item) == (40, 12, None)
    event = event_from_json(5, 0, {"type": "task_throttled", "node": "ask", "item": None, "limit": "api", "wait_ms": 250})
    assert (event.type, event["limit"], event["wait_ms"], event["item"]) == ("task_throttled", "api", 250, None)
    # Left out by the JSON form when unknown: None as an attribute.
    event = event_from_json(6, 0, {"type": "task_throttled", "node": "ask", "item": 1, "limit": "api"})
    assert event.wait_ms is None and "wait_ms" not in event.fields
