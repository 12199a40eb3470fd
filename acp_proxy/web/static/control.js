// acp-proxy inspector: live control of a run started with `run --control` — release or drop a
// held frame, set and clear breakpoints, add and clear fault rules — each a POST (with the CSRF
// tokens) that the server passes to the run's control socket. Held frames come back masked.
// Text only ever reaches the page through textContent.
"use strict";

FEATURES.push({ page: "conversation", async start() {
  await pageState.ready;
  const runs = pageState.runs || [];
  const run = runs.length === 1 ? runs[0] : null;
  if (!run || !run.options || !run.options.control || run.status !== "running") return;
  const section = document.getElementById("control");
  const error = document.getElementById("control-error");
  section.classList.remove("hidden");
  // A person's request says how it went until the next one; the panel's own polls only say
  // when they fail. One request at a time: the run's socket serves one controller at a time,
  // and a poll racing a click would find it busy.
  let queue = Promise.resolve();
  const askNow = async (request, polled) => {
    const data = await postJSON(`/runs/${run.id}/control`, request);
    if (!polled || !data.ok) {
      error.classList.toggle("hidden", data.ok);
      error.textContent = data.ok ? "" : data.error;
    }
    if (!data.ok && /has ended|is gone|nothing to control/.test(data.error || "")) stop();
    return data.ok ? data.answer : null;
  };
  const ask = (request, polled) => {
    const answer = queue.then(() => askNow(request, polled));
    queue = answer.catch(() => null);
    return answer;
  };
  const heldBody = document.querySelector("#held tbody");
  const faultsBody = document.querySelector("#faults tbody");
  const refresh = async () => {
    const held = await ask({ op: "held" }, true);
    if (held) {
      // A frame held a moment ago may not be in the database yet: without its seq, it waits.
      heldBody.replaceChildren(...held.map((h) => el("tr", { dataset: { held: h.seq ?? "" } },
        el("td", { class: "mono", text: h.seq ?? "…" }),
        laneCell(h.dir),
        el("td", { text: h.method || h.kind || "" }),
        el("td", { text: `${h.held_s.toFixed(1)} s` }),
        el("td", { class: "preview", text: short(h.frame, 160), title: h.frame }),
        el("td", {},
          el("button", { type: "button", class: "release", text: "Release", disabled: h.seq == null, onclick: async () => { await ask({ op: "release", seq: h.seq }); refresh(); } }), " ",
          el("button", { type: "button", class: "drop", text: "Drop", disabled: h.seq == null, onclick: async () => { await ask({ op: "drop", seq: h.seq }); refresh(); } })))));
    }
    const faults = await ask({ op: "fault-list" }, true);
    if (faults) {
      faultsBody.replaceChildren(...faults.map((f) => el("tr", { dataset: { rule: f.id } },
        el("td", { class: "mono", text: f.id }),
        el("td", { class: "mono", text: f.rule || JSON.stringify(f) }),
        el("td", {}, el("button", { type: "button", text: "Remove", onclick: async () => { await ask({ op: "fault-remove", id: f.id }); refresh(); } })))));
    }
    const breaks = await ask({ op: "breaks" }, true);
    if (breaks) document.getElementById("breaks").textContent = breaks.length ? "breakpoints: " + breaks.map((b) => b.filter).join(" · ") : "no breakpoint";
    document.body.dataset.control = "ready";
  };
  document.getElementById("break-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = document.getElementById("break-filter");
    if (input.value.trim() && await ask({ op: "break", filter: input.value.trim() })) input.value = "";
    refresh();
  });
  document.getElementById("breaks-clear").addEventListener("click", async () => { await ask({ op: "clear" }); refresh(); });
  document.getElementById("fault-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const input = document.getElementById("fault-rule");
    if (input.value.trim() && await ask({ op: "fault-add", rule: input.value.trim() })) input.value = "";
    refresh();
  });
  document.getElementById("faults-clear").addEventListener("click", async () => { await ask({ op: "fault-clear" }); refresh(); });
  // Once a second, not at the page's poll rate: the run has one control socket, and a person's
  // `acp-proxy ctl` should rarely find it busy with the page.
  let busy = false;
  const timer = setInterval(async () => {
    if (busy || !document.getElementById("follow").checked) return;
    busy = true;
    try { await refresh(); } finally { busy = false; }
  }, 1000);
  // The run has ended: nothing is held any more, so no stale row stays behind the hidden panel.
  const stop = () => { clearInterval(timer); heldBody.replaceChildren(); faultsBody.replaceChildren(); section.classList.add("hidden"); };
  refresh();
} });
