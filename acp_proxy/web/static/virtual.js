// acp-proxy inspector: the virtual frame list, for selections too long to draw whole.
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";


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
    // A row's data changed (a mark, computed checks): kept in its page, drawn again.
    patch(id, fields) {
      for (const page of pages.values()) for (const r of page) if (r.id === id) Object.assign(r, fields);
      draw(true);
    },
    rows() { return [...pages.values()].flat(); },
    stop() { dead = true; table.classList.remove("virtual"); scroll.classList.remove("virtual"); },
    get total() { return total; },
  };
}

