"""The run viewer's partitions panel in a real browser, on a partitioned group.

Run by the Rust test `viewer::the_partitions_panel_shows_who_leads_what_in_chromium`,
which starts two coordinators sharing four partitions on etcd, submits
runs through both, and passes what the page must show: every run, each
with its partition; each coordinator with the partitions it leads and the
runs they hold, the one the page talks to marked. Screenshots go to --shots.

    partitions.py --base URL --runs JSON --members N --partitions P --shots DIR
"""

import argparse
import json
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

from viewer import CHROMIUM_ARGS, journaled, run, step


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--runs", required=True, help="JSON: run id -> partition")
    parser.add_argument("--members", type=int, required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--shots", required=True)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    runs = json.loads(args.runs)
    shots = Path(args.shots)
    shots.mkdir(parents=True, exist_ok=True)
    expect.set_options(timeout=10_000)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        page = journaled(browser.new_context(viewport={"width": 1400, "height": 1000})).new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(args.base + "/")

        step("list: every run of the group, each with its partition")
        for run_id, partition in runs.items():
            row = page.locator(f'tr.run[data-run="{run_id}"]')
            expect(row).to_be_visible()
            expect(row.locator("td.partition")).to_have_text(str(partition))

        step("panel: each coordinator with the partitions it leads and their runs")
        panel = page.locator("#partitions")
        expect(panel).to_be_visible()
        expect(panel.locator("tr.member")).to_have_count(args.members)
        expect(panel.locator(".chip.partition")).to_have_count(args.partitions)
        expect(panel.locator("tr.member", has_text="(this coordinator)")).to_have_count(1)
        expect(page.locator("#partitions-note")).to_contain_text(
            f"{args.partitions} partitions, {args.partitions} led by {args.members} coordinators"
        )
        held = {}
        for partition in set(runs.values()):
            held[partition] = sum(1 for p in runs.values() if p == partition)
        for partition in range(args.partitions):
            count = held.get(partition, 0)
            chip = panel.locator(f'.chip.partition[data-partition="{partition}"]')
            expect(chip).to_have_text(f"{partition} · {count} {'run' if count == 1 else 'runs'}")
        page.screenshot(path=str(shots / "viewer-partitions.png"), full_page=True)
        assert not errors, f"the page threw: {errors}"
        browser.close()
    print("the partitions panel passed")


if __name__ == "__main__":
    run(main)
