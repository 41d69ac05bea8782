"""Ranks examples/research-llm.yaml's findings by the model's confidence."""
import json
import sys

state = json.load(sys.stdin)["state"]
ranked = sorted(state["findings"], key=lambda f: f["confidence"], reverse=True)
print(json.dumps({"ranking": [f["subject"] for f in ranked]}))
