// acp-proxy inspector: the session panel — both sides' names and capabilities, the protocol
// version, the session's mode, model, usage and state, for a session addressed by run and id
// (/runs/ID/sessions/SESSION.json). Text only ever reaches the page through textContent.
"use strict";

FEATURES.push({ page: "conversation", async start() {
  await pageState.ready;
  const section = document.getElementById("session-panel");
  const pick = document.getElementById("session-pick");
  const facts = document.getElementById("session-facts");
  const body = document.body;
  let pairs = []; // [run, session]
  if (body.dataset.kind === "run") {
    const data = await api(`/runs/${body.dataset.ident}/sessions.json`);
    if (!data.ok) return;
    pairs = data.sessions.map((s) => [Number(body.dataset.ident), s]);
  } else {
    pairs = (pageState.runIds || []).map((r) => [r, body.dataset.ident]);
  }
  if (!pairs.length) return;
  section.classList.remove("hidden");
  pick.replaceChildren(...pairs.map(([r, s], i) => el("option", { value: i, text: `run ${r} · session ${short(s, 40)}` })));
  const name = (info) => info && info.name ? `${info.name}${info.version ? " " + info.version : ""}` : "-";
  const tree = (value) => value === null || value === undefined ? el("span", { class: "dim", text: "none" }) : treeView(value, []);
  const show = async () => {
    const [run, session] = pairs[Number(pick.value) || 0];
    const data = await api(`/runs/${run}/sessions/${encodeURIComponent(session)}.json`);
    if (!data.ok) { facts.replaceChildren(el("dd", { class: "error", text: data.error })); return; }
    const usage = data.usage ? [data.usage.used != null && data.usage.size != null ? `${data.usage.used} of ${data.usage.size} tokens` : "",
      data.usage.cost ? ` · cost ${data.usage.cost.amount} ${data.usage.cost.currency || ""}` : ""].join("") : "";
    const rows = [
      ["session", `${data.session_id} (run ${data.run_id}, ${data.status})`],
      ["protocol version", data.protocol_version ?? "-"],
      ["client", name(data.client_info)],
      ["agent", name(data.agent_info)],
      ["mode", data.mode ? `${data.mode}${data.modes.length ? " (of " + data.modes.join(", ") + ")" : ""}` : "-"],
      ["model", data.model || "-"],
      ["usage", usage || "-"],
      ["state", `${data.state || "-"}${data.stop_reason ? " · " + data.stop_reason : ""} · ${data.turns} turn(s)`],
      ["title", data.title || "-"],
      ["cwd", data.cwd || "-"],
    ];
    const out = [];
    for (const [k, v] of rows) out.push(el("dt", { text: k }), el("dd", { dataset: { fact: k }, text: String(v) }));
    out.push(el("dt", { text: "client capabilities" }), el("dd", { dataset: { fact: "client capabilities" } }, tree(data.client_capabilities)));
    out.push(el("dt", { text: "agent capabilities" }), el("dd", { dataset: { fact: "agent capabilities" } }, tree(data.agent_capabilities)));
    facts.replaceChildren(...out);
  };
  pick.addEventListener("change", show);
  await show();
} });
