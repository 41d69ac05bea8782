"""Summarises every finding; concat combined both branches' additions."""
import json
import sys

state = json.load(sys.stdin)["state"]
json.dump({"report": "; ".join(state["findings"])}, sys.stdout)
