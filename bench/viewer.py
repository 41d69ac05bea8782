"""How responsive the run viewer is, measured in Debian's chromium.

`bench/viewer.sh` starts the cluster and the runs and calls this with:

- `--map RUN`: a 10,000-item map, still running when this starts;
- `--events RUN`: an ended run of about 5,000 events.

Printed, in milliseconds:

- to first paint: from navigation to the diagram coloured and the page's
  first render (`window.weftViewer` set);
- to caught up: until the page has read and drawn every event the run
  had when the page was opened;
- live lag, while the map runs: the time between an event's own time and
  the render that shows it, sampled every 100 ms (median and p95), and what
  one render costs.
"""

import argparse
import json
import statistics
import time
import urllib.request

from playwright.sync_api import sync_playwright

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def event_count(base, run_id):
    with urllib.request.urlopen(f"{base}/api/v1/runs/{run_id}?state=false") as response:
        return json.load(response)["event_count"]


def open_page(browser, base, run_id):
    """Opens the run's page; returns it with the times to first paint and
    to caught up (ms), and the number of events it had to catch up with."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    known = event_count(base, run_id)
    start = time.monotonic()
    page.goto(f"{base}/runs/{run_id}")
    page.wait_for_function("() => window.weftViewer !== undefined", timeout=120_000)
    first = (time.monotonic() - start) * 1000
    page.wait_for_function(f"() => window.weftViewer.events >= {known}", timeout=300_000, polling=50)
    caught_up = (time.monotonic() - start) * 1000
    return page, first, caught_up, known


def percentile(values, share):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--map", required=True)
    parser.add_argument("--events", required=True)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)

        page, first, caught_up, known = open_page(browser, args.base, args.map)
        print(f"10,000-item map, running: first paint {first:.0f} ms, caught up with {known} events in {caught_up:.0f} ms")
        lags, renders = [], []
        while True:
            state = page.evaluate("() => ({...window.weftViewer, status: document.querySelector('#run-status').textContent, now: Date.now()})")
            if state["lastEventAt"]:
                lags.append(state["paintedAt"] - state["lastEventAt"])
                renders.append(state["renderMs"])
            if state["status"] != "running":
                break
            page.wait_for_timeout(100)
        print(f"  live: lag median {statistics.median(lags):.0f} ms, p95 {percentile(lags, 0.95):.0f} ms "
              f"over {len(lags)} samples; a render takes median {statistics.median(renders):.1f} ms, "
              f"p95 {percentile(renders, 0.95):.1f} ms")
        counts = page.inner_text('.map[data-node="fan"] .counts')
        print(f"  at the end the page says: {counts}")
        page.close()

        page, first, caught_up, known = open_page(browser, args.base, args.map)
        print(f"10,000-item map, ended: first paint {first:.0f} ms, caught up with {known} events in {caught_up:.0f} ms")
        page.close()

        page, first, caught_up, known = open_page(browser, args.base, args.events)
        print(f"a run of {known} events, ended: first paint {first:.0f} ms, caught up in {caught_up:.0f} ms")
        start = time.monotonic()
        page.fill("#event-filter", "state_changed")
        page.wait_for_function("() => document.querySelector('#events-note').textContent.includes('shown of')")
        print(f"  filtering its log: {(time.monotonic() - start) * 1000:.0f} ms")
        page.close()
        browser.close()


if __name__ == "__main__":
    main()
