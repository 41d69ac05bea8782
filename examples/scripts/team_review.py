"""A reviewer of examples/team-review.yaml, one map item of a team.

`review`: writes a note on its file and sends it to every other member
(`_send`), then goes on to `consider`. `consider`: adds the notes in its
inbox (drained on read) to those it kept, and loops back to itself until
it has one from every other member; then writes its verdict.
"""

import json
import sys
import time

step = sys.argv[1]
task = json.load(sys.stdin)
team = task["team"]
state = task["state"]
path = task["scope"]["file"]

if step == "review":
    kind = "docs" if path.endswith(".md") else "code"
    note = f"{path}: {kind}, reviewed by {team['me']}"
    others = [member for member in team["members"] if member != team["me"]]
    print(json.dumps({
        "note": note,
        "peer_notes": [],
        "_send": [{"to": other, "content": {"note": note}} for other in others],
        "_next": "consider",
    }))
else:
    notes = state["peer_notes"] + [m["content"]["note"] for m in task["inbox"]]
    if len(notes) < len(team["members"]) - 1:
        time.sleep(0.05)  # not everyone has spoken yet: look again shortly
        print(json.dumps({"peer_notes": notes, "_next": "consider"}))
    else:
        print(json.dumps({"verdict": {
            "file": path,
            "reviewer": team["me"],
            "note": state["note"],
            "heard": sorted(notes),
        }}))
