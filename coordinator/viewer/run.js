// The run viewer's page of one run (`/runs/ID`): the run's record and its
// events read into a RunModel, drawn by one panel each (panels/), redrawn
// at most a few times a second however fast events come, and followed as
// server-sent events over `fetch` (so the bearer token goes as a header).

import { RENDER_EVERY_MS, api, el, headers, main, request, showFailure, stopEverything, streams, timers } from "./common.js";
import { eventsPanel } from "./panels/events.js";
import { graphPanel } from "./panels/graph.js";
import { headerPanel } from "./panels/header.js";
import { loopsPanel } from "./panels/loops.js";
import { mapsPanel } from "./panels/maps.js";
import { statePanel } from "./panels/state.js";
import { waitingPanel } from "./panels/waiting.js";
import { RunModel } from "./run_model.js";

// Events that change what the run's own record says.
const REREAD = new Set(["waiting_for_input", "input_received", "run_finished", "run_retried", "cancel_requested", "subgraph_started", "state_changed"]);

const ENDED = ["completed", "failed", "cancelled"];

export function runPage(id) {
  document.title = id + " · Weft";
  const model = new RunModel();
  let run = null;
  let dirty = true;
  const changed = () => { dirty = true; };

  const act = (name, body) =>
    api(`/runs/${encodeURIComponent(id)}/${name}`, { method: "POST", body: JSON.stringify(body || {}) })
      .then((answer) => { run = answer; header.render(run); waiting.render(run); follow(); return answer; });

  const header = headerPanel(model, act);
  const waiting = waitingPanel(act);
  const graph = graphPanel(id, model, changed);
  const maps = mapsPanel(model);
  const loops = loopsPanel(model);
  const state = statePanel(model, id);
  const events = eventsPanel(model);

  main(header.header, waiting.root, header.errors,
    el("div", { class: "grid" },
      el("div", {}, graph.graph, graph.node, maps.root, loops.root, state.history, state.now),
      el("div", {}, events.root)));

  async function loadRun() {
    try {
      run = await api("/runs/" + encodeURIComponent(id));
    } catch (error) {
      if (error.status === 404) { stopEverything(); showFailure(error); }
      return;
    }
    header.render(run);
    waiting.render(run);
    state.renderNow(run);
    dirty = true;
  }

  function render() {
    if (!dirty) return;
    dirty = false;
    const started = performance.now();
    graph.render();
    maps.render();
    loops.render();
    state.renderWaves();
    events.render();
    if (run) header.tick(run);
    // What bench/viewer.py reads to measure how current the page is.
    const last = model.events[model.events.length - 1];
    window.weftViewer = {
      events: model.events.length,
      lastEventAt: last ? last.at_unix_ms : null,
      paintedAt: Date.now(),
      renderMs: performance.now() - started,
    };
  }

  let rereadDue = false;
  let following = null;

  // Reads the server-sent events at `url` (a path under the run's API)
  // into `onBlock`, one block at a time, until the stream ends or
  // `controller` aborts it.
  async function readEvents(url, controller, onBlock) {
    const response = await request(url, { headers: headers(), signal: controller.signal });
    if (!response.ok) throw new Error(`${url} could not be read (${response.status})`);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        onBlock(block);
      }
    }
  }

  // A block's event name and data.
  function parseBlock(block) {
    let kind = "message", data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("data:")) data += (data ? "\n" : "") + line.slice(5).replace(/^ /, "");
      else if (line.startsWith("event:")) kind = line.slice(6).trim();
    }
    return { kind, data };
  }

  async function follow() {
    if (following) return;
    const controller = new AbortController();
    following = controller;
    streams.add(controller);
    try {
      await readEvents(`/api/v1/runs/${encodeURIComponent(id)}/events?from=${model.lastSeq + 1}`, controller, received);
    } catch (error) {
      if (controller.signal.aborted) return;
    } finally {
      streams.delete(controller);
      if (following === controller) following = null;
    }
    // The stream ended: at the run's end, or the coordinator's. Follow
    // again unless the run is over.
    await loadRun();
    if (run && !ENDED.includes(run.status)) setTimeout(follow, 1000);
  }

  function received(block) {
    const { kind, data } = parseBlock(block);
    if (!data) return;
    const body = JSON.parse(data);
    if (kind === "error") { events.say(body.message); return; }
    model.apply(body);
    if (REREAD.has(body.type)) rereadDue = true;
    dirty = true;
  }

  // The run's model output as its steps write it (`/stream`), from the
  // offset after the last piece read; followed again while the run goes
  // on.
  let streaming = null;
  async function followStream() {
    if (streaming) return;
    const controller = new AbortController();
    streaming = controller;
    streams.add(controller);
    try {
      await readEvents(`/api/v1/runs/${encodeURIComponent(id)}/stream?from=${model.lastOffset + 1}`, controller, (block) => {
        const { kind, data } = parseBlock(block);
        if (!data || kind === "error") return;
        model.applyPiece(JSON.parse(data));
        dirty = true;
      });
    } catch (error) {
      if (controller.signal.aborted) return;
    } finally {
      streams.delete(controller);
      if (streaming === controller) streaming = null;
    }
    if (!run || !ENDED.includes(run.status)) setTimeout(followStream, 1000);
  }

  // Events are read once the diagram is in: it says which steps are a
  // map's or a loop's.
  Promise.all([loadRun(), graph.loaded]).then(() => { follow(); followStream(); });
  timers.add(setInterval(render, RENDER_EVERY_MS));
  timers.add(setInterval(() => { if (rereadDue) { rereadDue = false; loadRun(); } }, 1000));
}
