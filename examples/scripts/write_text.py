"""The writer: each round adds what the critic asked for."""
import json
import sys

task = json.load(sys.stdin)
state, loop = task["state"], task["scope"]["loop"]
text = state.get("text") or f"A note on {state.get('topic') or 'Weft'}."
notes = state.get("verdict", "")
if "example" in notes:
    text += " For example, a review loop."
elif "longer" in notes:
    text += " It runs graphs on a cluster."
json.dump({"text": text, "rounds": loop["iteration"]}, sys.stdout)
