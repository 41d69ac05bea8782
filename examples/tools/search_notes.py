"""A tool of examples/agent-tools.yaml: the notes' lines that mention a word."""
import json
import sys

NOTES = [
    "Weft runs workflow graphs on a cluster of workers.",
    "The coordinator checkpoints every wave, so runs survive a crash.",
    "Map nodes fan out over a list; teammates can message each other.",
    "Agents call tools declared under tools: in the graph.",
]

word = json.load(sys.stdin)["word"].lower()
print(json.dumps([line for line in NOTES if word in line.lower()]))
