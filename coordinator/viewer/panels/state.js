// The state: after each wave (what changed, from what), and now.

import { el, jsonValue } from "../common.js";
import { fieldHistory } from "../run_model.js";

const WAVES_SHOWN = 50;

export function statePanel(model) {
  const waves = el("div", { id: "waves" });
  const state = el("div", { id: "state" });

  function short(value) {
    const text = JSON.stringify(value);
    return text.length > 80 ? text.slice(0, 77) + "…" : text;
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
            : jsonValue(row.value.value))))) : [el("p", { class: "muted", text: "No wave has changed the state yet." })]));
    if (history.length > WAVES_SHOWN) waves.append(el("p", { class: "muted", text: `the last ${WAVES_SHOWN} of ${history.length} waves` }));
  }

  // The state as the run's record says (read again when events change it).
  function renderNow(run) {
    if (!run || run.state === undefined) return;
    const fields = Object.entries(run.state);
    state.replaceChildren(fields.length ? el("table", {}, el("tbody", {}, fields.map(([name, value]) =>
      el("tr", { "data-field": name }, el("td", { class: "mono", text: name }), el("td", {}, jsonValue(value)))))) :
      el("p", { class: "muted", text: "empty" }));
  }

  const history = el("div", { class: "panel" }, el("h2", { text: "State after each wave" }), waves);
  const now = el("div", { class: "panel" }, el("h2", { text: "State now" }), state);
  return { history, now, renderWaves, renderNow };
}
