"""The critic: asks for length first, then for an example."""
import json
import sys

text = json.load(sys.stdin)["state"]["text"]
if len(text) < 40:
    verdict = "make it longer"
elif "example" not in text:
    verdict = "add an example"
else:
    verdict = "approved"
json.dump({"verdict": verdict}, sys.stdout)
