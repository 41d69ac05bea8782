"""Researches one subject (the map item); deeper on a retry."""
import json
import sys

request = json.load(sys.stdin)
subject = request["scope"]["subject"]
feedback = request["state"].get("retry_feedback", "")
draft = f"{subject}: overview" + (" with details and sources" if feedback else "")
json.dump({"draft": draft}, sys.stdout)
