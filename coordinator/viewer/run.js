// The run viewer's page of one run (`/runs/ID`): RunModel builds what the
// page shows from the run's events; runPage draws it and acts. Uses
// common.js.
"use strict";

// ---- a run: what its events say ------------------------------------------

// Everything the page shows of a run, as its events build it up.
class RunModel {
  constructor() {
    this.nodes = new Map();     // id -> {status, attempts, error, child, answeredBy, resent}
    this.maps = new Map();      // map node -> {total, done, items: Map(index -> {status, step, error})}
    this.loops = new Map();     // loop node -> [{iteration, max, done, reason}]
    this.waves = [];            // [{step, nodes, at, changes}]
    this.events = [];
    this.failures = [];         // [{node, item, error, fallback, at}]
    this.lastSeq = -1;
    this.containers = new Map(); // step -> map or loop node (from the diagram)
  }

  node(id) {
    if (!this.nodes.has(id)) this.nodes.set(id, { status: "pending", attempts: 0 });
    return this.nodes.get(id);
  }

  map(id) {
    if (!this.maps.has(id)) this.maps.set(id, { total: null, done: 0, items: new Map() });
    return this.maps.get(id);
  }

  // The map whose item `item` of step `node` is, if the step is in one.
  itemOf(node, item) {
    if (item === null || item === undefined) return null;
    const container = this.containers.get(node);
    if (!container || !this.maps.has(container) && this.kind(container) !== "map") return null;
    const map = this.map(container);
    if (!map.items.has(item)) map.items.set(item, { status: "pending" });
    return map.items.get(item);
  }

  kind(id) { return this.kinds ? this.kinds.get(id) : undefined; }

  apply(event) {
    if (event.seq <= this.lastSeq) return;
    this.lastSeq = event.seq;
    this.events.push(event);
    const item = event.item === undefined ? null : event.item;
    switch (event.type) {
      case "wave_started":
        this.waves.push({ step: event.step, nodes: event.nodes, at: event.at_unix_ms, changes: null });
        for (const id of event.nodes) this.node(id).status = "running";
        break;
      case "node_started": {
        const entry = this.itemOf(event.node, item);
        const node = this.node(event.node);
        if (entry) { entry.status = "running"; entry.step = event.node; }
        node.status = "running";
        node.attempts = Math.max(node.attempts, event.attempt);
        break;
      }
      case "node_finished": {
        const entry = this.itemOf(event.node, item);
        const node = this.node(event.node);
        if (event.worker) node.worker = event.worker;
        if (entry) { entry.step = event.node; entry.worker = event.worker; }
        else node.status = "done";
        break;
      }
      case "node_retrying":
        this.node(event.node).error = event.error;
        break;
      case "task_redispatched": {
        // At-least-once made visible: the same attempt went out again.
        const node = this.node(event.node);
        node.resent = node.resent || [];
        node.resent.push(event.reason === "worker_lost"
          ? `attempt ${event.attempt} sent again: worker ${event.worker || "?"} was lost`
          : `attempt ${event.attempt} sent again: the coordinator that sent it stopped`);
        break;
      }
      case "node_failed": {
        this.failures.push(event);
        const entry = this.itemOf(event.node, item);
        if (entry && !event.fallback) { entry.status = "failed"; entry.error = event.error; }
        const node = this.node(event.node);
        node.error = event.error;
        if (!entry && !event.fallback) node.status = "failed";
        break;
      }
      case "node_skipped":
        this.node(event.node).status = "skipped";
        break;
      case "state_changed": {
        const wave = this.waves.find((w) => w.step === event.step) || this.waves[this.waves.length - 1];
        if (wave) wave.changes = event;
        break;
      }
      case "map_item_finished": {
        const map = this.map(event.node);
        map.total = event.total;
        map.done = event.done;
        const entry = map.items.get(event.index) || {};
        entry.status = "done";
        map.items.set(event.index, entry);
        if (event.done === event.total) {
          this.node(event.node).status = "done";
          for (const [step, container] of this.containers) if (container === event.node) this.node(step).status = "done";
        }
        break;
      }
      case "loop_iteration": {
        if (!this.loops.has(event.node)) this.loops.set(event.node, []);
        this.loops.get(event.node).push(event);
        break;
      }
      case "subgraph_started":
        this.node(event.node).child = event.run_id;
        break;
      case "waiting_for_input":
        this.node(event.node).status = "waiting";
        break;
      case "input_received": {
        const node = this.node(event.node);
        node.status = "done";
        node.answeredBy = event.by;
        break;
      }
      case "run_retried":
        for (const node of this.nodes.values()) if (node.status === "failed") node.status = "pending";
        for (const map of this.maps.values()) for (const entry of map.items.values()) if (entry.status === "failed") entry.status = "pending";
        break;
      case "run_finished":
        for (const node of this.nodes.values()) if (node.status === "running") node.status = event.status === "cancelled" ? "pending" : node.status;
        break;
      default:
        break;
    }
  }
}

// The last value each field had before each wave, for showing what changed.
function fieldHistory(waves) {
  const before = new Map();
  const out = [];
  for (const wave of waves) {
    if (!wave.changes) continue;
    const rows = wave.changes.fields.map((field) => {
      const values = wave.changes.values || {};
      const folded = wave.changes.folded || {};
      const row = { field, previous: before.get(field) };
      if (field in values) row.value = { value: values[field] };
      else if (field in folded) row.value = { folded: folded[field] };
      else row.value = { removed: true };
      before.set(field, row.value);
      return row;
    });
    out.push({ step: wave.step, nodes: wave.nodes, rows });
  }
  return out;
}

// ---- a run: the page ------------------------------------------------------

function runPage(id) {
  document.title = id + " · Weft";
  const model = new RunModel();
  let run = null;
  let selected = null;
  let dirty = true;
  let eventFilter = "";
  let eventType = "";
  const itemPages = new Map();

  const header = el("div", { class: "panel", id: "run-header" });
  const waiting = el("div", { id: "waiting" });
  const errors = el("div", { id: "errors" });
  const diagram = el("div", { id: "diagram" }, el("p", { class: "muted", text: "Drawing…" }));
  const detail = el("div", { id: "node-detail", class: "muted" }, "Click a node to see its attempts, items and errors.");
  const maps = el("div", { id: "maps" });
  const loops = el("div", { id: "loops" });
  const waves = el("div", { id: "waves" });
  const state = el("div", { id: "state" });
  const eventsBody = el("tbody");
  const eventsNote = el("span", { class: "muted", id: "events-note" });
  const filter = el("input", { id: "event-filter", placeholder: "filter: node, type or text" });
  const typeSelect = el("select", { id: "event-type" }, el("option", { value: "", text: "every type" }));
  filter.addEventListener("input", () => { eventFilter = filter.value.trim().toLowerCase(); renderEvents(); });
  typeSelect.addEventListener("change", () => { eventType = typeSelect.value; renderEvents(); });
  const legend = el("div", { class: "legend" },
    ["pending", "running", "waiting", "done", "failed", "skipped"].map((s) => el("span", {}, badge(s))));

  main(header, waiting, errors,
    el("div", { class: "grid" },
      el("div", {},
        el("div", { class: "panel" }, el("h2", { text: "Graph" }), legend, diagram),
        el("div", { class: "panel" }, el("h2", { text: "Node" }), detail),
        maps, loops,
        el("div", { class: "panel" }, el("h2", { text: "State after each wave" }), waves),
        el("div", { class: "panel" }, el("h2", { text: "State now" }), state)),
      el("div", {},
        el("div", { class: "panel" }, el("h2", { text: "Events" }),
          el("div", { class: "row" }, filter, typeSelect, eventsNote),
          el("div", { class: "events" }, el("table", { id: "events" }, eventsBody))))));

  // The diagram, once: nodes are coloured in place afterwards. Events are
  // read once it is in (it says which steps are a map's).
  const drawn = fetch(`/api/v1/runs/${encodeURIComponent(id)}/diagram.svg`, { headers: headers() })
    .then((response) => response.ok ? response.text() : Promise.reject(new Error("the diagram could not be drawn")))
    .then((svg) => {
      diagram.innerHTML = svg;
      model.kinds = new Map();
      for (const group of diagram.querySelectorAll("g.node")) {
        model.kinds.set(group.dataset.node, group.dataset.kind);
        for (const step of (group.dataset.steps || "").split(" ").filter(Boolean)) {
          if (!model.containers.has(step)) model.containers.set(step, group.dataset.node);
        }
        group.addEventListener("click", () => { selected = group.dataset.node; renderDetail(); paintDiagram(); });
      }
      dirty = true;
    })
    .catch((error) => diagram.replaceChildren(el("p", { class: "form-error", text: error.message })));

  async function loadRun() {
    try {
      run = await api("/runs/" + encodeURIComponent(id));
    } catch (error) {
      if (error.status === 404) { stopEverything(); showFailure(error); }
      return;
    }
    renderHeader();
    renderWaiting();
    renderState();
    dirty = true;
  }

  function act(name, body) {
    return api(`/runs/${encodeURIComponent(id)}/${name}`, { method: "POST", body: JSON.stringify(body || {}) })
      .then((answer) => { run = answer; renderHeader(); renderWaiting(); follow(); return answer; });
  }

  function renderHeader() {
    const terminal = ["completed", "failed", "cancelled"].includes(run.status);
    const actions = el("div", { class: "row" });
    const message = el("div", { class: "form-error", id: "action-error" });
    const guarded = (name) => () => act(name).catch((error) => { message.textContent = error.message; });
    if (me.may_act && !terminal) actions.append(el("button", { id: "cancel", class: "danger", text: "Cancel run", onclick: guarded("cancel") }));
    if (me.may_act && run.status === "failed") actions.append(el("button", { id: "retry", class: "primary", text: "Retry", onclick: guarded("retry") }));
    const trace = run.trace_id
      ? (run.trace_url ? el("a", { id: "trace", href: run.trace_url, target: "_blank", rel: "noopener", class: "mono", text: run.trace_id })
        : el("span", { id: "trace", class: "mono", text: run.trace_id }))
      : el("span", { class: "muted", text: "none" });
    const children = (run.children || []).map((c) => el("div", {}, `${c.node}: `,
      el("a", { class: "mono child-run", href: "/runs/" + encodeURIComponent(c.run_id), text: c.run_id })));
    header.replaceChildren(
      el("div", { class: "row" }, el("h1", { class: "mono", text: run.run_id }),
        el("span", { id: "run-status", class: "status " + run.status, text: run.status }), actions),
      el("dl", { class: "meta" },
        el("dt", { text: "graph" }), el("dd", { text: run.graph }),
        el("dt", { text: "namespace" }), el("dd", { text: run.namespace }),
        el("dt", { text: "submitted by" }), el("dd", { text: run.submitted_by || "—" }),
        el("dt", { text: "started" }), el("dd", { text: when(run.created_unix_ms) }),
        el("dt", { text: "duration" }), el("dd", { id: "duration", text: duration(run.created_unix_ms, run.ended_unix_ms) }),
        el("dt", { text: "events" }), el("dd", { id: "event-count", text: String(Math.max(run.event_count, model.events.length)) }),
        el("dt", { text: "trace" }), el("dd", {}, trace),
        children.length ? el("dt", { text: "child runs" }) : null, children.length ? el("dd", {}, children) : null,
        (run.answers || []).length ? el("dt", { text: "answered" }) : null,
        (run.answers || []).length ? el("dd", { id: "answers" }, run.answers.map((a) =>
          el("div", { text: `${a.node}: ${a.approved === true ? "approved" : a.approved === false ? "rejected" : "answered"} by ${a.by}` }))) : null),
      message);
    if (run.error) {
      errors.replaceChildren(el("div", { class: "panel" }, el("h2", { text: "Error" }),
        el("div", { class: "error-box", id: "run-error" },
          el("div", {}, el("b", { text: run.error.kind }), run.error.node ? ` at ${run.error.node}` : ""),
          el("pre", { text: run.error.message }))));
    } else {
      errors.replaceChildren();
    }
  }

  function renderWaiting() {
    const forms = (run.status === "waiting" ? run.waiting || [] : []).map((question) => {
      const comment = el("textarea", { class: "comment", placeholder: "comment (optional)" });
      const message = el("div", { class: "form-error" });
      const send = (value) => {
        for (const button of form.querySelectorAll("button")) button.disabled = !me.may_act;
        message.textContent = "";
        act("resume", { node: question.node, value, comment: comment.value })
          .catch((error) => {
            message.textContent = error.message;
            for (const button of form.querySelectorAll("button")) button.disabled = false;
          });
      };
      const controls = [];
      if (question.kind === "approval") {
        controls.push(el("button", { class: "primary approve", text: "Approve", onclick: () => send("approve") }),
          el("button", { class: "danger reject", text: "Reject", onclick: () => send("reject") }));
      } else {
        const value = el("textarea", { class: "value", placeholder: "answer (JSON, or plain text)" });
        controls.push(value, el("button", {
          class: "primary answer", text: "Answer",
          onclick: () => {
            const text = value.value;
            let parsed;
            try { parsed = JSON.parse(text); } catch (_) { parsed = text; }
            send(parsed);
          },
        }));
      }
      const form = el("div", { class: "waiting-form", "data-node": question.node },
        el("div", { class: "prompt" }, `${question.node} (${question.kind}): `, question.prompt),
        me.may_act ? [controls, comment, message]
          : el("p", { class: "muted", text: "Your role may look but not answer (operator answers)." }));
      return form;
    });
    waiting.replaceChildren(...(forms.length ? [el("div", { class: "panel" }, el("h2", { text: "Waiting for a person" }), forms)] : []));
  }

  function renderState() {
    if (!run || run.state === undefined) return;
    const fields = Object.entries(run.state);
    state.replaceChildren(fields.length ? el("table", {}, el("tbody", {}, fields.map(([name, value]) =>
      el("tr", { "data-field": name }, el("td", { class: "mono", text: name }), el("td", {}, jsonValue(value)))))) :
      el("p", { class: "muted", text: "empty" }));
  }

  function paintDiagram() {
    for (const group of diagram.querySelectorAll("g.node")) {
      const node = model.nodes.get(group.dataset.node);
      const status = node ? node.status : "pending";
      group.setAttribute("class", group.getAttribute("class").replace(/ status-\w+| selected/g, "") +
        " status-" + status + (selected === group.dataset.node ? " selected" : ""));
      group.dataset.status = status;
      const title = group.querySelector("title");
      if (title) title.textContent = `${group.dataset.node} (${group.dataset.kind}): ${status}` +
        (node && node.attempts ? `, attempt ${node.attempts}` : "") + (node && node.worker ? ` on ${node.worker}` : "");
    }
  }

  function renderDetail() {
    if (!selected) return;
    const node = model.nodes.get(selected) || { status: "pending", attempts: 0 };
    const kind = model.kind(selected) || "";
    const rows = [el("div", { class: "row" }, el("b", { class: "mono", text: selected }), el("span", { class: "muted", text: kind }), badge(node.status))];
    if (model.containers.get(selected)) rows.push(el("div", { class: "muted", text: `a step of ${model.containers.get(selected)}` }));
    rows.push(el("div", { text: `attempts: ${node.attempts || 0}` }));
    if (node.worker) rows.push(el("div", { class: "worker", text: `worker: ${node.worker}` }));
    if (node.answeredBy) rows.push(el("div", { text: `answered by ${node.answeredBy}` }));
    for (const line of node.resent || []) rows.push(el("div", { class: "resent", text: line }));
    if (node.child) rows.push(el("div", {}, "child run: ", el("a", { class: "mono", href: "/runs/" + encodeURIComponent(node.child), text: node.child })));
    if (node.error) rows.push(el("div", { class: "error-box" }, el("pre", { text: node.error })));
    const iterations = model.loops.get(selected);
    if (iterations) rows.push(el("div", { text: `${iterations.length} iterations` }));
    detail.className = "";
    detail.replaceChildren(...rows);
  }

  function renderMaps() {
    const panels = [];
    for (const [name, map] of model.maps) {
      let running = 0, failed = 0;
      for (const entry of map.items.values()) {
        if (entry.status === "running") running++;
        else if (entry.status === "failed") failed++;
      }
      const total = map.total === null ? null : map.total;
      const share = (n) => total ? (100 * n / total) + "%" : "0%";
      const counts = `${map.done} done, ${running} running, ${failed} failed of ${total === null ? "?" : total}`;
      const page = itemPages.get(name) || { filter: "", page: 0 };
      const list = [...map.items.entries()]
        .filter(([, entry]) => !page.filter || entry.status === page.filter)
        .sort((a, b) => a[0] - b[0]);
      const pages = Math.max(1, Math.ceil(list.length / ITEMS_PER_PAGE));
      page.page = Math.min(page.page, pages - 1);
      const shown = list.slice(page.page * ITEMS_PER_PAGE, (page.page + 1) * ITEMS_PER_PAGE);
      const setPage = (change) => () => { page.page = Math.max(0, Math.min(pages - 1, page.page + change)); itemPages.set(name, page); renderMaps(); };
      const choose = el("select", { class: "item-filter", onchange: (e) => { page.filter = e.target.value; page.page = 0; itemPages.set(name, page); renderMaps(); } },
        ["", "running", "failed", "done"].map((s) => el("option", { value: s, selected: page.filter === s, text: s || "every item" })));
      panels.push(el("div", { class: "panel map", "data-node": name },
        el("h2", {}, "Map ", el("span", { class: "mono", text: name })),
        el("div", { class: "row" }, el("span", { class: "counts", text: counts }),
          el("div", { class: "bar" }, el("span", { class: "done", style: `width:${share(map.done)}` }),
            el("span", { class: "running", style: `width:${share(running)}` }),
            el("span", { class: "failed", style: `width:${share(failed)}` }))),
        el("div", { class: "row" }, choose, el("button", { class: "quiet", text: "‹", onclick: setPage(-1) }),
          el("span", { class: "muted", text: `page ${page.page + 1} of ${pages}` }), el("button", { class: "quiet", text: "›", onclick: setPage(1) })),
        el("table", { class: "item-list" }, el("tbody", {}, shown.map(([index, entry]) =>
          el("tr", { "data-item": index, "data-status": entry.status },
            el("td", { class: "mono", text: `${name}/${index}` }), el("td", {}, badge(entry.status)),
            el("td", { class: "mono", text: entry.step || "" }),
            el("td", { class: "mono worker", text: entry.worker || "" }),
            el("td", {}, entry.error ? el("pre", { text: entry.error }) : "")))))));
    }
    maps.replaceChildren(...panels);
  }

  function renderLoops() {
    const panels = [];
    for (const [name, iterations] of model.loops) {
      panels.push(el("div", { class: "panel loop", "data-node": name },
        el("h2", {}, "Loop ", el("span", { class: "mono", text: name })),
        el("table", {}, el("tbody", {}, iterations.map((it) => el("tr", {},
          el("td", { text: `${it.iteration} of ${it.max_iterations}` }),
          el("td", { text: it.done ? "until met: loop ends" : "goes on" }),
          el("td", { text: it.reason || "" })))))));
    }
    loops.replaceChildren(...panels);
  }

  function renderWaves() {
    const history = fieldHistory(model.waves);
    const shown = history.slice(-50).reverse();
    waves.replaceChildren(...(shown.length ? shown.map((wave) => el("div", { class: "change", "data-step": wave.step },
      el("div", {}, el("b", { text: `wave ${wave.step}` }), el("span", { class: "muted", text: ` (${wave.nodes.join(", ")})` })),
      wave.rows.map((row) => el("div", { class: "row" },
        el("span", { class: "field mono", text: row.field }),
        row.previous && row.previous.value !== undefined ? el("span", { class: "before mono", text: short(row.previous.value) }) : null,
        row.value.removed ? el("span", { class: "muted", text: "removed" })
          : row.value.folded !== undefined ? el("span", { class: "muted", text: `changed, ${row.value.folded.toLocaleString()} bytes (folded)` })
            : jsonValue(row.value.value))))) : [el("p", { class: "muted", text: "No wave has changed the state yet." })]));
    if (history.length > 50) waves.append(el("p", { class: "muted", text: `the last 50 of ${history.length} waves` }));
  }

  function short(value) {
    const text = JSON.stringify(value);
    return text.length > 80 ? text.slice(0, 77) + "…" : text;
  }

  // Each event's text, lowercased once, for the filter.
  const texts = new WeakMap();

  function matches(event) {
    if (eventType && event.type !== eventType) return false;
    if (!eventFilter) return true;
    let text = texts.get(event);
    if (text === undefined) {
      text = JSON.stringify(event).toLowerCase();
      texts.set(event, text);
    }
    return text.includes(eventFilter);
  }

  const knownTypes = new Set();
  let typesRead = 0;

  function renderEvents() {
    for (; typesRead < model.events.length; typesRead++) {
      const event = model.events[typesRead];
      if (!knownTypes.has(event.type)) {
        knownTypes.add(event.type);
        typeSelect.append(el("option", { value: event.type, text: event.type }));
      }
    }
    const chosen = [];
    for (let i = model.events.length - 1; i >= 0 && chosen.length < EVENTS_SHOWN; i--) {
      if (matches(model.events[i])) chosen.push(model.events[i]);
    }
    eventsBody.replaceChildren(...chosen.map((event) => {
      const rest = Object.assign({}, event);
      for (const key of ["seq", "at_unix_ms", "type"]) delete rest[key];
      return el("tr", { "data-seq": event.seq, "data-type": event.type },
        el("td", { class: "muted", text: String(event.seq) }),
        el("td", { class: "muted", text: new Date(event.at_unix_ms).toLocaleTimeString() }),
        el("td", { class: "type mono", text: event.type }),
        el("td", { class: "mono", text: summary(rest) }));
    }));
    eventsNote.textContent = `newest first · ${chosen.length} shown of ${model.events.length}`;
  }

  function summary(fields) {
    const text = Object.entries(fields).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(" ");
    return text.length > 300 ? text.slice(0, 297) + "…" : text;
  }

  function render() {
    if (!dirty) return;
    dirty = false;
    const started = performance.now();
    paintDiagram();
    renderDetail();
    renderMaps();
    renderLoops();
    renderWaves();
    renderEvents();
    if (run) {
      document.getElementById("duration").textContent = duration(run.created_unix_ms, run.ended_unix_ms);
      document.getElementById("event-count").textContent = String(Math.max(run.event_count, model.events.length));
    }
    // What bench/viewer.py reads to measure how current the page is.
    const last = model.events[model.events.length - 1];
    window.weftViewer = {
      events: model.events.length,
      lastEventAt: last ? last.at_unix_ms : null,
      paintedAt: Date.now(),
      renderMs: performance.now() - started,
    };
  }

  // Events that change what the run's own record says.
  const REREAD = new Set(["waiting_for_input", "input_received", "run_finished", "run_retried", "cancel_requested", "subgraph_started", "state_changed"]);
  let rereadDue = false;
  let following = null;

  async function follow() {
    if (following) return;
    const controller = new AbortController();
    following = controller;
    streams.add(controller);
    try {
      const response = await fetch(`/api/v1/runs/${encodeURIComponent(id)}/events?from=${model.lastSeq + 1}`,
        { headers: headers(), signal: controller.signal });
      if (!response.ok) throw new Error(`the events could not be read (${response.status})`);
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          received(block);
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
    } finally {
      streams.delete(controller);
      if (following === controller) following = null;
    }
    // The stream ended: at the run's end, or the coordinator's. Follow
    // again unless the run is over.
    await loadRun();
    if (run && !["completed", "failed", "cancelled"].includes(run.status)) setTimeout(follow, 1000);
  }

  function received(block) {
    let kind = "message", data = "";
    for (const line of block.split("\n")) {
      if (line.startsWith("data:")) data += (data ? "\n" : "") + line.slice(5).replace(/^ /, "");
      else if (line.startsWith("event:")) kind = line.slice(6).trim();
    }
    if (!data) return;
    const body = JSON.parse(data);
    if (kind === "error") { eventsNote.textContent = body.message; return; }
    model.apply(body);
    if (REREAD.has(body.type)) rereadDue = true;
    dirty = true;
  }

  Promise.all([loadRun(), drawn]).then(follow);
  timers.add(setInterval(render, RENDER_EVERY_MS));
  timers.add(setInterval(() => { if (rereadDue) { rereadDue = false; loadRun(); } }, 1000));
}
