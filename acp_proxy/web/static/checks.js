// acp-proxy inspector: schema and lifecycle marks on the frames in view, for any run — computed
// by the server from the recording (/runs/ID/checks.json, the check's own checker, kept per run
// and advanced a budget at a time), asked for the rows the page shows as they are drawn.
"use strict";

FEATURES.push({ page: "conversation", async start() {
  await pageState.ready;
  const tbody = document.querySelector("#timeline tbody");
  const known = new Map(); // run -> { checked: seq reached, done, findings: Map(seq -> list) }
  let timer = null;
  const apply = () => {
    const wanted = new Map(); // run -> [min, max] of rows in view not covered yet
    for (const tr of tbody.querySelectorAll("tr[data-frame]:not(.chunks)")) {
      const row = tr._row;
      if (!row || row.dir === "stderr") continue;
      const k = known.get(row.run_id);
      if (k && (row.seq <= k.checked || k.done)) {
        const found = k.findings.get(row.seq) || [];
        if (row.checks === undefined || row.checks.length !== found.length) {
          row.checks = found;
          if (found.length) patchFrame(row.id, { checks: found });
        }
        continue;
      }
      const span = wanted.get(row.run_id) || [row.seq, row.seq];
      wanted.set(row.run_id, [Math.min(span[0], row.seq), Math.max(span[1], row.seq)]);
    }
    return wanted;
  };
  const ask = async () => {
    timer = null;
    const wanted = apply();
    for (const [run, [from, to]] of wanted) {
      const data = await api(`/runs/${run}/checks.json?from=${from}&to=${to}`);
      if (!data.ok) continue;
      const k = known.get(run) || { checked: 0, done: false, findings: new Map() };
      for (const f of data.findings) {
        const list = k.findings.get(f.seq) || [];
        if (!list.some((g) => g.rule === f.rule && g.message === f.message)) list.push(f);
        k.findings.set(f.seq, list);
      }
      k.checked = data.checked;
      k.done = data.done;
      known.set(run, k);
      document.body.dataset.checked = `${run}:${data.checked}`;
    }
    const left = apply();
    if (left.size) schedule(300); // the server stopped at its budget: it goes on at the next ask
  };
  const schedule = (ms) => { if (!timer) timer = setTimeout(ask, ms); };
  new MutationObserver(() => schedule(120)).observe(tbody, { childList: true });
  schedule(0);

  // Each turn of the conversation carries the findings on its frames (from its prompt to its
  // end, or to the last frame checked while it is open).
  const conversation = document.getElementById("conversation");
  // A turn's findings, once complete, by run:prompt:end: the conversation is drawn again at
  // every playhead step, and its turn heads with it; asking the server again each time polled
  // checks.json several times a second for answers that cannot change.
  const turnFindings = new Map();
  const markTurns = async () => {
    for (const head of conversation.querySelectorAll(".turn-head[data-run]:not([data-checked])")) {
      const { run, seq, end } = head.dataset;
      const key = `${run}:${seq}:${end || ""}`;
      let findings = turnFindings.get(key);
      if (!findings) {
        const to = end || "999999999999999";
        const data = await api(`/runs/${run}/checks.json?from=${seq}&to=${to}`);
        if (!data.ok) continue;
        if (!data.done && (!end || data.checked < Number(end))) { setTimeout(markTurns, 300); continue; }
        findings = data.findings;
        turnFindings.set(key, findings); // the check has passed the turn's end, or the run's

      }
      if (!head.isConnected || head.dataset.checked !== undefined) continue;
      head.dataset.checked = String(findings.length);
      if (!findings.length) continue;
      const worst = ["error", "warning", "info"].find((s) => findings.some((f) => f.severity === s)) || "info";
      const rules = [...new Set(findings.map((f) => f.rule))];
      head.append(" ", el("span", { class: `badge checked finding-${worst}`, title: findings.map((f) => `#${f.seq} ${f.rule}: ${f.message}`).join("\n"),
        text: `${findings.length} finding${findings.length === 1 ? "" : "s"}: ${rules.join(", ")}` }));
    }
  };
  let turnTimer = null;
  new MutationObserver(() => { if (!turnTimer) turnTimer = setTimeout(() => { turnTimer = null; markTurns(); }, 150); })
    .observe(conversation, { childList: true });
  markTurns();
} });
