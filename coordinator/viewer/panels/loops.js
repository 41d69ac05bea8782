// Each loop node's iterations, with what its `until` said.

import { el } from "../common.js";

export function loopsPanel(model) {
  const root = el("div", { id: "loops" });

  function render() {
    const panels = [];
    for (const [name, iterations] of model.loops) {
      panels.push(el("div", { class: "panel loop", "data-node": name },
        el("h2", {}, "Loop ", el("span", { class: "mono", text: name })),
        el("table", {}, el("tbody", {}, iterations.map((it) => el("tr", {},
          el("td", { text: `${it.iteration} of ${it.max_iterations}` }),
          el("td", { text: it.done ? "until met: loop ends" : "goes on" }),
          el("td", { text: it.reason || "" })))))));
    }
    root.replaceChildren(...panels);
  }

  return { root, render };
}
