// The run's events, newest first, filtered by text and type.

import { EVENTS_SHOWN, el } from "../common.js";

export function eventsPanel(model) {
  const body = el("tbody");
  const note = el("span", { class: "muted", id: "events-note" });
  const filter = el("input", { id: "event-filter", placeholder: "filter: node, type or text" });
  const typeSelect = el("select", { id: "event-type" }, el("option", { value: "", text: "every type" }));
  let wanted = "";
  let wantedType = "";
  filter.addEventListener("input", () => { wanted = filter.value.trim().toLowerCase(); render(); });
  typeSelect.addEventListener("change", () => { wantedType = typeSelect.value; render(); });

  // Each event's text, lowercased once, for the filter.
  const texts = new WeakMap();

  function matches(event) {
    if (wantedType && event.type !== wantedType) return false;
    if (!wanted) return true;
    let text = texts.get(event);
    if (text === undefined) {
      text = JSON.stringify(event).toLowerCase();
      texts.set(event, text);
    }
    return text.includes(wanted);
  }

  const knownTypes = new Set();
  let typesRead = 0;

  function summary(fields) {
    const text = Object.entries(fields).map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`).join(" ");
    return text.length > 300 ? text.slice(0, 297) + "…" : text;
  }

  function render() {
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
    body.replaceChildren(...chosen.map((event) => {
      const rest = Object.assign({}, event);
      for (const key of ["seq", "at_unix_ms", "type"]) delete rest[key];
      return el("tr", { "data-seq": event.seq, "data-type": event.type },
        el("td", { class: "muted", text: String(event.seq) }),
        el("td", { class: "muted", text: new Date(event.at_unix_ms).toLocaleTimeString() }),
        el("td", { class: "type mono", text: event.type }),
        el("td", { class: "mono", text: summary(rest) }));
    }));
    note.textContent = `newest first · ${chosen.length} shown of ${model.events.length}`;
  }

  // Says why the stream of events stopped.
  function say(message) { note.textContent = message; }

  const root = el("div", { class: "panel" }, el("h2", { text: "Events" }),
    el("div", { class: "row" }, filter, typeSelect, note),
    el("div", { class: "events" }, el("table", { id: "events" }, body)));
  return { root, render, say };
}
