"""Loads the rubric the critique step scores drafts against."""
import json
import sys

request = json.load(sys.stdin)
json.dump({"rubric": "clear, short, with one example"}, sys.stdout)
