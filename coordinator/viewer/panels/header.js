// A run's header (id, status, the actions its caller may take, what is
// known of it) and its error, if it failed.

import { duration, el, session, when } from "../common.js";
import { usageText } from "../run_model.js";

// `act(name)` posts an action (cancel, retry) and redraws.
export function headerPanel(model, act) {
  const header = el("div", { class: "panel", id: "run-header" });
  const errors = el("div", { id: "errors" });

  function render(run) {
    const me = session.me;
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
        run.forked_from ? el("dt", { text: "forked from" }) : null,
        run.forked_from ? el("dd", { id: "forked-from" },
          el("a", { class: "mono", href: "/runs/" + encodeURIComponent(run.forked_from.run), text: run.forked_from.run }),
          run.forked_from.point ? ` at ${run.forked_from.at} (within wave ${run.forked_from.step + 1})` : ` after wave ${run.forked_from.step}`) : null,
        el("dt", { text: "started" }), el("dd", { text: when(run.created_unix_ms) }),
        el("dt", { text: "duration" }), el("dd", { id: "duration", text: duration(run.created_unix_ms, run.ended_unix_ms) }),
        el("dt", { text: "events" }), el("dd", { id: "event-count", text: String(Math.max(run.event_count, model.events.length)) }),
        el("dt", { text: "trace" }), el("dd", {}, trace),
        run.usage && run.usage.calls ? el("dt", { text: "model usage" }) : null,
        run.usage && run.usage.calls ? el("dd", { id: "usage", text: usageText(run.usage) }) : null,
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

  // The figures that change without the run being read again.
  function tick(run) {
    header.querySelector("#duration").textContent = duration(run.created_unix_ms, run.ended_unix_ms);
    header.querySelector("#event-count").textContent = String(Math.max(run.event_count, model.events.length));
  }

  return { header, errors, render, tick };
}
