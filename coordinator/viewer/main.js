// The run viewer's entry point: one page for `/` (the runs) and `/runs/ID`
// (a run), reading everything from the coordinator's JSON API
// (`/api/v1/`): who is looking, then the page the address names.

import { TOKEN_KEY, api, session, showFailure, token } from "./common.js";
import { runPage } from "./run.js";
import { listPage } from "./runs.js";

async function boot() {
  document.getElementById("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(TOKEN_KEY);
    location.reload();
  });
  try {
    session.me = await api("/whoami");
  } catch (error) {
    if (error.status !== 401) showFailure(error);
    return;
  }
  const me = session.me;
  const who = document.getElementById("who");
  who.textContent = me.identities_required ? `${me.name} (${me.role}, ${me.namespace})` : "";
  document.getElementById("sign-out").hidden = !token();
  const match = location.pathname.match(/^\/runs\/([^/]+)$/);
  if (match) runPage(decodeURIComponent(match[1]));
  else listPage();
}

// A module runs once the document is parsed.
boot();
