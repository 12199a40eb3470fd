// acp-proxy inspector: two recordings side by side.
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";

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

