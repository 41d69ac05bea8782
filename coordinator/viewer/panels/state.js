// The state: after each wave (what changed, from what; the whole state
// read from the run's history on asking; "fork from here" for operators),
// the points the history keeps within waves (a map's finished items, a
// loop's iterations, a child run started: listed on asking, with the same
// tools), and now.

import { api, el, jsonValue, session } from "../common.js";
import { fieldHistory, pointNote } from "../run_model.js";

const WAVES_SHOWN = 50;

export function statePanel(model, id) {
  const waves = el("div", { id: "waves" });
  const state = el("div", { id: "state" });
  // What the reader opened, kept across redraws: each wave's whole state
  // (read once), and the fork forms with what was typed in them.
  const wholes = new Map();
  const forks = new Map();
  // The points within waves, once asked for: {loading}, {error} or
  // {points: [{at, status, at_unix_ms}]}.
  let within = null;
  const points = el("div", { id: "points" });

  function short(value) {
    const text = JSON.stringify(value);
    return text.length > 80 ? text.slice(0, 77) + "…" : text;
  }

  // The history's places: `step` is a wave's number or a point's text
  // (`3.57`).
  function place(step) {
    const text = String(step);
    if (!text.includes(".")) return `after wave ${text}`;
    return `at ${text} (within wave ${Number(text.split(".")[0]) + 1})`;
  }

  async function showPoints() {
    if (within && !within.loading) {
      within = null;
      renderWaves();
      return;
    }
    within = { loading: true };
    renderWaves();
    try {
      const history = await api(`/runs/${encodeURIComponent(id)}/history`);
      within = { points: history.waves.filter((wave) => wave.point > 0) };
    } catch (error) {
      within = { error: error.message };
    }
    renderWaves();
  }

  async function showWhole(step) {
    if (!wholes.has(step)) {
      wholes.set(step, { loading: true });
      renderWaves();
      try {
        const history = await api(`/runs/${encodeURIComponent(id)}/history?at=${step}`);
        wholes.set(step, { state: history.state });
      } catch (error) {
        wholes.set(step, { error: error.message });
      }
    } else {
      wholes.delete(step);
    }
    renderWaves();
  }

  async function fork(step, form) {
    let set;
    try {
      set = JSON.parse(form.text || "{}");
    } catch (error) {
      form.error = "the fields to set are not JSON: " + error.message;
      renderWaves();
      return;
    }
    if (set === null || typeof set !== "object" || Array.isArray(set)) {
      form.error = "give the fields to set as a JSON object: {\"field\": value}";
      renderWaves();
      return;
    }
    try {
      const forked = await api(`/runs/${encodeURIComponent(id)}/fork`, { method: "POST", body: JSON.stringify({ at: step, set }) });
      window.location.href = "/runs/" + encodeURIComponent(forked.run_id);
    } catch (error) {
      form.error = error.message;
      renderWaves();
    }
  }

  function waveTools(step) {
    const tools = [el("button", { class: "whole-state", text: wholes.has(step) ? "hide the state" : "whole state", onclick: () => showWhole(step) })];
    if (session.me && session.me.may_act) {
      tools.push(el("button", { class: "fork", text: "fork from here", onclick: () => {
        if (forks.has(step)) forks.delete(step); else forks.set(step, { text: "{}", error: "" });
        renderWaves();
      } }));
    }
    const shown = [];
    const whole = wholes.get(step);
    if (whole) {
      shown.push(el("div", { class: "wave-state", "data-step": step },
        whole.loading ? el("span", { class: "muted", text: "reading…" })
          : whole.error ? el("span", { class: "form-error", text: whole.error })
            : el("table", {}, el("tbody", {}, Object.entries(whole.state).map(([name, value]) =>
              el("tr", { "data-field": name }, el("td", { class: "mono", text: name }), el("td", {}, jsonValue(value))))))));
    }
    const form = forks.get(step);
    if (form) {
      const text = el("textarea", { class: "fork-set mono", rows: 3, placeholder: "{\"field\": value}" });
      text.value = form.text;
      text.addEventListener("input", () => { form.text = text.value; });
      shown.push(el("div", { class: "fork-form", "data-step": step },
        el("div", { class: "muted", text: `A new run from the state ${place(step)}, with these fields replaced:` }),
        text,
        el("button", { class: "primary fork-go", text: "Start the fork", onclick: () => fork(step, form) }),
        el("div", { class: "form-error", text: form.error })));
    }
    return [el("div", { class: "row wave-tools" }, tools), ...shown];
  }

  function renderWaves() {
    const history = fieldHistory(model.waves);
    const shown = history.slice(-WAVES_SHOWN).reverse();
    waves.replaceChildren(...(shown.length ? shown.map((wave) => el("div", { class: "change", "data-step": wave.step },
      el("div", {}, el("b", { text: `wave ${wave.step}` }), el("span", { class: "muted", text: ` (${wave.nodes.join(", ")})` })),
      wave.rows.map((row) => el("div", { class: "row" },
        el("span", { class: "field mono", text: row.field }),
        row.previous && row.previous.value !== undefined ? el("span", { class: "before mono", text: short(row.previous.value) }) : null,
        row.value.removed ? el("span", { class: "muted", text: "removed" })
          : row.value.folded !== undefined ? el("span", { class: "muted", text: `changed, ${row.value.folded.toLocaleString()} bytes (folded)` })
            : jsonValue(row.value.value))),
      waveTools(wave.step))) : [el("p", { class: "muted", text: "No wave has changed the state yet." })]));
    if (history.length > WAVES_SHOWN) waves.append(el("p", { class: "muted", text: `the last ${WAVES_SHOWN} of ${history.length} waves` }));
    renderPoints();
  }

  function renderPoints() {
    const ask = el("button", { class: "show-points", text: within && !within.loading ? "hide the points within waves" : "points within waves", onclick: showPoints });
    const shown = [];
    if (within && within.loading) shown.push(el("span", { class: "muted", text: "reading…" }));
    if (within && within.error) shown.push(el("span", { class: "form-error", text: within.error }));
    if (within && within.points) {
      const latest = within.points.slice(-WAVES_SHOWN).reverse();
      shown.push(latest.length ? latest.map((point) => el("div", { class: "change point", "data-step": point.at },
        el("div", {}, el("b", { text: point.at }),
          el("span", { class: "muted", text: ` within wave ${point.step + 1}, ${point.status}, ${new Date(point.at_unix_ms).toLocaleTimeString()}` })),
        el("div", { class: "point-note", text: pointNote(model.events, point.point) }),
        waveTools(point.at)))
        : el("p", { class: "muted", text: "The history keeps no point within a wave: each wave's work was kept only once it merged." }));
    }
    points.replaceChildren(el("div", { class: "row" }, ask), ...shown.flat());
  }

  // The state as the run's record says (read again when events change it).
  function renderNow(run) {
    if (!run || run.state === undefined) return;
    const fields = Object.entries(run.state);
    state.replaceChildren(fields.length ? el("table", {}, el("tbody", {}, fields.map(([name, value]) =>
      el("tr", { "data-field": name }, el("td", { class: "mono", text: name }), el("td", {}, jsonValue(value)))))) :
      el("p", { class: "muted", text: "empty" }));
  }

  const history = el("div", { class: "panel" }, el("h2", { text: "State after each wave" }), waves, points);
  const now = el("div", { class: "panel" }, el("h2", { text: "State now" }), state);
  return { history, now, renderWaves, renderNow };
}
