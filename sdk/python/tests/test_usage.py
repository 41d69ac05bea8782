"""Model usage as the client reads it off the wire: on a run (its sum, with
the cost the coordinator's `[prices]` give) and on a step's `node_finished`
and `model_called` events."""

from weft.types import Usage, event_from_wire, run_from_wire
from weft.v1 import runs_pb2 as pb


def test_a_runs_usage_and_cost_are_read():
    info = pb.RunInfo(
        run_id="run-1",
        usage=pb.Usage(calls=3, prompt_tokens=1200, completion_tokens=90, cached_tokens=512, cost=0.0041),
    )
    run = run_from_wire(info)
    assert run.usage == Usage(3, 1200, 90, 512, 0.0041)
    # A run that called no model has an empty usage, and no cost.
    assert run_from_wire(pb.RunInfo(run_id="run-2")).usage == Usage()


def test_a_steps_usage_and_a_calls_tokens_are_numbers():
    finished = pb.RunEvent(
        seq=4,
        node_finished=pb.NodeFinished(
            node="ask", item=2, usage=pb.Usage(calls=1, prompt_tokens=40, completion_tokens=7)
        ),
    )
    event = event_from_wire(finished)
    # As `weft watch --json` has it: no cost without prices.
    assert event.fields["usage"] == {"calls": 1, "prompt_tokens": 40, "completion_tokens": 7, "cached_tokens": 0}
    assert event.usage == Usage(1, 40, 7, 0, None)
    called = pb.RunEvent(
        seq=3,
        model_called=pb.ModelCalled(
            node="ask", model="tiny", prompt_tokens=40, completion_tokens=7, cached_tokens=20,
            provider="default", cost=0.5,
        ),
    )
    event = event_from_wire(called)
    assert (event["cached_tokens"], event["provider"], event["cost"]) == (20, "default", 0.5)
    throttled = pb.RunEvent(seq=5, task_throttled=pb.TaskThrottled(node="ask", limit="api", wait_ms=250))
    event = event_from_wire(throttled)
    assert (event.type, event["limit"], event["wait_ms"], event["item"]) == ("task_throttled", "api", 250, None)
