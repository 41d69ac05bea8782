"""Appends a paper finding (runs in the same wave as search_web)."""
import json
import sys

state = json.load(sys.stdin)["state"]
json.dump({"findings": state["findings"] + ["papers: two surveys"]}, sys.stdout)
