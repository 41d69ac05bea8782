// The graph's diagram, coloured by each node's status, and the panel of
// the node clicked in it (attempts, worker, errors, what was sent again,
// a rag node's retrievals).

import { badge, el, headers, request } from "../common.js";
import { usageText } from "../run_model.js";

// Draws run `id`'s diagram once; `loaded` resolves when it is in (it says
// which steps are a map's or a loop's, which the model needs first).
export function graphPanel(id, model, changed) {
  const diagram = el("div", { id: "diagram" }, el("p", { class: "muted", text: "Drawing…" }));
  const detail = el("div", { id: "node-detail", class: "muted" }, "Click a node to see its attempts, items and errors.");
  const legend = el("div", { class: "legend" },
    ["pending", "running", "throttled", "waiting", "done", "cached", "failed", "spent", "skipped"].map((s) => el("span", {}, badge(s))));
  let selected = null;

  const loaded = request(`/api/v1/runs/${encodeURIComponent(id)}/diagram.svg`, { headers: headers() })
    .then((response) => response.ok ? response.text() : Promise.reject(new Error("the diagram could not be drawn")))
    .then((svg) => {
      diagram.innerHTML = svg;
      model.kinds = new Map();
      for (const group of diagram.querySelectorAll("g.node")) {
        model.kinds.set(group.dataset.node, group.dataset.kind);
        for (const step of (group.dataset.steps || "").split(" ").filter(Boolean)) {
          if (!model.containers.has(step)) model.containers.set(step, group.dataset.node);
        }
        group.addEventListener("click", () => { selected = group.dataset.node; renderDetail(); paint(); });
      }
      changed();
    })
    .catch((error) => diagram.replaceChildren(el("p", { class: "form-error", text: error.message })));

  function paint() {
    for (const group of diagram.querySelectorAll("g.node")) {
      const node = model.view(group.dataset.node);
      // Marks over the status: held by a limit while it runs (itself, or a
      // step of its map or loop), or the one that would have spent past
      // the run's budget.
      const steps = (group.dataset.steps || "").split(" ").filter(Boolean).map((s) => model.view(s));
      const holder = [node, ...steps].find((n) => n.throttled);
      const throttled = holder && node.status === "running" ? holder.throttled : null;
      const spent = [node, ...steps].some((n) => n.spent);
      // Answered from the node cache, itself or a step of its map.
      const cached = node.status === "done" && [node, ...steps].some((n) => n.hits);
      const mark = spent ? " spent" : throttled ? " throttled" : cached ? " cached" : "";
      group.setAttribute("class", group.getAttribute("class").replace(/ status-\w+| selected| throttled| spent| cached/g, "") +
        " status-" + node.status + mark + (selected === group.dataset.node ? " selected" : ""));
      group.dataset.status = node.status;
      if (throttled) group.dataset.throttled = throttled.limit; else delete group.dataset.throttled;
      const title = group.querySelector("title");
      if (title) title.textContent = `${group.dataset.node} (${group.dataset.kind}): ${node.status}` +
        (node.attempts ? `, attempt ${node.attempts}` : "") + (node.worker ? ` on ${node.worker}` : "") +
        (throttled ? `, waiting for ${throttled.limit}` : "") + (spent ? ", the run's budget is spent" : "") +
        (cached ? ", answered from the cache" : "");
    }
  }

  function renderDetail() {
    if (!selected) return;
    const node = model.view(selected);
    const kind = model.kind(selected) || "";
    const rows = [el("div", { class: "row" }, el("b", { class: "mono", text: selected }), el("span", { class: "muted", text: kind }), badge(node.status))];
    if (model.containers.get(selected)) rows.push(el("div", { class: "muted", text: `a step of ${model.containers.get(selected)}` }));
    rows.push(el("div", { text: `attempts: ${node.attempts || 0}` }));
    if (node.worker) rows.push(el("div", { class: "worker", text: `worker: ${node.worker}` }));
    if (node.answeredBy) rows.push(el("div", { text: `answered by ${node.answeredBy}` }));
    // A map's or loop's steps waiting for a limit, over its items.
    const steps = [...model.containers].filter(([, container]) => container === selected).map(([step]) => model.view(step));
    const waiting = steps.reduce((sum, step) => sum + (step.held ? step.held.size : 0), 0);
    if (waiting && node.status === "running") {
      const limit = steps.find((step) => step.throttled).throttled.limit;
      rows.push(el("div", { class: "throttled-note", text: `throttled: ${waiting} step${waiting === 1 ? "" : "s"} waiting for ${limit}` }));
    }
    if (node.throttled && node.status === "running") {
      const wait = node.throttled.wait_ms === undefined || node.throttled.wait_ms === null
        ? "until a step under it ends" : `about ${node.throttled.wait_ms} ms`;
      rows.push(el("div", { class: "throttled-note", text: `throttled: waiting for ${node.throttled.limit} (${wait})` }));
    } else if (node.throttles) {
      rows.push(el("div", { class: "muted", text: `waited for a limit ${node.throttles} time${node.throttles === 1 ? "" : "s"}` }));
    }
    if (node.cached) {
      const last = node.cached;
      const where = last.item === null || last.item === undefined ? "" : ` (item ${last.item})`;
      const steps = node.hits > 1 ? ` · ${node.hits} steps answered so` : "";
      rows.push(el("div", { class: "cached-note" },
        `answered from the cache${where}: kept ${ago(last.age_ms)} by run `,
        el("a", { class: "mono", href: "/runs/" + encodeURIComponent(last.stored_by), text: last.stored_by }), steps));
    }
    if (node.notCached) rows.push(el("div", { class: "muted", text: `not cached: ${node.notCached}` }));
    if (node.output) {
      const out = node.output;
      const where = (out.item === null ? "" : ` item ${out.item}`) + (out.attempt > 1 ? ` attempt ${out.attempt}` : "");
      const says = { writing: "writing…", done: "written", abandoned: "abandoned: the attempt failed", truncated: "too long: the rest is not kept" }[out.state];
      rows.push(el("div", { class: "model-output", "data-state": out.state },
        el("div", { class: "muted", text: `model output${where} · ${says}` }),
        ...out.tools.map((line) => el("div", { class: "mono tool-line", text: line })),
        el("pre", { text: out.text })));
    }
    if (node.usage) rows.push(el("div", { class: "usage", text: `model usage: ${usageText(node.usage)}` }));
    if (node.spent) rows.push(el("div", { class: "spent-note", text: "spent: its next model call would have crossed the run's budget" }));
    for (const line of node.resent || []) rows.push(el("div", { class: "resent", text: line }));
    if (node.child) rows.push(el("div", {}, "child run: ", el("a", { class: "mono", href: "/runs/" + encodeURIComponent(node.child), text: node.child })));
    if (node.retrieved) rows.push(retrieval(node));
    if (node.error) rows.push(el("div", { class: "error-box" }, el("pre", { text: node.error })));
    const iterations = model.loops.get(selected);
    if (iterations) rows.push(el("div", { text: `${iterations.length} iterations` }));
    detail.className = "";
    detail.replaceChildren(...rows);
  }

  // How long ago, from milliseconds: "4 s ago", "3 min ago", "2 h ago".
  function ago(ms) {
    const s = Math.round((ms || 0) / 1000);
    if (s < 120) return `${s} s ago`;
    if (s < 7200) return `${Math.round(s / 60)} min ago`;
    return `${Math.round(s / 3600)} h ago`;
  }

  // A rag node's last retrieval: its mode, time and passages (source §
  // heading, score), how many it made, and the index it built.
  function retrieval(node) {
    const last = node.retrieved;
    const where = last.item === undefined || last.item === null ? "" : ` (item ${last.item})`;
    const head = `retrieved${where}: ${last.mode} over ${(last.knowledge || []).join(", ")}, ${last.latency_ms} ms` +
      (node.retrievals > 1 ? ` · ${node.retrievals} retrievals` : "");
    const hits = (last.hits || []).map((hit, i) => el("li", { class: "mono",
      text: `[${i + 1}] ${hit.source}${hit.heading ? " § " + hit.heading : ""} (${Number(hit.score).toFixed(3)})` }));
    const rows = [el("div", { text: head }), el("ul", { class: "hits" }, hits)];
    const built = node.indexBuilt;
    if (built) rows.push(el("div", { class: "muted", text:
      `index built: ${built.knowledge}, ${built.chunks} chunks from ${built.files} files, ${built.index_bytes} bytes, ${built.embedding_calls} embedding calls` +
      `${built.vector_search ? `, ${built.vector_search} vector search` : ""}, ${built.latency_ms} ms` }));
    return el("div", { class: "retrieval" }, rows);
  }

  const graph = el("div", { class: "panel" }, el("h2", { text: "Graph" }), legend, diagram);
  const node = el("div", { class: "panel" }, el("h2", { text: "Node" }), detail);
  return { graph, node, loaded, render() { paint(); renderDetail(); } };
}
