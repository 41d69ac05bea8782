// The questions a waiting run asks (approval, input), answered in place by
// a caller whose role may.

import { el, session } from "../common.js";

// `act(name, body)` posts the answer and redraws.
export function waitingPanel(act) {
  const root = el("div", { id: "waiting" });

  function render(run) {
    const me = session.me;
    const forms = (run.status === "waiting" ? run.waiting || [] : []).map((question) => {
      const comment = el("textarea", { class: "comment", placeholder: "comment (optional)" });
      const message = el("div", { class: "form-error" });
      const send = (value) => {
        for (const button of form.querySelectorAll("button")) button.disabled = !me.may_act;
        message.textContent = "";
        act("resume", { node: question.node, value, comment: comment.value })
          .catch((error) => {
            message.textContent = error.message;
            for (const button of form.querySelectorAll("button")) button.disabled = false;
          });
      };
      const controls = [];
      if (question.kind === "approval") {
        controls.push(el("button", { class: "primary approve", text: "Approve", onclick: () => send("approve") }),
          el("button", { class: "danger reject", text: "Reject", onclick: () => send("reject") }));
      } else {
        const value = el("textarea", { class: "value", placeholder: "answer (JSON, or plain text)" });
        controls.push(value, el("button", {
          class: "primary answer", text: "Answer",
          onclick: () => {
            const text = value.value;
            let parsed;
            try { parsed = JSON.parse(text); } catch (_) { parsed = text; }
            send(parsed);
          },
        }));
      }
      const form = el("div", { class: "waiting-form", "data-node": question.node },
        el("div", { class: "prompt" }, `${question.node} (${question.kind}): `, question.prompt),
        me.may_act ? [controls, comment, message]
          : el("p", { class: "muted", text: "Your role may look but not answer (operator answers)." }));
      return form;
    });
    root.replaceChildren(...(forms.length ? [el("div", { class: "panel" }, el("h2", { text: "Waiting for a person" }), forms)] : []));
  }

  return { root, render };
}
