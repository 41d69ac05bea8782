"""Ranks the collected findings, longest first."""
import json
import sys

state = json.load(sys.stdin)["state"]
findings = state.get("research_results", [])
json.dump({"ranking": sorted(findings, key=len, reverse=True)}, sys.stdout)
