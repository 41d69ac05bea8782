"""Revises the draft after a rejection, taking the reviewer's comment."""
import json
import sys

state = json.load(sys.stdin)["state"]
comment = state.get("approved_comment", "")
json.dump({
    "draft": state.get("draft", "") + f" (revised: {comment or 'tightened'})",
    "revisions": int(state.get("revisions", 0)) + 1,
}, sys.stdout)
