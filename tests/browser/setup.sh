#!/usr/bin/env bash
# Sets up what the browser tests need: Debian's chromium (as root, with
# apt-get, when it is missing) and Playwright in a venv at
# target/browser-venv (or $WEFT_BROWSER_VENV). The tests find the venv's
# python there, or at $WEFT_BROWSER_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv="${WEFT_BROWSER_VENV:-target/browser-venv}"
if ! command -v chromium >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check -r tests/browser/requirements.txt
"$venv/bin/python" -c "import playwright.sync_api" && echo "browser tests ready: $venv/bin/python, $(command -v chromium)"
