// acp-proxy inspector: every page is drawn here from its JSON twin (the same path + ".json").
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";

const POLL_MS = 400; // live pages ask for news this often: a new run or frame shows within 1 s

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// The connection badge: a page whose server has stopped says so instead of going stale.
function connected(ok, why) {
  const badgeNode = document.getElementById("connection");
  if (!badgeNode) return;
  badgeNode.classList.toggle("hidden", ok);
  badgeNode.textContent = ok ? "" : `server unreachable${why ? ": " + why : ""} — showing what was last received`;
  document.body.dataset.connection = ok ? "ok" : "lost";
}

async function api(url) {
  let response;
  try {
    response = await fetch(url, { credentials: "same-origin", headers: { accept: "application/json" } });
  } catch (err) {
    connected(false, "no answer");
    return { ok: false, error: "the acp-proxy ui server does not answer", offline: true };
  }
  connected(response.status < 500, `HTTP ${response.status}`);
  const data = await response.json().catch(() => ({ ok: false, error: `HTTP ${response.status}` }));
  if (!response.ok && data.ok !== false) data.ok = false;
  return data;
}

// Long text is shown collapsed, with a button that reveals the rest.
const COLLAPSE_AT = 2000;
function collapsible(tag, text, cls) {
  text = text || "";
  const node = el(tag, { class: cls || "" });
  if (text.length <= COLLAPSE_AT) { node.textContent = text; return node; }
  node.textContent = text.slice(0, COLLAPSE_AT) + "…";
  node.classList.add("collapsed");
  const more = el("button", { type: "button", class: "reveal", text: `show all ${text.length.toLocaleString()} characters` });
  more.addEventListener("click", (event) => {
    event.stopPropagation();
    node.textContent = text;
    node.classList.remove("collapsed");
    more.remove();
  });
  const wrap = el("div", { class: "collapsible" }, node, more);
  return wrap;
}

function badge(text, cls) {
  return el("span", { class: `badge ${cls || ""}`, text });
}

function clock(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleDateString() + " " + d.toLocaleTimeString([], { hour12: false });
}

function ms(value) {
  if (value === null || value === undefined) return "";
  return value < 10 ? `${value.toFixed(2)} ms` : value < 1000 ? `${value.toFixed(1)} ms` : `${(value / 1000).toFixed(2)} s`;
}

function short(text, n) {
  text = text || "";
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

function setLive(live) {
  document.getElementById("live").classList.toggle("hidden", !live);
}

function poll(fn) {
  let busy = false;
  const follow = document.getElementById("follow");
  const tick = async () => {
    if (busy || (follow && !follow.checked)) return; // paused: the page stays as it is
    busy = true;
    document.body.dataset.polling = "1"; // while an update is under way (tests wait for it to land)
    try { await fn(); } catch (err) { console.error(err); } finally { busy = false; delete document.body.dataset.polling; }
  };
  return setInterval(tick, POLL_MS);
}

// -- the front page -----------------------------------------------------------------------------

function initIndex() {
  const ticked = new Set();
  const diffLink = document.getElementById("diff-link");
  const runsBody = document.querySelector("#runs tbody");
  const sessionsBody = document.querySelector("#sessions tbody");
  const runRows = new Map(); // run id -> its row: rows are updated in place, never rebuilt
  const sessionRows = new Map();
  let oldest = null; // the oldest run listed: "older runs" asks for those before it
  const updateDiff = () => {
    const ids = [...ticked].sort((a, b) => a - b);
    diffLink.classList.toggle("disabled", ids.length !== 2);
    diffLink.href = ids.length === 2 ? `/diff/${ids[0]}/${ids[1]}` : "#";
  };
  // A cell's content changes only when its text does: selection and focus stay where they are.
  const set = (td, text, build) => {
    const value = String(text ?? "");
    if (td.dataset.value === value) return;
    td.dataset.value = value;
    if (build) td.replaceChildren(build()); else td.textContent = value;
  };
  const runCells = (tr, r) => {
    const c = tr.children;
    set(c[2], when(r.started));
    set(c[3], r.status, () => badge(r.status, r.status));
    set(c[4], [r.agent, r.client].filter(Boolean).join(" ⇄ "));
    set(c[5], short((r.argv || []).join(" "), 90));
    set(c[6], r.frames ?? "");
    set(c[7], r.faults || "");
    set(c[8], r.findings || "");
    set(c[9], r.exit);
  };
  const runRow = (r) => {
    const tr = el("tr", { dataset: { run: r.id } },
      el("td", {}, el("input", { type: "checkbox", "aria-label": `compare run ${r.id}`,
        onchange: (e) => { e.target.checked ? ticked.add(r.id) : ticked.delete(r.id); updateDiff(); } })),
      el("td", {}, el("a", { href: `/runs/${r.id}`, text: `run ${r.id}` })),
      el("td"), el("td"), el("td"), el("td", { class: "mono" }), el("td"), el("td"), el("td"), el("td"));
    runRows.set(r.id, tr);
    return tr;
  };
  const mergeRuns = (runs) => {
    for (const r of runs) { // newest first
      let tr = runRows.get(r.id);
      if (!tr) {
        tr = runRow(r);
        // Its place: before the first listed run older than it.
        const next = [...runRows.entries()].filter(([id]) => id < r.id).sort((a, b) => b[0] - a[0])[0];
        if (next && next[1] !== tr && next[1].parentNode === runsBody) runsBody.insertBefore(tr, next[1]);
        else runsBody.append(tr);
      }
      runCells(tr, r);
      if (oldest === null || r.id < oldest) oldest = r.id;
    }
  };
  const mergeSessions = (sessions, paging) => {
    sessions.forEach((s, i) => {
      let tr = sessionRows.get(s.row); // a session id can be recorded more than once
      if (!tr) {
        tr = el("tr", { dataset: { session: s.session_id } },
          el("td", {}, el("a", { class: "mono", href: `/sessions/${encodeURIComponent(s.session_id)}`, text: s.session_id })),
          el("td"), el("td", { class: "mono" }), el("td"), el("td"), el("td"));
        sessionRows.set(s.row, tr);
      }
      if (paging) { if (!tr.parentNode) sessionsBody.append(tr); }
      else if (sessionsBody.children[i] !== tr) sessionsBody.insertBefore(tr, sessionsBody.children[i] || null);
      tr.dataset.key = s.key; // its place in the list: "older sessions" asks after the last one
      const c = tr.children;
      set(c[1], s.title || "");
      set(c[2], s.cwd || "");
      set(c[3], s.runs.join(","), () => el("span", {}, ...s.runs.map((id) => el("a", { href: `/runs/${id}`, text: `${id} ` }))));
      set(c[4], s.turns);
      set(c[5], when(s.last_seen));
    });
  };
  const older = document.getElementById("runs-older");
  const render = (data, paging) => {
    if (!data.ok) return;
    setLive(data.running > 0);
    if (paging !== "sessions") mergeRuns(data.runs);
    if (paging === "runs" || runRows.size <= data.runs.length) older.classList.toggle("hidden", !data.more_runs);
    document.getElementById("runs-empty").classList.toggle("hidden", runRows.size > 0);
    document.getElementById("runs-count").textContent =
      `(${runRows.size} of ${data.runs_total} shown${data.running ? `, ${data.running} recording` : ""})`;
    if (paging !== "runs") {
      mergeSessions(data.sessions, paging === "sessions");
      if (paging === "sessions" || sessionRows.size <= data.sessions.length) olderSessions.classList.toggle("hidden", !data.more_sessions);
      document.getElementById("sessions-empty").classList.toggle("hidden", sessionRows.size > 0);
    }
  };
  const olderSessions = document.getElementById("sessions-older");
  older.addEventListener("click", async () => render(await api(`/.json?before=${oldest}`), "runs"));
  olderSessions.addEventListener("click", async () =>
    render(await api(`/.json?sessions_before=${encodeURIComponent(sessionsBody.lastElementChild.dataset.key)}`), "sessions"));
  const load = async () => render(await api("/.json"), null);
  load();
  poll(load);
}

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
        out.push(el("div", { class: "turn-head", text: head.join(" · ") }));
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

function laneCell(dir) {
  const arrow = dir === "c2a" ? "client ──→" : dir === "a2c" ? "←── agent" : "stderr";
  return el("td", { class: `lane ${dir}` }, el("span", { class: "arrow", text: arrow }));
}

function marksCell(item) {
  const td = el("td", {});
  for (const f of item.faults || []) td.append(badge(`fault: ${f.action}`, "fault"), " ");
  for (const f of item.findings || []) td.append(el("span", { class: `badge finding-${f.severity}`, title: f.message, text: f.rule }), " ");
  for (const flag of item.flags || []) td.append(badge(flag, flag === "history" ? "history" : "flag"), " ");
  if (item.error) td.append(el("span", { class: "error", text: item.error }));
  return td;
}

let multiRun = false;
let selected = null;
let virtual = null; // the virtual timeline, on a selection too long to draw whole

function frameRow(row, extraClass) {
  const what = row.update_kind ? `${row.method} · ${row.update_kind}` : row.method || row.kind;
  const tr = el("tr", { class: extraClass || "", dataset: { frame: row.id },
    onclick: () => selectFrame(row.id, false) },
    el("td", { class: "mono", text: multiRun ? row.id : row.seq }),
    el("td", { class: "mono", text: clock(row.ts) }),
    laneCell(row.dir),
    el("td", { text: row.kind }),
    el("td", { text: what || "" }),
    el("td", { class: "mono", text: row.rpc_id ?? "" }),
    el("td", { text: ms(row.latency_ms) }),
    marksCell(row),
    el("td", { class: "preview", text: row.text != null ? row.text : (row.snippet ?? row.preview), title: row.preview }),
  );
  return tr;
}

function chunkLabel(n) {
  return n === 1 ? "1 chunk" : `${n} chunks`;
}

function chunkRows(item, expanded) {
  const toggle = el("button", { class: "toggle", type: "button", "aria-expanded": String(!!expanded), text: expanded ? "▾" : "▸" });
  const head = el("tr", { class: "chunks", dataset: { group: item.chunk_key, frame: item.rows[0].id } },
    el("td", { class: "mono" }, toggle, " ", multiRun ? item.rows[0].id : item.seq),
    el("td", { class: "mono", text: clock(item.ts) }),
    laneCell(item.dir),
    el("td", { text: chunkLabel(item.count) }),
    el("td", { text: `${item.method} · ${item.update_kind}` }),
    el("td", { class: "mono", text: item.item_id || "" }),
    el("td", {}),
    marksCell(item),
    el("td", { class: "preview", text: item.text, title: item.text }),
  );
  const children = item.rows.map((r) => {
    const tr = frameRow(r, "child" + (expanded ? "" : " hidden"));
    tr.dataset.parent = item.chunk_key;
    return tr;
  });
  const flip = (event) => {
    event.stopPropagation();
    const open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(open));
    toggle.textContent = open ? "▾" : "▸";
    for (const c of head._children) c.classList.toggle("hidden", !open);
  };
  toggle.addEventListener("click", flip);
  head.addEventListener("click", (event) => { if (event.target === toggle) return; selectFrame(item.rows[0].id, false); });
  head._children = children;
  head._item = item;
  return [head, ...children];
}

function appendTimeline(tbody, items, fresh) {
  for (const item of items) {
    const last = tbody._lastGroup;
    if (item.type === "chunks" || item.chunk_key) {
      const rows = item.type === "chunks" ? item.rows : [item];
      // Live follow: chunks of the message the last row was streaming join its group.
      if (last && last._item.chunk_key === (item.chunk_key || rows[0].chunk_key) && tbody.lastElementChild && tbody.lastElementChild.dataset.parent === last._item.chunk_key) {
        const open = last.querySelector("button.toggle").getAttribute("aria-expanded") === "true";
        for (const r of rows) {
          const tr = frameRow(r, "child" + (open ? "" : " hidden") + (fresh ? " new" : ""));
          tr.dataset.parent = last._item.chunk_key;
          last._children.push(tr);
          tbody.append(tr);
        }
        last._item.rows.push(...rows);
        last._item.count = last._item.rows.length;
        last._item.text = last._item.rows.map((r) => r.text || "").join("");
        last.children[3].textContent = chunkLabel(last._item.count);
        last.children[8].textContent = short(last._item.text, 2000);
        continue;
      }
      if (item.type === "chunks") {
        const built = chunkRows(item, false);
        if (fresh) built[0].classList.add("new");
        tbody.append(...built);
        tbody._lastGroup = built[0];
        continue;
      }
      // A lone chunk: a group of one, so that the next chunks can join it.
      const built = chunkRows({ ...item, type: "chunks", rows: [item], count: 1, last_seq: item.seq }, false);
      if (fresh) built[0].classList.add("new");
      tbody.append(...built);
      tbody._lastGroup = built[0];
      continue;
    }
    const tr = frameRow(item, fresh ? "new" : "");
    tbody.append(tr);
    tbody._lastGroup = null;
  }
}

function treeView(value, marks) {
  const byPath = new Map(marks.map((m) => [JSON.stringify(m.path), m.mark]));
  const tag = (path, node) => {
    const mark = byPath.get(JSON.stringify(path));
    if (mark) {
      node.classList.add(`mark-${mark}`);
      node.dataset.mark = mark;
      const target = node.tagName === "DETAILS" ? node.querySelector("summary") : node;
      target.append(el("span", { class: `mark-tag ${mark}`, text: mark === "meta" ? "_meta" : "not in schema" }));
    }
    return node;
  };
  const scalar = (v) => {
    if (typeof v === "string") return el("span", { class: "v-string", text: JSON.stringify(v) });
    if (typeof v === "number") return el("span", { class: "v-number", text: String(v) });
    return el("span", { class: "v-other", text: String(v) });
  };
  const node = (key, v, path, depth) => {
    const keyNode = key === null ? null : el("span", { class: "key", text: typeof key === "number" ? `${key}` : JSON.stringify(key) });
    if (v !== null && typeof v === "object") {
      const entries = Array.isArray(v) ? v.map((x, i) => [i, x]) : Object.entries(v);
      const brackets = Array.isArray(v) ? [`[${entries.length}]`] : [`{${entries.length}}`];
      const details = el("details", { open: depth < 2 ? "" : null, dataset: { path: JSON.stringify(path) } },
        el("summary", {}, keyNode, keyNode ? ": " : "", el("span", { class: "dim", text: brackets[0] })));
      for (const [k, x] of entries) details.append(node(k, x, [...path, k], depth + 1));
      return tag(path, details);
    }
    return tag(path, el("div", { class: "leaf", dataset: { path: JSON.stringify(path) } }, keyNode, keyNode ? ": " : "", scalar(v)));
  };
  const root = node(null, value, [], 0);
  // What the schema does not know should be seen without hunting: open the way to each mark.
  for (const marked of root.querySelectorAll("[data-mark]")) {
    for (let up = marked.parentElement; up && up !== root.parentElement; up = up.parentElement) {
      if (up.tagName === "DETAILS") up.open = true;
    }
  }
  return root;
}

async function selectFrame(id, scroll) {
  const [run, seq] = id.split(":");
  const tbody = document.querySelector("#timeline tbody");
  let tr = tbody.querySelector(`tr[data-frame="${CSS.escape(id)}"]:not(.chunks)`) || tbody.querySelector(`tr[data-frame="${CSS.escape(id)}"]`);
  if (tr && tr.classList.contains("hidden")) {
    const head = [...tbody.querySelectorAll("tr.chunks")].find((h) => h._children && h._children.includes(tr));
    if (head) head.querySelector("button.toggle").click();
  }
  for (const old of tbody.querySelectorAll("tr.selected")) old.classList.remove("selected");
  if (tr) {
    tr.classList.add("selected");
    if (scroll) tr.scrollIntoView({ block: "nearest" });
  }
  selected = id;
  if (virtual) { if (scroll) virtual.reveal(id); else virtual.selected(id); }
  history.replaceState(null, "", `${location.pathname}${location.search}#frame=${id}`);
  const data = await api(`/runs/${run}/frames/${seq}.json`);
  const detail = document.getElementById("detail");
  detail.classList.remove("hidden");
  if (!data.ok) {
    document.getElementById("detail-title").textContent = data.error;
    return;
  }
  const row = data.row;
  document.getElementById("detail-title").textContent =
    `Frame ${id} · ${row.dir} · ${row.kind}${row.method ? " · " + row.method : ""}${row.update_kind ? " · " + row.update_kind : ""}`;
  const notes = document.getElementById("detail-notes");
  notes.replaceChildren();
  if (data.note) notes.append(el("p", { class: "dim", text: `note: ${data.note}` }));
  if (data.decode_error) notes.append(el("p", { class: "error", text: data.decode_error }));
  for (const f of row.faults) notes.append(el("p", {}, badge(`fault: ${f.action}`, "fault"), ` ${f.detail || ""} — rule: ${f.rule}`));
  for (const f of row.findings) notes.append(el("p", {}, badge(f.severity, `finding-${f.severity}`), ` ${f.rule}: ${f.message}`));
  const raw = data.raw ?? "";
  const rawNode = document.getElementById("detail-raw");
  const reveal = document.getElementById("detail-reveal");
  rawNode.textContent = raw.length > COLLAPSE_AT ? raw.slice(0, COLLAPSE_AT) + "…" : raw;
  reveal.classList.toggle("hidden", raw.length <= COLLAPSE_AT);
  reveal.textContent = `show all ${raw.length.toLocaleString()} characters`;
  reveal.onclick = () => { rawNode.textContent = raw; reveal.classList.add("hidden"); };
  const tree = document.getElementById("detail-tree");
  tree.replaceChildren(data.json === null || data.json === undefined ? el("p", { class: "dim", text: "not JSON" }) : treeView(data.json, data.marks));
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
    data: { values: data.latency.map((d) => ({ ...d, latency_ms: Math.max(d.latency_ms, 0.001) })) },
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

// A selection longer than this is shown as a virtual list: only the rows in view are in the
// page, fetched a page at a time from /runs/ID/frames.json; shorter ones are drawn whole, with
// chunks of one message collapsed into one row.
const VIRTUAL_AT = 1000;
const ROW_H = 26; // px: every row of the virtual list is one line high
const PAGE = 200;
const OVERSCAN = 15;
const KEEP_PAGES = 16; // pages kept in memory; the others are dropped and fetched again if needed

function virtualTimeline(base, filterText, onCount) {
  const scroll = document.getElementById("timeline-scroll");
  const table = document.getElementById("timeline");
  const tbody = table.querySelector("tbody");
  const pages = new Map(); // page number -> rows (an array, the tail page possibly short)
  const pending = new Set();
  let total = 0;
  let cursor = null;
  let current = -1; // the index of the highlighted row (j/k)
  let currentId = null;
  let drawn = "";
  let dead = false;
  table.classList.add("virtual");
  scroll.classList.add("virtual");
  const url = (params) => {
    const q = new URLSearchParams(params);
    if (filterText) q.set("filter", filterText);
    return `${base}/frames.json?${q}`;
  };
  const rowAt = (i) => { const p = pages.get(Math.floor(i / PAGE)); return p ? p[i % PAGE] : undefined; };
  const fetchPage = async (p) => {
    if (pending.has(p)) return;
    pending.add(p);
    try {
      const data = await api(url({ offset: p * PAGE, limit: PAGE }));
      if (dead || !data.ok) return;
      pages.set(p, data.rows);
      // Far pages go: memory holds what is near the view, whatever the run's length.
      if (pages.size > KEEP_PAGES) {
        const here = Math.floor(scroll.scrollTop / ROW_H / PAGE);
        const far = [...pages.keys()].sort((a, b) => Math.abs(b - here) - Math.abs(a - here));
        for (const q of far.slice(0, pages.size - KEEP_PAGES)) pages.delete(q);
      }
      draw(true);
    } finally { pending.delete(p); }
  };
  const spacer = (height) => el("tr", { class: "spacer", "aria-hidden": "true" }, el("td", { colspan: 9, style: `height:${height}px;padding:0;border:0` }));
  const draw = (force) => {
    const view = Math.ceil(scroll.clientHeight / ROW_H) + 1;
    const first = Math.max(0, Math.floor(scroll.scrollTop / ROW_H) - OVERSCAN);
    const last = Math.min(total, first + view + 2 * OVERSCAN);
    const key = `${first}:${last}:${total}`;
    if (!force && key === drawn) return;
    drawn = key;
    const rows = [spacer(first * ROW_H)];
    const wanted = new Set();
    for (let i = first; i < last; i++) {
      const r = rowAt(i);
      if (r === undefined) {
        wanted.add(Math.floor(i / PAGE));
        rows.push(el("tr", { class: "loading", dataset: { index: i } }, el("td", { colspan: 9, class: "dim", text: "…" })));
        continue;
      }
      const tr = frameRow(r, "");
      tr.dataset.index = i;
      if (r.id === selected) tr.classList.add("selected");
      if (i === current) tr.classList.add("current");
      rows.push(tr);
    }
    rows.push(spacer(Math.max(0, total - last) * ROW_H));
    tbody.replaceChildren(...rows);
    for (const p of wanted) fetchPage(p);
  };
  let scheduled = false;
  scroll.addEventListener("scroll", () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => { scheduled = false; draw(false); });
  });
  const atBottom = () => scroll.scrollTop + scroll.clientHeight >= scroll.scrollHeight - 2 * ROW_H;
  return {
    async start() {
      const data = await api(url({ offset: 0, limit: PAGE }));
      if (!data.ok) return data;
      if (data.filter_error) return data;
      total = data.total;
      cursor = data.last;
      pages.set(0, data.rows);
      onCount(total);
      draw(true);
      return data;
    },
    // Live: only the frames recorded after the page's cursor are asked for.
    async news() {
      if (!cursor && total) return;
      const follow = atBottom() && total > 0;
      const data = await api(url({ after: cursor || "0:0", limit: PAGE }));
      if (dead || !data.ok || !data.total) return data;
      for (const [k, r] of data.rows.entries()) {
        const i = total + k;
        const p = Math.floor(i / PAGE);
        if (!pages.has(p) && i % PAGE === 0) pages.set(p, []);
        const page = pages.get(p);
        if (page && page.length === i % PAGE) { page.push(r); r.fresh = true; }
      }
      total += data.total;
      // The frames not sent yet (more than a page) are fetched by offset when they come into view.
      if (data.rows.length === data.total) cursor = data.cursor;
      else { cursor = null; const tail = await api(url({ offset: Math.max(0, total - 1), limit: 1 })); if (tail.ok && tail.rows.length) cursor = tail.rows[0].id; }
      onCount(total);
      if (follow) scroll.scrollTop = scroll.scrollHeight;
      draw(true);
      if (follow) scroll.scrollTop = total * ROW_H;
      return data;
    },
    move(step) {
      if (!total) return null;
      current = Math.max(0, Math.min(total - 1, (current < 0 ? Math.floor(scroll.scrollTop / ROW_H) - (step > 0 ? 1 : 0) : current) + step));
      const top = current * ROW_H;
      if (top < scroll.scrollTop) scroll.scrollTop = top;
      else if (top + 2 * ROW_H > scroll.scrollTop + scroll.clientHeight) scroll.scrollTop = top + 2 * ROW_H - scroll.clientHeight;
      const r = rowAt(current);
      currentId = r ? r.id : null;
      draw(true);
      return currentId;
    },
    current() { return currentId; },
    end() { scroll.scrollTop = scroll.scrollHeight; draw(true); },
    // Bring a frame into view (a link to it, a click in the conversation): its index is asked for.
    async reveal(id) {
      const data = await api(url({ limit: 0, at: id }));
      if (dead || !data.ok || data.position === null || data.position === undefined) return;
      current = data.position;
      currentId = id;
      scroll.scrollTop = Math.max(0, current * ROW_H - scroll.clientHeight / 2);
      draw(true);
    },
    selected() { draw(true); },
    stop() { dead = true; table.classList.remove("virtual"); scroll.classList.remove("virtual"); },
    get total() { return total; },
  };
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

function initConversation() {
  const body = document.body;
  const base = body.dataset.kind === "run" ? `/runs/${body.dataset.ident}` : `/sessions/${encodeURIComponent(body.dataset.ident)}`;
  const tbody = document.querySelector("#timeline tbody");
  const input = document.getElementById("filter");
  let cursor = null;
  let refreshTimer = null;
  let generation = 0; // a new filter starts a new timeline: answers to older polls are dropped
  let folded = true;
  let framesTotal = 0;
  const query = (extra) => {
    const params = new URLSearchParams(extra);
    if (input.value.trim()) params.set("filter", input.value.trim());
    return `${base}.json?${params}`;
  };
  const showError = (data) => {
    const error = document.getElementById("filter-error");
    error.classList.toggle("hidden", !data.filter_error);
    error.textContent = data.filter_error ? `bad filter: ${data.filter_error}` : "";
  };
  const showTimeline = (data, append) => {
    showError(data);
    if (!append) { tbody.replaceChildren(); tbody._lastGroup = null; }
    appendTimeline(tbody, data.timeline || [], append);
    if (data.cursor) cursor = data.cursor;
    document.getElementById("timeline-more").classList.toggle("hidden", !data.more);
    const shown = tbody.querySelectorAll("tr[data-frame]:not(.chunks)").length;
    document.getElementById("frame-count").textContent = `(${shown} shown of ${data.frames_total})`;
  };
  const showRest = (data) => {
    if (data.runs) document.getElementById("summary-body").replaceChildren(...summaryView(data));
    if (data.latency_table) latencyTable(data.latency_table);
    if (data.conversations) document.getElementById("conversation").replaceChildren(...conversationView(data.conversations));
    if (data.waterfall || data.latency) charts({ waterfall: data.waterfall || [], latency: data.latency || [] });
    if (data.folded === false) {
      const n = data.frames_total.toLocaleString();
      document.getElementById("conversation").replaceChildren(el("p", { class: "dim",
        text: `${n} frames: too many to fold into a conversation on each view. The frames are all here, a page at a time; ` +
          `\`acp-proxy show\` prints the whole conversation.` }));
      document.getElementById("waterfall").textContent = "Not drawn for a run this long.";
    }
  };
  const startVirtual = async (toEnd) => {
    if (virtual) virtual.stop();
    const mine = ++generation;
    tbody.replaceChildren();
    const filtered = input.value.trim();
    const v = virtualTimeline(base, filtered, (n) => {
      framesTotal = Math.max(framesTotal, n);
      document.getElementById("frame-count").textContent = filtered
        ? `(${n.toLocaleString()} of ${framesTotal.toLocaleString()})` : `(${n.toLocaleString()} frames)`;
    });
    virtual = v;
    const data = await v.start();
    if (mine !== generation) return;
    if (toEnd) v.end();
    showError(data || {});
    document.getElementById("timeline-more").classList.add("hidden");
  };
  const load = async () => {
    // The cheap parts first: they say how long the selection is, and so how to show it.
    const head = await api(query({ parts: "summary,latency" }));
    if (!head.ok) {
      document.getElementById("conversation").replaceChildren(el("p", { class: "error", text: head.error }));
      return;
    }
    multiRun = (head.run_ids || []).length > 1;
    framesTotal = head.frames_total;
    folded = head.folded;
    setLive(head.live);
    showRest(head);
    const wanted = location.hash.match(/^#frame=(\d+:\d+)$/);
    if (framesTotal > VIRTUAL_AT) {
      // A run being recorded, followed live, opens at its newest frames; any other at its first.
      await startVirtual(head.live && document.getElementById("follow").checked);
      // The conversation and the turn waterfall are folded from the whole run (left out above
      // FOLD_LIMIT frames); the latency samples are SQL.
      api(query({ parts: "conversation,charts" })).then((data) => { if (data.ok) showRest(data); });
    } else {
      const data = await api(query({}));
      if (!data.ok) return;
      showRest(data);
      showTimeline(data, false);
    }
    if (wanted) selectFrame(wanted[1], true);
  };
  // The conversation is folded again from the whole run when frames come: at most one fold
  // under way, and the next not before five times the last one took (a run that streams fast
  // must not keep the server folding); the latency table and summary are SQL, cheap.
  let foldCost = 0;
  let nextFold = 0;
  const refreshRest = () => {
    if (refreshTimer) return;
    const wait = Math.max(250, nextFold - performance.now());
    refreshTimer = setTimeout(async () => {
      const started = performance.now();
      const data = await api(`${base}.json?parts=${folded ? "summary,conversation,charts,latency" : "summary,charts,latency"}`);
      foldCost = performance.now() - started;
      nextFold = performance.now() + 5 * foldCost;
      refreshTimer = null;
      if (data.ok) { folded = data.folded; framesTotal = data.frames_total; showRest(data); }
    }, wait);
  };
  document.getElementById("filter-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const params = new URLSearchParams(location.search);
    if (input.value.trim()) params.set("filter", input.value.trim()); else params.delete("filter");
    history.replaceState(null, "", `${location.pathname}${params.size ? "?" + params : ""}`);
    if (virtual) { await startVirtual(false); return; }
    const mine = ++generation;
    const data = await api(query({ parts: "timeline" }));
    if (data.ok && mine === generation) showTimeline(data, false);
  });
  // Keys: j/k move through the frames, Enter opens the one under the cursor, / the filter.
  const tableMove = (step) => {
    const rows = [...tbody.querySelectorAll("tr[data-frame]")].filter((r) => !r.classList.contains("hidden"));
    if (!rows.length) return null;
    const at = rows.findIndex((r) => r.classList.contains("current"));
    const next = rows[Math.max(0, Math.min(rows.length - 1, at < 0 ? (step > 0 ? 0 : rows.length - 1) : at + step))];
    for (const r of rows) r.classList.remove("current");
    next.classList.add("current");
    next.scrollIntoView({ block: "nearest" });
    return next.dataset.frame;
  };
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const typing = event.target.closest && event.target.closest("input, textarea, select");
    if (typing) { if (event.key === "Escape") event.target.blur(); return; }
    if (event.key === "/") { event.preventDefault(); input.focus(); input.select(); return; }
    if (event.key === "j" || event.key === "k") {
      event.preventDefault();
      const step = event.key === "j" ? 1 : -1;
      if (virtual) virtual.move(step); else tableMove(step);
      return;
    }
    if (event.key === "Enter") {
      const id = virtual ? virtual.current() : (tbody.querySelector("tr.current") || {}).dataset?.frame;
      if (id) { event.preventDefault(); selectFrame(id, false); }
    }
  });
  load().then(() => poll(async () => {
    const mine = generation;
    if (virtual) {
      const data = await virtual.news();
      if (!data || !data.ok || mine !== generation) return;
      setLive(data.live);
      if (data.total) refreshRest();
      return;
    }
    const data = await api(query({ parts: "summary,timeline", after: cursor || "0:0" }));
    if (!data.ok || mine !== generation) return;
    setLive(data.live);
    if ((data.timeline || []).length) {
      showTimeline(data, true);
      refreshRest();
      // A live run that outgrows a whole table goes on as a virtual list, at its end.
      if (tbody.querySelectorAll("tr[data-frame]").length > VIRTUAL_AT) {
        framesTotal = data.frames_total;
        await startVirtual(true);
      }
    } else if (data.runs) {
      document.getElementById("summary-body").replaceChildren(...summaryView(data));
    }
  }));
}

// -- two recordings -----------------------------------------------------------------------------

async function initDiff() {
  const { left, right } = document.body.dataset;
  const data = await api(`/diff/${encodeURIComponent(left)}/${encodeURIComponent(right)}.json`);
  const target = document.getElementById("diff-body");
  if (!data.ok) { target.replaceChildren(el("p", { class: "error", text: data.error })); return; }
  const differing = data.turns.filter((t) => t.differs.length).length;
  const outside = data.connection.differs.length ? " and outside the turns" : "";
  document.getElementById("diff-verdict").replaceChildren(data.differ
    ? badge(`${differing} of ${data.turns.length} turn(s) differ${outside}`, "crashed")
    : badge(`no difference in ${data.turns.length} turn(s) or around them`, "ended"));
  const cell = (v) => v === null || v === undefined ? "-" : Array.isArray(v) ? (v.join("\n") || "-") : typeof v === "object" ? JSON.stringify(v) : String(v) || "-";
  const out = [];
  // As `acp-proxy diff`: what happened around the turns first, then each turn.
  const section = (title, differs, keys, left, right, missing) => {
    out.push(el("h2", {}, `${title} `, differs.length ? badge(`differs: ${differs.join(", ")}`, "crashed") : badge("same", "ended")));
    const table = el("table", { class: "grid diff" },
      el("thead", {}, el("tr", {}, el("th", {}), el("th", { text: data.left.describe }), el("th", { text: data.right.describe }))));
    const tb = el("tbody");
    for (const key of keys) {
      const marked = differs.includes(key) || differs.includes("missing");
      tb.append(el("tr", { class: marked ? "differs" : "", dataset: { key } },
        el("td", { class: "key", text: key }),
        el("td", { text: left ? cell(left[key]) : missing }),
        el("td", { text: right ? cell(right[key]) : missing })));
    }
    table.append(tb);
    out.push(table);
  };
  section("outside the turns", data.connection.differs, data.connection_keys, data.connection.left, data.connection.right, "-");
  for (const t of data.turns) {
    section(`session ${t.session} · turn ${t.turn}`, t.differs, [...data.compared, ...data.shown], t.left, t.right, "(no such turn)");
  }
  if (!data.turns.length) out.push(el("p", { class: "dim", text: "No prompt turns on either side." }));
  target.replaceChildren(...out);
}

const PAGES = { index: initIndex, conversation: initConversation, diff: initDiff };
(PAGES[document.body.dataset.page] || (() => {}))();
