// The run viewer's loader, a classic script: it imports the page's
// modules (main.js and what it imports) and, when one of them cannot be
// fetched, loads the page again. A browser abandons the requests in flight
// when the machine's network changes (an interface or address added or
// removed: a VPN, a Wi-Fi switch, a container started), and a module
// graph missing one file never runs; without this the page would say
// "Loading…" until reloaded by hand. A few quick failures in a row (the
// coordinator unreachable) end in a message instead of a reload loop.

(function () {
  const RELOADS_KEY = "weft-reloads";
  const MOST_RELOADS = 3;
  const RELOAD_AFTER_MS = 300;

  function failed(error) {
    let reloads = 0;
    try { reloads = Number(sessionStorage.getItem(RELOADS_KEY)) || 0; } catch (_) { reloads = MOST_RELOADS; }
    if (reloads < MOST_RELOADS) {
      sessionStorage.setItem(RELOADS_KEY, String(reloads + 1));
      setTimeout(() => location.reload(), RELOAD_AFTER_MS * (reloads + 1));
      return;
    }
    sessionStorage.removeItem(RELOADS_KEY);
    const box = document.createElement("div");
    box.className = "panel error-box";
    box.id = "failure";
    box.textContent = "The page's scripts could not be loaded (" + (error && error.message || error) +
      "): is the coordinator reachable? Reload the page to try again.";
    document.getElementById("main").replaceChildren(box);
  }

  import("/assets/main.js")
    .then(() => sessionStorage.removeItem(RELOADS_KEY))
    .catch(failed);
})();
