// acp-proxy inspector: the front page (runs and sessions, a page at a time).
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";

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
    set(c[7], r.turns ?? ""); // a proxy chain's inner turns included (read.hops)
    set(c[8], r.faults || "");
    set(c[9], r.findings || "");
    set(c[10], r.exit);
  };
  const runRow = (r) => {
    const tr = el("tr", { dataset: { run: r.id } },
      el("td", {}, el("input", { type: "checkbox", "aria-label": `compare run ${r.id}`,
        onchange: (e) => { e.target.checked ? ticked.add(r.id) : ticked.delete(r.id); updateDiff(); } })),
      el("td", {}, el("a", { href: `/runs/${r.id}`, text: `run ${r.id}` })),
      el("td"), el("td"), el("td"), el("td", { class: "mono" }), el("td"), el("td"), el("td"), el("td"), el("td"));
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
          // A session only a proxy chain carries is shown with its run (the hop's conversation is there).
          el("td", {}, el("a", { class: "mono", href: s.hop ? `/runs/${s.runs[0]}` : `/sessions/${encodeURIComponent(s.session_id)}`, text: s.session_id })),
          el("td"), el("td", { class: "mono" }), el("td"), el("td"), el("td"));
        sessionRows.set(s.row, tr);
      }
      if (paging) { if (!tr.parentNode) sessionsBody.append(tr); }
      else if (sessionsBody.children[i] !== tr) sessionsBody.insertBefore(tr, sessionsBody.children[i] || null);
      tr.dataset.key = s.key; // its place in the list: "older sessions" asks after the last one
      const c = tr.children;
      set(c[1], s.title || "");
      set(c[2], s.cwd || "");
      const hop = s.hop ? ` (hop ${s.hop})` : "";
      set(c[3], s.runs.join(",") + hop, () => el("span", {}, ...s.runs.map((id) => el("a", { href: `/runs/${id}`, text: `${id} ` })), hop));
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

