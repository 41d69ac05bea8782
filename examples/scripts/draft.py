"""Writes a draft; each revision is longer, and the third adds an example."""
import json
import sys

state = json.load(sys.stdin)["state"]
drafts = int(state.get("drafts", 0)) + 1
topic = state.get("topic") or "workflow graphs"
text = f"Notes on {topic}. " * drafts
if drafts >= 3:
    text += "For example, a review loop."
json.dump({"draft": text.strip(), "drafts": drafts}, sys.stdout)
