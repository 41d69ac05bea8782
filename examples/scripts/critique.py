"""Scores the draft: longer drafts that mention an example score higher."""
import json
import sys

state = json.load(sys.stdin)["state"]
draft = state.get("draft", "")
score = min(1.0, len(draft) / 80) * (1.0 if "example" in draft else 0.7)
json.dump({"score": round(score, 2)}, sys.stdout)
