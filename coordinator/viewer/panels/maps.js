// Each map's items: counts, a bar, and a page of items filtered by status.

import { ITEMS_PER_PAGE, badge, el } from "../common.js";

export function mapsPanel(model) {
  const root = el("div", { id: "maps" });
  const itemPages = new Map();

  function render() {
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
      const setPage = (change) => () => { page.page = Math.max(0, Math.min(pages - 1, page.page + change)); itemPages.set(name, page); render(); };
      const choose = el("select", { class: "item-filter", onchange: (e) => { page.filter = e.target.value; page.page = 0; itemPages.set(name, page); render(); } },
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
          el("tr", { "data-item": index, "data-status": entry.status, "data-throttled": entry.throttled && entry.status === "running" ? entry.throttled.limit : null },
            el("td", { class: "mono", text: `${name}/${index}` }),
            el("td", {}, badge(entry.throttled && entry.status === "running" ? "throttled" : entry.status)),
            el("td", { class: "mono", text: entry.step || "" }),
            el("td", { class: "mono worker", text: entry.worker || "" }),
            el("td", {}, entry.error ? el("pre", { text: entry.error }) : "")))))));
    }
    root.replaceChildren(...panels);
  }

  return { root, render };
}
