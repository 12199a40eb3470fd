// acp-proxy inspector: search over every run — runs by agent, client, status and start date,
// and frames by the filter language, each result a link to its run and frame.
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";

function initSearch() {
  const runsBody = document.querySelector("#search-runs tbody");
  const framesBody = document.querySelector("#search-frames tbody");
  const olderRuns = document.getElementById("search-runs-older");
  const moreFrames = document.getElementById("search-frames-more");
  const params = new URLSearchParams(location.search);
  let runQuery = null;
  let oldest = null;
  let frameOffset = 0;
  const form = document.getElementById("runs-form");
  for (const name of ["agent", "client", "status", "since", "until"]) {
    if (params.get(name)) form.elements[name].value = params.get(name);
  }
  if (params.get("filter")) document.getElementById("search-filter").value = params.get("filter");
  const remember = () => {
    const q = new URLSearchParams(runQuery || "");
    const filter = document.getElementById("search-filter").value.trim();
    if (filter) q.set("filter", filter);
    history.replaceState(null, "", `/search${q.size ? "?" + q : ""}`);
  };
  const runRow = (r) => el("tr", { dataset: { run: r.id } },
    el("td", {}, el("a", { href: `/runs/${r.id}`, text: r.id })),
    el("td", { text: when(r.started) }),
    el("td", {}, badge(r.status, r.status)),
    el("td", { text: `${r.agent || "?"} ⇄ ${r.client || "?"}` }),
    el("td", { text: r.frames ?? "" }),
    el("td", { text: r.findings || "" }));
  const findRuns = async (more) => {
    const q = new URLSearchParams(runQuery);
    if (more && oldest !== null) q.set("before", oldest);
    const data = await api(`/search/runs.json?${q}`);
    const error = document.getElementById("runs-error");
    error.classList.toggle("hidden", data.ok);
    error.textContent = data.ok ? "" : data.error;
    if (!data.ok) return;
    if (!more) runsBody.replaceChildren();
    runsBody.append(...data.runs.map(runRow));
    if (data.runs.length) oldest = data.runs[data.runs.length - 1].id;
    olderRuns.classList.toggle("hidden", !data.more);
    document.getElementById("search-runs-count").textContent = `(${data.total.toLocaleString()} found)`;
    const fill = (id, names) => document.getElementById(id).replaceChildren(...names.map((n) => el("option", { value: n })));
    fill("search-agents", data.agents);
    fill("search-clients", data.clients);
    const status = document.getElementById("search-status");
    if (status.options.length === 1) {
      for (const s of data.statuses) status.append(el("option", { value: s, text: s }));
      if (params.get("status")) status.value = params.get("status");
    }
  };
  const frameRowOf = (r) => {
    const what = r.update_kind ? `${r.method} · ${r.update_kind}` : r.method || r.kind;
    return el("tr", { dataset: { frame: r.id } },
      el("td", { class: "mono" }, el("a", { href: `/runs/${r.run_id}#frame=${r.id}`, text: r.id })),
      el("td", { class: "mono", text: clock(r.ts) }),
      laneCell(r.dir),
      el("td", { text: r.kind }),
      el("td", { text: what || "" }),
      marksCell(r),
      el("td", { class: "preview", text: r.snippet ?? r.preview, title: r.preview }));
  };
  const findFrames = async (more) => {
    const filter = document.getElementById("search-filter").value.trim();
    const error = document.getElementById("frames-error");
    if (!filter) { framesBody.replaceChildren(); moreFrames.classList.add("hidden"); return; }
    if (!more) frameOffset = 0;
    const data = await api(`/search/frames.json?${new URLSearchParams({ filter, offset: frameOffset })}`);
    const problem = data.ok ? data.filter_error && `bad filter: ${data.filter_error}` : data.error;
    error.classList.toggle("hidden", !problem);
    error.textContent = problem || "";
    if (!data.ok) return;
    if (!more) framesBody.replaceChildren();
    framesBody.append(...data.rows.map(frameRowOf));
    frameOffset += data.rows.length;
    moreFrames.classList.toggle("hidden", !data.more);
    document.getElementById("search-frames-count").textContent = `(${(data.total || 0).toLocaleString()} found)`;
  };
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const q = new URLSearchParams();
    for (const name of ["agent", "client", "status", "since", "until"]) {
      const v = form.elements[name].value.trim();
      if (v) q.set(name, v);
    }
    runQuery = q.toString();
    oldest = null;
    remember();
    findRuns(false);
  });
  document.getElementById("frames-form").addEventListener("submit", (event) => {
    event.preventDefault();
    remember();
    findFrames(false);
  });
  olderRuns.addEventListener("click", () => findRuns(true));
  moreFrames.addEventListener("click", () => findFrames(true));
  runQuery = new URLSearchParams([...params].filter(([k]) => k !== "filter")).toString();
  findRuns(false);
  findFrames(false);
}
