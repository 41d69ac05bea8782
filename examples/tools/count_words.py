"""A tool of examples/agent-tools.yaml: how many words a text has."""
import json
import sys

print(len(json.load(sys.stdin)["text"].split()))
