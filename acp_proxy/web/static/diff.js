// acp-proxy inspector: two recordings side by side.
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";

// -- two recordings -----------------------------------------------------------------------------

async function initDiff() {
  const { left, right } = document.body.dataset;
  pickRuns(left, right);
  if (/^\d+$/.test(left) && /^\d+$/.test(right)) frameDiff(left, right);
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


// Both sides are chosen on the page: every run, newest first (a thousand at most).
async function pickRuns(left, right) {
  const data = await api("/search/runs.json?limit=1000");
  if (!data.ok) return;
  for (const [id, chosen] of [["pick-left", left], ["pick-right", right]]) {
    const select = document.getElementById(id);
    const options = data.runs.map((r) => el("option", { value: r.id, text: `run ${r.id} · ${when(r.started)} · ${r.agent || "?"} · ${r.status}` }));
    if (!data.runs.some((r) => String(r.id) === chosen)) options.unshift(el("option", { value: chosen, text: chosen }));
    select.replaceChildren(...options);
    select.value = chosen;
  }
  document.getElementById("diff-pick").addEventListener("submit", (event) => {
    event.preventDefault();
    const l = document.getElementById("pick-left").value, r = document.getElementById("pick-right").value;
    location.href = `/diff/${encodeURIComponent(l)}/${encodeURIComponent(r)}`;
  });
}

async function frameDiff(left, right) {
  const data = await api(`/diff/${left}/${right}/frames.json`);
  if (!data.ok) return;
  document.getElementById("frame-diff-section").classList.remove("hidden");
  const c = data.counts;
  document.getElementById("frame-diff-counts").textContent =
    `(${c.changed} changed · ${c.only_left} only left · ${c.only_right} only right · ${c.same} the same${data.cut ? ` · first ${data.limit} frames a side` : ""})`;
  const tbody = document.querySelector("#frame-diff tbody");
  const label = { same: "same", changed: "changed", only_left: "only left", only_right: "only right" };
  const draw = () => {
    const showSame = document.getElementById("frame-diff-same").checked;
    const rows = [];
    for (const r of data.rows) {
      if (r.op === "same" && !showSame) continue;
      const side = r.left || r.right;
      const what = side.update_kind ? `${side.method} · ${side.update_kind}` : side.method || side.kind;
      const link = (run, s) => s ? el("a", { href: `/runs/${run}#frame=${run}:${s.seq}`, text: s.seq }) : "-";
      const first = r.changes[0];
      const cells = (ch) => ch ? [el("td", { class: "path", text: ch.path.join(".") || "(whole frame)" }), el("td", { class: "mono", text: ch.left }), el("td", { class: "mono", text: ch.right })] : [el("td"), el("td"), el("td")];
      rows.push(el("tr", { class: r.op, dataset: { op: r.op, left: r.left ? r.left.seq : "", right: r.right ? r.right.seq : "" } },
        el("td", { class: "mono" }, link(data.left, r.left)), el("td", { class: "mono" }, link(data.right, r.right)),
        laneCell(side.dir), el("td", { text: what || "" }), el("td", { class: "op", text: label[r.op] }), ...cells(first)));
      for (const ch of r.changes.slice(1)) {
        rows.push(el("tr", { class: `${r.op} more` }, el("td"), el("td"), el("td"), el("td"), el("td"), ...cells(ch)));
      }
    }
    tbody.replaceChildren(...rows);
  };
  document.getElementById("frame-diff-same").addEventListener("change", draw);
  draw();
}
