// acp-proxy inspector: a conversation drawn from its fold (entities, the summary, the charts).
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";

// -- a run or a session -------------------------------------------------------------------------

const ENTITY_LABELS = { message: "message", tool_call: "tool", permission: "permission", plan: "plan",
  terminal: "terminal", compaction: "compaction", notice: "notice", error: "error", cancel: "cancel",
  call: "call", subagent: "subagent", unknown: "unknown" };

function diffBlock(text) {
  const pre = el("pre", { class: "diff" });
  for (const line of text.split("\n")) {
    const cls = line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
    pre.append(el("span", { class: cls, text: line + "\n" }));
  }
  return pre;
}

function entityView(e) {
  const kind = e.entity;
  let label = ENTITY_LABELS[kind] || kind;
  const body = el("div", { class: "body" });
  const sub = (text) => el("div", { class: "sub", text });
  const json = (value) => JSON.stringify(value);
  // The playhead sends a long content's tail only: say how much came before it.
  if (e.hidden_chunks) body.append(el("div", { class: "sub hidden-chunks", text: `… ${e.hidden_chunks.toLocaleString()} earlier ${kind === "terminal" ? "bytes" : "chunks"} not shown` }));
  if (kind === "message") {
    label = e.role === "session" ? "message" : e.role;
    body.append(collapsible("span", e.text || ""));
  } else if (kind === "tool_call") {
    body.append(el("b", { text: e.title || e.name || e.tool_call_id }), " ",
      badge(e.status || "pending", e.status === "failed" ? "crashed" : "flag"),
      e.tool_kind ? sub(`kind ${e.tool_kind} · ${e.tool_call_id}`) : sub(e.tool_call_id));
    for (const loc of e.locations || []) body.append(sub(`at ${loc.path || loc}${loc.line != null ? ":" + loc.line : ""}`));
    if (e.text) body.append(e.text.includes("\n@@") || e.text.startsWith("---") ? diffBlock(e.text) : collapsible("pre", e.text));
    if (e.placeholder) body.append(sub("(never announced)"));
  } else if (kind === "permission") {
    const options = (e.options || []).map((o) => o.optionId || o.name).join(", ");
    const answer = e.option_id || e.outcome || (e.error ? "error " + json(e.error) : e.answered ? "answered" : "unanswered");
    body.append(`${e.title || e.tool_call_id || "?"} [${options}] → `, el("b", { text: answer }));
  } else if (kind === "plan") {
    if (e.removed) body.append(`${e.plan_id || "plan"} removed`);
    else {
      body.append(`${e.plan_id || ""} (${(e.entries || []).length} entries)`);
      for (const entry of e.entries || []) {
        const mark = { completed: "[x]", in_progress: "[~]" }[entry.status] || "[ ]";
        body.append(el("div", { class: "plan-entry", text: `${mark} ${entry.content}` }));
      }
      if (e.markdown) body.append(el("pre", { text: e.markdown }));
    }
  } else if (kind === "terminal") {
    body.append(el("span", { class: "mono", text: `${e.terminal_id} ${e.command || ""} ${(e.args || []).join(" ")}` }),
      " — ", e.exit_status ? `exit ${json(e.exit_status)}` : "running");
    if (e.text) body.append(collapsible("pre", e.text));
  } else if (kind === "compaction") {
    body.append(`${e.compaction_id} — ${e.status || ""}`);
  } else if (kind === "notice") {
    body.append(badge("live", "flag"), ` [${e.severity || "info"}] ${e.title || ""} ${e.description || ""}`);
  } else if (kind === "error") {
    body.append(`${e.method || "?"} → ${e.code} ${e.message || ""}`);
  } else if (kind === "cancel") {
    body.append("session/cancel sent by the client");
  } else if (kind === "call") {
    body.append(el("b", { text: e.method }), " ", short(json(e.params), 300), " → ",
      e.error ? "error " + short(json(e.error), 200) : e.answered ? short(json(e.result), 200) : "unanswered");
  } else if (kind === "subagent") {
    body.append(`${e.child_session_id} ${e.title || ""}`);
  } else {
    body.append(`${e.update_kind || e.method || "?"} (${e.extension ? "extension" : e.reason || "unknown"}) `, el("code", { text: short(json(e.raw), 600) }));
  }
  const classes = ["entity", kind, e.role || "", e.replay ? "replay" : ""].join(" ");
  return el("div", { class: classes, dataset: { run: e.run, seq: e.seq }, title: `frame ${e.run}:${e.seq}`,
    onclick: () => selectFrame(`${e.run}:${e.seq}`, true) },
    el("div", { class: "label" }, e.replay ? badge("history", "history") : null, e.replay ? el("br") : null, label), body);
}

function conversationView(convs) {
  if (!convs.length) return [el("p", { class: "dim", text: "No conversation recorded." })];
  const out = [];
  for (const c of convs) {
    const bits = [c.hop ? `hop ${c.hop}: inside proxy/successor` : "", c.title ? `“${c.title}”` : "", c.cwd ? `cwd ${c.cwd}` : "", c.protocol_version ? `protocol ${c.protocol_version}` : "",
      c.runs && c.runs.length ? `runs ${c.runs.join(", ")}` : ""].filter(Boolean);
    out.push(el("div", { class: "conv-head" }, c.session_id ? `Session ${c.session_id}` : "Outside any session", " ",
      el("span", { class: "dim", text: bits.join(" · ") })));
    if (c.hidden_entries) out.push(el("p", { class: "dim hidden-entries", text: `… ${c.hidden_entries.toLocaleString()} earlier entries not shown` }));
    const turns = new Map((c.turns || []).map((t) => [t.index, t]));
    let current = -1;
    for (const e of c.timeline || []) {
      if (e.turn !== current) {
        current = e.turn;
        const t = turns.get(current);
        const head = current ? [`Turn ${current}`] : ["before the first prompt"];
        if (t) {
          if (t.by === "agent") head.push("started by the agent");
          if (t.stop_reason) head.push(`stop: ${t.stop_reason}`);
          else if (t.error) head.push("error");
          else if (t.end_seq == null) head.push("unfinished");
          if (t.duration_ms != null) head.push(ms(t.duration_ms));
          if (t.replay) head.push("history");
        }
        // Where the turn's frames are, for the marks the checks put on it (checks.js).
        const at = t && t.seq != null && t.run != null ? { run: t.run, seq: t.seq, end: t.end_seq ?? "" } : null;
        out.push(el("div", { class: "turn-head", dataset: at, text: head.join(" · ") }));
      }
      out.push(entityView(e));
    }
    if (c.usage) {
      const u = c.usage;
      const cost = u.cost && u.cost.amount != null ? `, cost ${u.cost.amount} ${u.cost.currency || ""}` : "";
      out.push(el("div", { class: "entity usage" }, el("div", { class: "label", text: "usage" }), el("div", { class: "body", text: `${u.used} of ${u.size} tokens${cost}` })));
    }
    if (c.state) {
      out.push(el("div", { class: "entity" }, el("div", { class: "label", text: "state" }), el("div", { class: "body", text: `${c.state}${c.stop_reason ? ` (${c.stop_reason})` : ""}` })));
    }
  }
  return out;
}

function summaryView(data) {
  const out = [];
  for (const r of data.runs || []) {
    const bits = [
      ["run", el("a", { href: `/runs/${r.id}`, text: r.id })],
      ["status", badge(r.status, r.status)],
      ["command", el("span", { class: "mono", text: short((r.argv || []).join(" "), 120) })],
      ["peers", [r.agent, r.client].filter(Boolean).join(" ⇄ ")],
      ["protocol", r.protocol_version ?? ""],
      ["started", when(r.started)],
      ["took", ms(r.duration_ms)],
      ["exit", r.exit],
      ["frames", r.frames ?? ""],
    ];
    if (r.faults) bits.push(["faults", r.faults]);
    if (r.findings) bits.push(["findings", r.findings]);
    if (r.not_recorded) bits.push(["not recorded", `${r.not_recorded} (${r.not_recorded_reason || ""})`]);
    out.push(el("div", {}, ...bits.map(([k, v]) => el("span", {}, `${k} `, el("b", {}, v), "  "))));
  }
  return out;
}

function embed(target, spec) {
  if (typeof vegaEmbed !== "function") {
    target.textContent = "charts need the page's Vega scripts, which did not load";
    return;
  }
  vegaEmbed(target, spec, { actions: false, renderer: "svg" }).catch((err) => {
    target.textContent = `chart: ${err}`;
  });
}

function charts(data) {
  const waterfall = document.getElementById("waterfall");
  const latency = document.getElementById("latency");
  if (!data.waterfall || !data.waterfall.length) waterfall.textContent = "No prompt turn recorded.";
  else embed(waterfall, {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    data: { values: data.waterfall },
    facet: { row: { field: "turn", type: "nominal", title: null, sort: null } },
    spec: {
      width: 560,
      layer: [
        { transform: [{ filter: "datum.end_ms != null && datum.start_ms != datum.end_ms" }], mark: { type: "bar", height: 12 },
          encoding: { x: { field: "start_ms", type: "quantitative", title: "ms since the prompt" }, x2: { field: "end_ms" },
            y: { field: "lane", type: "nominal", sort: null, title: null }, color: { field: "kind", type: "nominal", title: null },
            tooltip: [{ field: "lane" }, { field: "start_ms", title: "from ms" }, { field: "end_ms", title: "to ms" }, { field: "detail" }] } },
        { transform: [{ filter: "datum.start_ms != null && datum.start_ms == datum.end_ms" }], mark: { type: "tick", thickness: 3, size: 14 },
          encoding: { x: { field: "start_ms", type: "quantitative" }, y: { field: "lane", type: "nominal", sort: null },
            color: { field: "kind", type: "nominal" }, tooltip: [{ field: "lane" }, { field: "start_ms", title: "at ms" }] } },
      ],
    },
    resolve: { scale: { y: "independent" } },
  });
  if (!data.latency || !data.latency.length) latency.textContent = "No answered request recorded.";
  else embed(latency, {
    $schema: "https://vega.github.io/schema/vega-lite/v6.json",
    // hop: a request of a proxy chain's inner conversation, named as the latency table names it
    data: { values: data.latency.map((d) => ({ ...d, method: d.hop ? `${d.method} (hop ${d.hop})` : d.method,
      latency_ms: Math.max(d.latency_ms, 0.001) })) },
    width: 560,
    layer: [
      { mark: { type: "boxplot", extent: "min-max", opacity: 0.5 },
        encoding: { y: { field: "method", type: "nominal", title: null }, x: { field: "latency_ms", type: "quantitative", title: "latency (ms, log scale)", scale: { type: "log" } } } },
      { mark: { type: "point", filled: true, size: 30 },
        encoding: { y: { field: "method", type: "nominal" }, x: { field: "latency_ms", type: "quantitative" },
          color: { field: "error", type: "nominal", title: "error" }, tooltip: [{ field: "method" }, { field: "latency_ms" }, { field: "dir" }] } },
    ],
  });
}
function latencyTable(rows) {
  const tbody = document.querySelector("#latency-table tbody");
  if (!tbody) return;
  tbody.replaceChildren(...(rows || []).map((r) => el("tr", { dataset: { method: r.method } },
    // hop: a proxy chain's inner conversation (what proxy/successor envelopes carry)
    el("td", { class: "mono", text: r.hop ? `${r.method} (hop ${r.hop})` : r.method }),
    el("td", { text: r.dir }), el("td", { text: r.count }),
    el("td", { text: r.errors || "" }), el("td", { text: ms(r.p50_ms) }), el("td", { text: ms(r.p95_ms) }),
    el("td", { text: ms(r.p99_ms) }), el("td", { text: ms(r.max_ms) }))));
}
