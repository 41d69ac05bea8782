"""The run viewer in a real browser: Debian's chromium driven by Playwright.

Run by the Rust test `viewer::the_page_works_in_chromium`, which starts a
secured coordinator with workers, submits the runs named below and checks
afterwards, through the client, what the page did. Each scenario asserts
what a user would see; the first failed assertion ends the script with
status 1 and says which. Screenshots go to --shots.

    viewer.py --base URL --operator TOKEN --reader TOKEN --runs JSON --go FILE --shots DIR
"""

import argparse
import json
import re
import sys
import time
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def step(text):
    print(f"-- {text}", flush=True)


# What every page asked of the network and said on its console, with the
# time since the start: printed when a scenario fails, so a page stuck on
# "Loading…" says which request it waits for.
JOURNAL = []
STARTED = time.monotonic()


def note(text):
    JOURNAL.append(f"{time.monotonic() - STARTED:8.3f}  {text}")


def journaled(context):
    """`context`, its requests and console messages written in the journal."""
    context.on("request", lambda r: note(f"-> {r.method} {r.url}"))
    context.on("requestfinished", lambda r: note(f"<- {r.method} {r.url}"))
    context.on("requestfailed", lambda r: note(f"!! {r.method} {r.url}: {r.failure}"))
    context.on("console", lambda m: note(f"console {m.type}: {m.text}"))
    context.on("weberror", lambda e: note(f"page error: {e.error}"))
    return context


def signed_in(browser, base, token):
    """A page of a fresh context (its own session storage) signed in with `token`."""
    page = journaled(browser.new_context(viewport={"width": 1400, "height": 1000})).new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(base + "/")
    page.fill("#token", token)
    page.click("#sign-in")
    expect(page.locator("#runs-table")).to_be_visible()
    page.errors = errors
    return page


def sign_in_is_asked_and_a_wrong_token_refused(browser, base, operator):
    step("sign-in: the page asks for a token, refuses a wrong one, takes the right one")
    page = journaled(browser.new_context()).new_page()
    page.goto(base + "/")
    expect(page.locator("#token")).to_be_visible()
    page.fill("#token", "not-a-token")
    page.click("#sign-in")
    expect(page.locator("#sign-in-error")).to_contain_text("token")
    page.fill("#token", operator)
    page.click("#sign-in")
    expect(page.locator("#who")).to_contain_text("ops (operator")
    page.context.close()


def the_list_shows_and_filters_runs(page, base, runs):
    step("list: every submitted run, filtered by status and by graph")
    for run_id in runs.values():
        expect(page.locator(f'tr.run[data-run="{run_id}"]')).to_be_visible()
    # One coordinator leads every run: no partitions panel, no column.
    expect(page.locator("#partitions")).to_be_hidden()
    expect(page.locator("td.partition")).to_have_count(0)
    page.select_option("#filter-status", "waiting")
    expect(page.locator('tr.run:not([data-status="waiting"])')).to_have_count(0)
    expect(page.locator(f'tr.run[data-run="{runs["approval"]}"]')).to_be_visible()
    expect(page.locator(f'tr.run[data-run="{runs["input"]}"]')).to_be_visible()
    expect(page).to_have_url(re.compile(r"\?status=waiting$"))
    page.select_option("#filter-status", "")
    page.fill("#filter-graph", "doubling")
    page.press("#filter-graph", "Enter")
    expect(page.locator("tr.run")).to_have_count(1)
    expect(page.locator(f'tr.run[data-run="{runs["map"]}"]')).to_be_visible()
    page.click(f'tr.run[data-run="{runs["map"]}"] a')
    expect(page).to_have_url(re.compile(f"/runs/{runs['map']}$"))


def a_network_blip_while_loading_is_survived(browser, base, operator, run_id):
    step("blip: a script and two reads abandoned once (as when the network changes), the page loads anyway")
    page = signed_in(browser, base, operator)
    failed = []

    def once(route):
        path = route.request.url.split("?")[0].removeprefix(base)
        if path in failed:
            route.continue_()
        else:
            failed.append(path)
            route.abort("internetdisconnected")

    for pattern in ["**/assets/run_model.js", "**/api/v1/whoami", f"**/api/v1/runs/{run_id}"]:
        page.route(pattern, once)
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator('.loop[data-node="repeat"] tr')).to_have_count(3)
    assert sorted(failed) == sorted(["/assets/run_model.js", "/api/v1/whoami", f"/api/v1/runs/{run_id}"]), failed
    assert not page.errors, f"the page threw: {page.errors}"
    page.context.close()
    step("blip: a coordinator whose scripts never come says so after a few reloads")
    page = signed_in(browser, base, operator)
    page.route("**/assets/main.js", lambda route: route.abort("connectionrefused"))
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#failure")).to_contain_text("could not be loaded")
    page.context.close()


def a_running_map_is_watched_to_its_end(page, base, run_id, go, shots):
    step("map: items finish live, the diagram colours the map, a mid-map screenshot")
    page.goto(f"{base}/runs/{run_id}")
    # The page's first paint of a run: longer than the other steps' waits,
    # as CI runs this beside the multi-host suite's containers on 2 cores.
    expect(page.locator('#diagram g.node[data-node="gate"]')).to_have_attribute(
        "data-status", "running", timeout=30_000)
    # The map's first node waits for this file: its items start now.
    Path(go).touch()
    counts = page.locator('.map[data-node="fan"] .counts')
    expect(counts).to_be_visible(timeout=20_000)
    seen = []
    shot = False
    deadline = time.time() + 60
    while time.time() < deadline:
        text = counts.inner_text()
        if not seen or seen[-1] != text:
            seen.append(text)
        done = int(text.split(" done")[0])
        if not shot and 10 <= done <= 40:
            page.screenshot(path=str(shots / "viewer-map.png"), full_page=False)
            shot = True
        if text.startswith("60 done"):
            break
        page.wait_for_timeout(100)
    print("   counts seen:", " | ".join(seen))
    assert seen[-1] == "60 done, 0 running, 0 failed of 60", f"the map did not finish on the page: {seen[-1]}"
    assert len(seen) >= 4, f"too few live updates seen: {seen}"
    done_counts = [int(text.split(" done")[0]) for text in seen]
    assert done_counts == sorted(done_counts), f"the done count went back: {seen}"
    assert shot, "no screenshot was taken mid-map"
    expect(page.locator("#run-status")).to_have_text("completed", timeout=20_000)
    expect(page.locator('#diagram g.node[data-node="fan"]')).to_have_attribute("data-status", "done")
    expect(page.locator('.map[data-node="fan"] tr[data-item]')).to_have_count(60)
    page.select_option('.map[data-node="fan"] .item-filter', "done")
    expect(page.locator('.map[data-node="fan"] tr[data-item]')).to_have_count(60)
    page.fill("#event-filter", "map_item_finished")
    expect(page.locator("#events-note")).to_contain_text("60 shown")
    page.fill("#event-filter", "")
    page.click('#diagram g.node[data-node="fan"]')
    expect(page.locator("#node-detail")).to_contain_text("fan")
    workers = set(page.locator('.map[data-node="fan"] tr[data-item] td.worker').all_inner_texts())
    assert workers and workers <= {"a", "b"}, f"items name the workers that ran them: {workers}"


def a_reader_sees_no_actions_and_cannot_act(browser, base, reader, run_id):
    step("reader: no action buttons or answer forms, and an action is refused")
    page = signed_in(browser, base, reader)
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("waiting")
    expect(page.locator('.waiting-form[data-node="approve"]')).to_be_visible()
    expect(page.locator(".waiting-form button")).to_have_count(0)
    expect(page.locator("#cancel")).to_have_count(0)
    # A reader reads any wave's whole state, but has no "fork from here".
    expect(page.locator("#waves button.whole-state").first).to_be_visible()
    expect(page.locator("#waves button.fork")).to_have_count(0)
    refused = page.evaluate(
        """async ([id, token]) => {
            const response = await fetch(`/api/v1/runs/${id}/cancel`, {
                method: "POST", headers: { Authorization: "Bearer " + token } });
            return { status: response.status, body: await response.json() };
        }""",
        [run_id, reader],
    )
    assert refused["status"] == 403, refused
    assert "needs the role operator or admin" in refused["body"]["error"]["message"], refused
    page.context.close()


def an_approval_is_answered_through_the_form(page, base, run_id, shots):
    step("approval: the form approves with a comment, the run completes, who answered shows")
    page.goto(f"{base}/runs/{run_id}")
    form = page.locator('.waiting-form[data-node="approve"]')
    expect(form).to_contain_text("Publish hello?")
    expect(page.locator('#diagram g.node[data-node="approve"]')).to_have_attribute("data-status", "waiting")
    expect(page.locator("#events tr[data-type=waiting_for_input]")).to_be_visible()
    page.screenshot(path=str(shots / "viewer-approval.png"), full_page=False)
    form.locator("textarea.comment").fill("ship it")
    form.locator("button.approve").click()
    expect(page.locator("#run-status")).to_have_text("completed", timeout=20_000)
    expect(page.locator("#answers")).to_contain_text("approve: approved by ops")
    expect(page.locator('#diagram g.node[data-node="publish"]')).to_have_attribute("data-status", "done")
    expect(page.locator("#waves [data-step] .field", has_text=re.compile("^approved$"))).to_be_visible()
    page.click('#diagram g.node[data-node="write"]')
    expect(page.locator("#node-detail")).to_contain_text("attempts: 1")
    expect(page.locator("#node-detail .worker")).to_have_text(re.compile(r"^worker: [ab]$"))


def a_wrong_answer_is_refused_on_the_form(page, base, run_id):
    step("input: an answer of the wrong type is refused with the coordinator's reason, a right one taken")
    page.goto(f"{base}/runs/{run_id}")
    form = page.locator('.waiting-form[data-node="ask"]')
    form.locator("textarea.value").fill('"many"')
    form.locator("button.answer").click()
    expect(form.locator(".form-error")).to_contain_text("integer")
    expect(page.locator("#run-status")).to_have_text("waiting")
    form.locator("textarea.value").fill("3")
    form.locator("button.answer").click()
    expect(page.locator("#run-status")).to_have_text("completed", timeout=20_000)


def a_run_is_cancelled(page, base, run_id):
    step("cancel: the button stops a running run")
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("running")
    page.click("#cancel")
    expect(page.locator("#run-status")).to_have_text("cancelled", timeout=20_000)
    expect(page.locator("#cancel")).to_have_count(0)


def a_failed_run_is_retried(page, base, run_id):
    step("retry: a failed run shows its error, and the button runs it again to completion")
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("failed", timeout=20_000)
    expect(page.locator("#run-error")).to_contain_text("first attempt fails")
    page.click("#retry")
    expect(page.locator("#run-status")).to_have_text("completed", timeout=20_000)
    expect(page.locator("#run-error")).to_have_count(0)


def loop_iterations_are_listed(page, base, run_id):
    step("loop: each iteration, and the one whose until ended the loop")
    page.goto(f"{base}/runs/{run_id}")
    rows = page.locator('.loop[data-node="repeat"] tr')
    expect(rows).to_have_count(3, timeout=30_000)
    expect(rows.nth(0)).to_contain_text("1 of 5")
    expect(rows.nth(0)).to_contain_text("goes on")
    expect(rows.nth(2)).to_contain_text("until met: loop ends")
    expect(page.locator('#diagram g.node[data-node="repeat"]')).to_have_attribute("data-status", "done")


def a_subgraph_links_to_its_child_run(page, base, run_id):
    step("subgraph: the node and the header link to the child run")
    page.goto(f"{base}/runs/{run_id}")
    page.click('#diagram g.node[data-node="research"]')
    link = page.locator("#node-detail a")
    expect(link).to_have_text(re.compile("^run-"))
    child = link.inner_text()
    expect(page.locator("a.child-run")).to_have_text(child)
    link.click()
    expect(page).to_have_url(re.compile(f"/runs/{child}$"))
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator('#state tr[data-field="found"]')).to_contain_text('"it"')


def a_rag_nodes_retrieval_is_shown(page, base, run_id, shots):
    step("rag: the node panel shows what it retrieved and the index it built")
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("completed")
    page.click('#diagram g.node[data-node="search"]')
    detail = page.locator("#node-detail")
    expect(detail).to_contain_text("retrieved: keyword over notes")
    hits = page.locator("#node-detail ul.hits li")
    expect(hits.first).to_contain_text("[1] docs/restart.md § Restarting › After a crash")
    expect(detail).to_contain_text("index built: notes, ")
    page.screenshot(path=str(shots / "viewer-rag.png"), full_page=True)


def a_throttled_step_is_marked_until_its_key_frees(page, base, holder, keyed, shots):
    step("flow: a map whose items wait for a concurrency key is marked throttled; they go once its holder is cancelled")
    page.goto(f"{base}/runs/{keyed}")
    fan = page.locator('#diagram g.node[data-node="fan"]')
    expect(fan).to_have_attribute("data-throttled", "concurrency key 'shared' (max 1)", timeout=20_000)
    expect(fan).to_have_class(re.compile(r"\bthrottled\b"))
    expect(page.locator('.legend .status.throttled')).to_be_visible()
    held = page.locator('.map[data-node="fan"] tr[data-throttled]')
    expect(held.first).to_contain_text("throttled")
    page.click('#diagram g.node[data-node="fan"]')
    page.screenshot(path=str(shots / "viewer-throttled.png"), full_page=False)
    # The key's holder, cancelled from its own page: the items go.
    page.goto(f"{base}/runs/{holder}")
    page.click("#cancel")
    expect(page.locator("#run-status")).to_have_text("cancelled", timeout=20_000)
    page.goto(f"{base}/runs/{keyed}")
    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    expect(page.locator('#diagram g.node[data-node="fan"]')).not_to_have_attribute("data-throttled", re.compile(".*"))
    expect(page.locator('.map[data-node="fan"] tr[data-throttled]')).to_have_count(0)


def a_spent_budget_is_shown(page, base, run_id, shots):
    step("flow: the run's usage in the header, the step that would have crossed the budget marked spent")
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("failed")
    expect(page.locator("#run-error")).to_contain_text("BudgetExceeded")
    expect(page.locator("#run-error")).to_contain_text("budget is 1500 tokens")
    expect(page.locator("#usage")).to_contain_text(re.compile(r"\d+ calls · \d+ prompt"))
    ask = page.locator('#diagram g.node[data-node="ask"]')
    expect(ask).to_have_class(re.compile(r"\bspent\b"))
    page.click('#diagram g.node[data-node="ask"]')
    detail = page.locator("#node-detail")
    expect(detail).to_contain_text("spent: its next model call would have crossed the run's budget")
    page.screenshot(path=str(shots / "viewer-spent.png"), full_page=False)


def a_cached_step_is_marked_with_the_run_that_kept_it(page, base, run_id, stored):
    step("cache: a step answered from the node cache is marked, and names the run that kept its answer")
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("completed")
    draft = page.locator('#diagram g.node[data-node="draft"]')
    expect(draft).to_have_class(re.compile(r"\bcached\b"))
    expect(page.locator('.legend .status.cached')).to_be_visible()
    page.click('#diagram g.node[data-node="draft"]')
    note = page.locator("#node-detail .cached-note")
    expect(note).to_contain_text("answered from the cache: kept")
    expect(note.locator("a")).to_have_text(stored)
    # The run that kept it ran the step: no mark there.
    page.goto(f"{base}/runs/{stored}")
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator('#diagram g.node[data-node="draft"]')).not_to_have_class(re.compile(r"\bcached\b"))


def a_running_steps_text_grows_as_its_model_writes(page, base, run_id, shots):
    step("stream: a running llm step's node panel shows its text growing as the model writes it")
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("running")
    page.click('#diagram g.node[data-node="tell"]')
    output = page.locator("#node-detail .model-output")
    expect(output).to_have_attribute("data-state", "writing")
    text = output.locator("pre")
    expect(text).to_contain_text("word0 ")
    so_far = text.inner_text()
    # More comes without a reload.
    expect(text).not_to_have_text(so_far, timeout=10_000)
    assert text.inner_text().startswith(so_far.strip()), "the text grows from where it was"
    page.screenshot(path=str(shots / "viewer-stream.png"), full_page=False)


def a_wave_is_read_whole_and_forked_with_a_field_replaced(page, base, run_id, shots):
    step("fork: a wave's whole state comes from the history; 'fork from here' starts a new run with a field replaced")
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("completed", timeout=20_000)
    wave = page.locator('#waves .change[data-step="1"]')
    wave.locator("button.whole-state").click()
    whole = wave.locator(".wave-state")
    expect(whole.locator('tr[data-field="first"]')).to_contain_text("1")
    expect(whole.locator('tr[data-field="word"]')).to_contain_text("hello")
    wave.locator("button.fork").click()
    form = wave.locator(".fork-form")
    # Refused on the page, naming what is wrong: not JSON, then a value of
    # the wrong type (the coordinator's words).
    form.locator("textarea.fork-set").fill("{nope")
    form.locator("button.fork-go").click()
    expect(form.locator(".form-error")).to_contain_text("not JSON")
    form.locator("textarea.fork-set").fill('{"first": "x"}')
    form.locator("button.fork-go").click()
    expect(form.locator(".form-error")).to_contain_text("cannot set field 'first'")
    form.locator("textarea.fork-set").fill('{"word": "forked"}')
    form.locator("button.fork-go").click()
    expect(page).not_to_have_url(f"{base}/runs/{run_id}", timeout=20_000)
    expect(page.locator("#forked-from")).to_contain_text(f"{run_id} after wave 1")
    expect(page.locator("#run-status")).to_have_text("completed", timeout=20_000)
    expect(page.locator('#state tr[data-field="said"]')).to_contain_text("forked")
    # Its own log: its first event names where it came from, its wave 2.
    expect(page.locator('#diagram g.node[data-node="say"]')).to_have_attribute("data-status", "done")
    expect(page.locator('#waves .change[data-step="2"]')).to_contain_text("said")
    page.screenshot(path=str(shots / "viewer-fork.png"), full_page=False)
    # The original is as it was.
    page.click("#forked-from a")
    expect(page.locator('#state tr[data-field="said"]')).to_contain_text("hello")


def a_point_within_a_maps_wave_is_read_and_forked(page, base, run_id, shots):
    step("fork: the points within a map's wave are listed; one is read whole and forked, its finished items kept")
    page.goto(f"{base}/runs/{run_id}")
    expect(page.locator("#run-status")).to_have_text("completed", timeout=20_000)
    page.locator("#points button.show-points").click()
    points = page.locator("#points .change.point")
    expect(points.first).to_be_visible()
    point = points.first
    at = point.get_attribute("data-step")
    assert at and "." in at, f"a point is named STEP.POINT: {at!r}"
    expect(point).to_contain_text("within wave 2")
    # What the map had done by then, from the run's log.
    expect(point.locator(".point-note")).to_contain_text(re.compile(r"fan: \d+ of 60 items done"))
    point.locator("button.whole-state").click()
    expect(point.locator('.wave-state tr[data-field="items"]')).to_be_visible()
    point.locator("button.fork").click()
    form = point.locator(".fork-form")
    expect(form).to_contain_text(f"at {at} (within wave 2)")
    form.locator("textarea.fork-set").fill('{"delay_ms": 0}')
    form.locator("button.fork-go").click()
    expect(page).not_to_have_url(f"{base}/runs/{run_id}", timeout=20_000)
    expect(page.locator("#forked-from")).to_contain_text(f"{run_id} at {at} (within wave 2)")
    expect(page.locator("#run-status")).to_have_text("completed", timeout=30_000)
    expect(page.locator('#state tr[data-field="results"]')).to_be_visible()
    # Its own log: the map's wave, begun in the original, merges in the fork.
    expect(page.locator('#waves .change[data-step="2"]')).to_contain_text("results")
    expect(page.locator('#diagram g.node[data-node="fan"]')).to_have_attribute("data-status", "done")
    page.screenshot(path=str(shots / "viewer-fork-point.png"), full_page=False)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--operator", required=True)
    parser.add_argument("--reader", required=True)
    parser.add_argument("--runs", required=True, help="JSON: scenario -> run id")
    parser.add_argument("--shots", required=True)
    parser.add_argument("--go", required=True, help="the file that lets the map start")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    runs = json.loads(args.runs)
    shots = Path(args.shots)
    shots.mkdir(parents=True, exist_ok=True)
    expect.set_options(timeout=10_000)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
        sign_in_is_asked_and_a_wrong_token_refused(browser, args.base, args.operator)
        page = signed_in(browser, args.base, args.operator)
        the_list_shows_and_filters_runs(page, args.base, runs)
        a_running_steps_text_grows_as_its_model_writes(page, args.base, runs["story"], shots)
        a_reader_sees_no_actions_and_cannot_act(browser, args.base, args.reader, runs["approval"])
        a_running_map_is_watched_to_its_end(page, args.base, runs["map"], args.go, shots)
        an_approval_is_answered_through_the_form(page, args.base, runs["approval"], shots)
        a_wrong_answer_is_refused_on_the_form(page, args.base, runs["input"])
        a_run_is_cancelled(page, args.base, runs["cancel"])
        a_failed_run_is_retried(page, args.base, runs["retry"])
        loop_iterations_are_listed(page, args.base, runs["loop"])
        a_network_blip_while_loading_is_survived(browser, args.base, args.operator, runs["loop"])
        a_subgraph_links_to_its_child_run(page, args.base, runs["parent"])
        a_rag_nodes_retrieval_is_shown(page, args.base, runs["rag"], shots)
        a_throttled_step_is_marked_until_its_key_frees(page, args.base, runs["holder"], runs["keyed"], shots)
        a_spent_budget_is_shown(page, args.base, runs["spent"], shots)
        a_cached_step_is_marked_with_the_run_that_kept_it(page, args.base, runs["cached"], runs["stored"])
        a_wave_is_read_whole_and_forked_with_a_field_replaced(page, args.base, runs["forkable"], shots)
        a_point_within_a_maps_wave_is_read_and_forked(page, args.base, runs["map"], shots)
        assert not page.errors, f"the page threw: {page.errors}"
        browser.close()
    print("all viewer scenarios passed")


def run(main):
    """Runs `main`; a failed assertion is said, with the journal's last 60
    lines, and ends the script with status 1."""
    try:
        main()
    except AssertionError as error:
        print(f"FAILED: {error}", file=sys.stderr)
        print("the pages' requests and console, last 60:", file=sys.stderr)
        for line in JOURNAL[-60:]:
            print(line, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    run(main)
