// acp-proxy inspector: what `acp-proxy ctl` did to the run on the page, as recorded — a log of
// actions (faults added, breakpoints, releases, drops, frames sent; arguments masked by the
// server) and a badge on each held frame's row with its fate ("held 2.100s, released as #14").
// Fetched beside the frames (/runs/ID/controls.json), not inside their pages: a page of frames
// counts frames, and an action is not one. Text only reaches the page through textContent.
"use strict";

FEATURES.push({ page: "conversation", async start() {
  await pageState.ready;
  const runs = pageState.runs || [];
  if (!runs.length) return;
  const section = document.getElementById("control-log");
  const body = document.querySelector("#control-actions tbody");
  const tbody = document.querySelector("#timeline tbody");
  const fates = new Map(); // "RUN:SEQ" -> fate of a held frame
  let seen = ""; // what the log shows, to redraw only on change
  const badge = () => {
    for (const tr of tbody.querySelectorAll("tr[data-frame]:not(.chunks)")) {
      const row = tr._row;
      const fate = row && fates.get(`${row.run_id}:${row.seq}`);
      if (!fate || (row.flags || []).includes(fate)) continue;
      patchFrame(row.id, { flags: [...(row.flags || []).filter((f) => !f.startsWith("held")), fate] });
    }
  };
  const link = (run, seq) => el("a", { href: `#frame=${run}:${seq}`, class: "mono", text: `#${seq}`,
    onclick: (event) => { event.preventDefault(); selectFrame(`${run}:${seq}`, true); } });
  const refresh = async () => {
    const rows = [];
    for (const run of runs) {
      const data = await api(`/runs/${run.id}/controls.json`);
      if (!data.ok) continue;
      for (const [seq, fate] of Object.entries(data.held)) fates.set(`${run.id}:${seq}`, fate);
      for (const c of data.controls) rows.push({ ...c, run_id: run.id });
    }
    const key = JSON.stringify(rows);
    if (key !== seen) {
      seen = key;
      body.replaceChildren(...rows.map((c) => el("tr", { dataset: { control: `${c.run_id}:${c.number}`, action: c.action } },
        el("td", { class: "mono", text: runs.length > 1 ? `${c.run_id}:c${c.number}` : `c${c.number}` }),
        el("td", { class: "mono", text: clock(c.ts_ns / 1e6) }),
        el("td", { text: c.text.replace(/^acp-proxy ctl /, "") }),
        el("td", {}, ...(c.seq != null ? [link(c.run_id, c.seq)] : []),
          ...(c.result_seq != null ? [" → ", link(c.run_id, c.result_seq)] : [])))));
      section.classList.toggle("hidden", !rows.length);
    }
    badge();
    document.body.dataset.controls = String(rows.length);
  };
  new MutationObserver(() => badge()).observe(tbody, { childList: true });
  await refresh();
  // A live run's actions are recorded as they are made: follow them while the page follows.
  if (!runs.some((r) => r.status === "running")) return;
  let busy = false;
  setInterval(async () => {
    if (busy || !document.getElementById("follow").checked) return;
    busy = true;
    try { await refresh(); } finally { busy = false; }
  }, 1000);
} });
