"""Accepts a finding or sends the item back to research with feedback.

Runs as a step of a map item's chain: fork-local fields (retry_count,
retry_feedback, draft) are scratch and vanish at collect; only `finding`
is collected.
"""
import json
import sys

request = json.load(sys.stdin)
state = request["state"]
draft = state.get("draft", "")
retries = int(state.get("retry_count", 0))
if len(draft) >= 20 or retries >= 2:
    json.dump({"finding": draft}, sys.stdout)
else:
    json.dump({
        "_next": "research_subject",
        "retry_feedback": "go deeper: at least 20 characters",
        "retry_count": retries + 1,
    }, sys.stdout)
