"""Plans the searches: seeds the findings list."""
import json
import sys

state = json.load(sys.stdin)["state"]
json.dump({"findings": [f"plan: {state.get('topic') or 'everything'}"]}, sys.stdout)
