// The run viewer's list of runs (`/`): newest first, filtered by status and
// graph, paged, refreshed every two seconds. In a group whose runs are split
// into partitions, a panel shows who leads each partition and the runs it
// holds, and each run its partition.

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
  const partitionHead = el("th", { text: "Partition", hidden: true });
  const headRow = el("tr", {}, el("th", { text: "Run" }), el("th", { text: "Status" }), el("th", { text: "Graph" }),
    el("th", { text: "Started" }), el("th", { text: "Duration" }), partitionHead,
    me.sees_all_namespaces ? el("th", { text: "Namespace" }) : null, el("th", { text: "Submitted by" }));
  const partitions = el("div", { class: "panel", id: "partitions", hidden: true });
  const note = el("p", { class: "muted", id: "runs-note" });
  const newer = el("button", { id: "newer", text: "Newest", onclick: () => apply() });
  const older = el("button", { id: "older", text: "Older" });
  main(el("h1", { text: "Runs" }),
    el("div", { class: "panel" },
      el("div", { class: "row" }, status, graph, graphs, el("span", { class: "muted", text: "newest first · updates live" })),
      el("table", { id: "runs-table" }, el("thead", {}, headRow), body), note,
      el("div", { class: "row pager" }, newer, older)),
    partitions);
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
    const partitioned = page.runs.some((run) => run.partition !== undefined);
    partitionHead.hidden = !partitioned;
    next = page.next;
    older.disabled = !next;
    newer.disabled = !query.get("after");
    body.replaceChildren(...page.runs.map((run) => {
      if (!seen.has(run.graph)) { seen.add(run.graph); graphs.append(el("option", { value: run.graph })); }
      return el("tr", { class: "run", "data-run": run.run_id, "data-status": run.status },
        el("td", {}, el("a", { href: "/runs/" + encodeURIComponent(run.run_id), class: "mono", text: run.run_id })),
        el("td", {}, badge(run.status)), el("td", { text: run.graph }), el("td", { text: when(run.created_unix_ms) }),
        el("td", { text: duration(run.created_unix_ms, run.ended_unix_ms) }),
        partitioned ? el("td", { class: "partition", text: run.partition }) : null,
        me.sees_all_namespaces ? el("td", { text: run.namespace }) : null, el("td", { text: run.submitted_by }));
    }));
    note.textContent = page.runs.length ? "" : "No runs match.";
    showGroup(partitions);
  }
  window.onpopstate = () => location.reload();
  refresh();
  timers.add(setInterval(refresh, LIST_REFRESH_MS));
}

// ---- the group's partitions ----------------------------------------------

// The panel of a partitioned group: each coordinator, the partitions it
// leads (with the runs each holds, to a caller who sees every namespace;
// "restoring" just after a take-over), and the partitions nobody leads at
// the moment. Hidden with one partition.
async function showGroup(panel) {
  let group;
  try {
    group = await api("/group");
  } catch (error) {
    return;
  }
  panel.hidden = group.partitions <= 1;
  if (panel.hidden) return;
  const led = group.members.reduce((n, m) => n + m.partitions.length, 0);
  const rows = group.members.map((member) => el("tr", { class: "member", "data-url": member.url },
    el("td", { class: "mono" }, member.url, member.this ? el("span", { class: "muted", text: " (this coordinator)" }) : null,
      member.answered ? null : el("span", { class: "muted", text: " (not answering: partitions by the group's view)" })),
    el("td", { class: "led", text: member.partitions.length }),
    el("td", {}, member.partitions.map((p) => el("span", {
      class: "chip partition" + (p.restoring ? " restoring" : ""), "data-partition": p.partition,
      title: p.restoring ? "its runs are being restored" : "",
      text: p.partition + (p.runs !== undefined ? " · " + p.runs + (p.runs === 1 ? " run" : " runs") : "")
        + (p.restoring ? " · restoring" : ""),
    })))));
  panel.replaceChildren(
    el("h2", { text: "Partitions" }),
    el("p", { class: "muted", id: "partitions-note", text: group.partitions + " partitions, " + led + " led by "
      + group.members.length + (group.members.length === 1 ? " coordinator" : " coordinators")
      + (group.unled.length ? "; not led at the moment: " + group.unled.join(", ") : "")
      + (group.runs_counted ? "" : "; run counts are shown to admins") }),
    el("table", { id: "partitions-table" },
      el("thead", {}, el("tr", {}, el("th", { text: "Coordinator" }), el("th", { text: "Leads" }), el("th", { text: "Partitions" }))),
      el("tbody", {}, rows)));
}
