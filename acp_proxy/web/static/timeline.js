// acp-proxy inspector: the frame timeline (rows, collapsed chunks, the detail panel and its JSON tree).
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";

function laneCell(dir) {
  const arrow = dir === "c2a" ? "client ──→" : dir === "a2c" ? "←── agent" : "stderr";
  return el("td", { class: `lane ${dir}` }, el("span", { class: "arrow", text: arrow }));
}

function marksCell(item) {
  const td = el("td", {});
  if (item.marked) td.append(el("span", { class: "badge marked", title: item.mark || "marked", text: item.mark ? `★ ${short(item.mark, 40)}` : "★" }), " ");
  for (const f of item.faults || []) td.append(badge(`fault: ${f.action}`, "fault"), " ");
  for (const f of item.findings || []) td.append(el("span", { class: `badge finding-${f.severity}`, title: f.message, text: f.rule }), " ");
  for (const f of item.checks || []) td.append(el("span", { class: `badge checked finding-${f.severity}`, title: `${f.message} (computed from the recording)`, text: f.rule }), " ");
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
  tr._row = row; // features (marks, checks) change a row's data and redraw its marks cell
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


// A frame's row data changed (a mark, computed checks): every row drawn for it shows it now.
function patchFrame(id, fields) {
  for (const tr of document.querySelectorAll(`#timeline tr[data-frame="${CSS.escape(id)}"]:not(.chunks)`)) {
    if (!tr._row) continue;
    Object.assign(tr._row, fields);
    tr.children[7].replaceWith(marksCell(tr._row));
  }
  if (virtual) virtual.patch(id, fields);
}
