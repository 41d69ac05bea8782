"""Writes the first draft of the piece to approve."""
import json
import sys

state = json.load(sys.stdin)["state"]
json.dump({"draft": f"A short piece titled {state.get('title', 'untitled')}."}, sys.stdout)
