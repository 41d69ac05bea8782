// The run viewer's list of runs (`/`): newest first, filtered by status and
// graph, paged, refreshed every two seconds.

import { LIST_REFRESH_MS, api, badge, duration, el, main, session, timers, when } from "./common.js";

// ---- the runs -----------------------------------------------------------

const STATUSES = ["running", "waiting", "completed", "failed", "cancelled"];

export function listPage() {
  document.title = "Runs · Weft";
  const me = session.me;
  const params = new URLSearchParams(location.search);
  const status = el("select", { id: "filter-status" },
    el("option", { value: "", text: "any status" }),
    STATUSES.map((s) => el("option", { value: s, selected: params.get("status") === s, text: s })));
  const graph = el("input", { id: "filter-graph", placeholder: "graph", value: params.get("graph") || "", list: "graphs" });
  const graphs = el("datalist", { id: "graphs" });
  const apply = (after) => {
    const next = new URLSearchParams();
    if (status.value) next.set("status", status.value);
    if (graph.value.trim()) next.set("graph", graph.value.trim());
    if (after) next.set("after", after);
    history.pushState(null, "", "/" + (next.toString() ? "?" + next : ""));
    refresh();
  };
  status.addEventListener("change", () => apply());
  graph.addEventListener("change", () => apply());
  const body = el("tbody");
  const headRow = el("tr", {}, el("th", { text: "Run" }), el("th", { text: "Status" }), el("th", { text: "Graph" }),
    el("th", { text: "Started" }), el("th", { text: "Duration" }),
    me.sees_all_namespaces ? el("th", { text: "Namespace" }) : null, el("th", { text: "Submitted by" }));
  const note = el("p", { class: "muted", id: "runs-note" });
  const newer = el("button", { id: "newer", text: "Newest", onclick: () => apply() });
  const older = el("button", { id: "older", text: "Older" });
  main(el("h1", { text: "Runs" }),
    el("div", { class: "panel" },
      el("div", { class: "row" }, status, graph, graphs, el("span", { class: "muted", text: "newest first · updates live" })),
      el("table", { id: "runs-table" }, el("thead", {}, headRow), body), note,
      el("div", { class: "row pager" }, newer, older)));
  const seen = new Set();
  let next = null;
  older.addEventListener("click", () => { if (next) apply(next); });
  async function refresh() {
    const query = new URLSearchParams(location.search);
    query.set("limit", "50");
    let page;
    try {
      page = await api("/runs?" + query);
    } catch (error) {
      note.textContent = error.message;
      return;
    }
    next = page.next;
    older.disabled = !next;
    newer.disabled = !query.get("after");
    body.replaceChildren(...page.runs.map((run) => {
      if (!seen.has(run.graph)) { seen.add(run.graph); graphs.append(el("option", { value: run.graph })); }
      return el("tr", { class: "run", "data-run": run.run_id, "data-status": run.status },
        el("td", {}, el("a", { href: "/runs/" + encodeURIComponent(run.run_id), class: "mono", text: run.run_id })),
        el("td", {}, badge(run.status)), el("td", { text: run.graph }), el("td", { text: when(run.created_unix_ms) }),
        el("td", { text: duration(run.created_unix_ms, run.ended_unix_ms) }),
        me.sees_all_namespaces ? el("td", { text: run.namespace }) : null, el("td", { text: run.submitted_by }));
    }));
    note.textContent = page.runs.length ? "" : "No runs match.";
  }
  window.onpopstate = () => location.reload();
  refresh();
  timers.add(setInterval(refresh, LIST_REFRESH_MS));
}
