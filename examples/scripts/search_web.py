"""Appends a web finding (runs in the same wave as search_papers)."""
import json
import sys

state = json.load(sys.stdin)["state"]
json.dump({"findings": state["findings"] + ["web: three blog posts"]}, sys.stdout)
