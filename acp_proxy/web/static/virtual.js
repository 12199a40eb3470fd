// acp-proxy inspector: the virtual frame list, for selections too long to draw whole.
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";


// A selection longer than this is shown as a virtual list: only the rows in view are in the
// page, fetched a page at a time from /runs/ID/frames.json; shorter ones are drawn whole, with
// chunks of one message collapsed into one row. In the virtual list too ("collapse chunks", on
// by default): consecutive chunks of one message within a page are one row that expands to its
// members. Groups are the server's, per page (a row's `group`, `group_cont` on a page's first
// frame when the group began on the page before): no index of the whole run, which would cost
// about a second on a million frames. So the list counts display rows per page: a page not
// fetched yet is estimated from the ratio of rows to frames of the pages seen, and when a page
// above the view turns out shorter or longer, the view is kept where it was.
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
  const counts = new Map(); // page number -> display rows, kept for every page seen (small)
  const entries = new Map(); // page number -> its display entries (a cache of `layout`)
  const expanded = new Set(); // ids of the groups shown open
  const pending = new Set();
  const inView = new Set(); // the pages the rows drawn last come from
  let collapse = true; // each page opens collapsed (not remembered: a page is what its address says)
  let total = 0;
  let cursor = null;
  let current = -1; // the display index of the highlighted row (j/k)
  let currentId = null;
  let drawn = "";
  let dead = false;
  table.classList.add("virtual");
  scroll.classList.add("virtual");
  const box = el("input", { type: "checkbox", id: "collapse-chunks" });
  box.checked = collapse;
  const toggle = el("label", { class: "collapse-chunks", title: "Show consecutive chunks of one message as one row" }, box, " collapse chunks");
  (scroll.closest(".frames-split") || scroll).before(toggle); // above the list and its detail, not in their grid
  const url = (params) => {
    const q = new URLSearchParams(params);
    if (filterText) q.set("filter", filterText);
    return `${base}/frames.json?${q}`;
  };
  const framesIn = (p) => Math.max(0, Math.min(PAGE, total - p * PAGE));
  const pageCount = () => Math.ceil(total / PAGE);
  // A page's display entries: a frame, a group's head (its members, the group's frames of this
  // page), or an open group's member.
  const layout = (p) => {
    let out = entries.get(p);
    if (out) return out;
    out = [];
    const rows = pages.get(p) || [];
    let head = null;
    for (const r of rows) {
      if (collapse && r.group) {
        if (head && head.id === r.group) { head.rows.push(r); if (expanded.has(head.id)) out.push({ row: r, member: head }); continue; }
        head = { id: r.group, rows: [r], cont: r.id === rows[0].id && !!r.group_cont };
        out.push({ row: r, group: head });
        if (expanded.has(head.id)) out.push({ row: r, member: head });
        continue;
      }
      head = null;
      out.push({ row: r });
    }
    entries.set(p, out);
    return out;
  };
  const forget = (p) => { entries.delete(p); };
  // A page's rows with its groups closed: what sizes the pages not fetched (and a page dropped).
  // An opened group's members are not counted, or one group opened in a collapsed million-frame
  // list (the playhead's frame revealed) would size every other page a hundredfold, and the
  // view, moved by that, would fetch pages far from the frame.
  const closed = (p) => layout(p).reduce((n, e) => n + (e.member ? 0 : 1), 0);
  const ratio = () => {
    let shown = 0, frames = 0;
    for (const [p, n] of counts) { shown += n; frames += framesIn(p) || PAGE; }
    return frames ? shown / frames : 1;
  };
  // Where each page starts, in display rows (a page not fetched: estimated).
  const starts = () => {
    const n = pageCount();
    const out = new Array(n + 1);
    const r = collapse ? ratio() : 1;
    out[0] = 0;
    for (let p = 0; p < n; p++) {
      const known = pages.has(p) ? layout(p).length : counts.get(p);
      out[p + 1] = out[p] + (known !== undefined ? known : Math.max(1, Math.round(framesIn(p) * r)));
    }
    return out;
  };
  const pageOf = (at, i) => { // the page holding display row i (binary search)
    let lo = 0, hi = at.length - 2;
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (at[mid] <= i) lo = mid; else hi = mid - 1; }
    return lo;
  };
  const entryAt = (at, i) => {
    if (i < 0 || i >= at[at.length - 1]) return undefined;
    const p = pageOf(at, i);
    return pages.has(p) ? layout(p)[i - at[p]] : undefined;
  };
  // The display rows change (a page fetched: its estimate replaced, and with it the ratio that
  // sizes every page not fetched yet; a group opened): the row at the top of the view and the
  // cursor row stay where they were, each kept by its page's start.
  const hold = () => {
    const at = starts();
    const top = Math.floor(scroll.scrollTop / ROW_H);
    const p = pageOf(at, top), c = current >= 0 ? pageOf(at, current) : -1;
    const end = scroll.scrollTop > 0 && atBottom(); // at the end (following it): stays there
    return { p, off: scroll.scrollTop - at[p] * ROW_H, c, coff: current - (c >= 0 ? at[c] : 0), end };
  };
  const keep = (held) => {
    for (const [q, page] of pages) if (page.length) counts.set(q, closed(q));
    draw(true); // first: the list's new height bounds the scroll
    const at = starts();
    const size = (q) => (at[q + 1] - at[q]) * ROW_H;
    if (held.end) scroll.scrollTop = scroll.scrollHeight;
    else scroll.scrollTop = at[held.p] * ROW_H + Math.min(held.off, Math.max(0, size(held.p) - 1));
    if (held.c >= 0) current = at[held.c] + Math.min(held.coff, Math.max(0, at[held.c + 1] - at[held.c] - 1));
    draw(true);
  };
  const fetchPage = async (p) => {
    if (pending.has(p)) return;
    pending.add(p);
    try {
      const data = await api(url({ offset: p * PAGE, limit: PAGE }));
      if (dead || !data.ok) return;
      const held = hold();
      pages.set(p, data.rows);
      forget(p);
      // Far pages go: memory holds what is near the view, whatever the run's length.
      // Never a page in view: with chunks collapsed, one view can span many pages.
      if (pages.size > KEEP_PAGES + inView.size) {
        const here = pageOf(starts(), Math.floor(scroll.scrollTop / ROW_H));
        const far = [...pages.keys()].filter((q) => !inView.has(q)).sort((a, b) => Math.abs(b - here) - Math.abs(a - here));
        for (const q of far.slice(0, pages.size - KEEP_PAGES - inView.size)) { pages.delete(q); forget(q); }
      }
      keep(held);
    } finally { pending.delete(p); }
  };
  const spacer = (height) => el("tr", { class: "spacer", "aria-hidden": "true" }, el("td", { colspan: 9, style: `height:${height}px;padding:0;border:0` }));
  const groupRow = (g, i) => {
    const first = g.rows[0];
    const open = expanded.has(g.id);
    const button = el("button", { class: "toggle", type: "button", "aria-expanded": String(open), text: open ? "▾" : "▸" });
    const text = g.rows.map((r) => r.text || "").join("");
    const label = `${g.cont ? "… " : ""}${chunkLabel(g.rows.length)}${g.cont ? " more" : ""}`;
    const tr = el("tr", { class: "chunks", dataset: { group: g.id, frame: first.id, index: i } },
      el("td", { class: "mono" }, button, " ", multiRun ? first.id : first.seq),
      el("td", { class: "mono", text: clock(first.ts) }),
      laneCell(first.dir),
      el("td", { text: label }),
      el("td", { text: `${first.method} · ${first.update_kind}` }),
      el("td", { class: "mono", text: first.item_id || "" }),
      el("td", {}),
      marksCell({ marked: g.rows.some((r) => r.marked), flags: [...new Set(g.rows.flatMap((r) => r.flags || []))],
        faults: g.rows.flatMap((r) => r.faults || []), findings: g.rows.flatMap((r) => r.findings || []),
        checks: g.rows.flatMap((r) => r.checks || []) }),
      el("td", { class: "preview", text: short(text, 2000), title: short(text, 2000) }),
    );
    button.addEventListener("click", (event) => { event.stopPropagation(); flip(g.id); });
    tr.addEventListener("click", (event) => { if (event.target !== button) selectFrame(first.id, false); });
    if (g.rows.some((r) => r.fresh)) tr.classList.add("new");
    return tr;
  };
  const flip = (id) => {
    const p = [...pages.keys()].find((q) => layout(q).some((e) => e.group && e.group.id === id));
    if (expanded.has(id)) expanded.delete(id); else expanded.add(id);
    if (p === undefined) return;
    const held = hold();
    forget(p);
    keep(held);
  };
  const draw = (force) => {
    const at = starts();
    const shown = at[at.length - 1];
    const view = Math.ceil(scroll.clientHeight / ROW_H) + 1;
    const first = Math.max(0, Math.min(Math.floor(scroll.scrollTop / ROW_H), Math.max(0, shown - view)) - OVERSCAN);
    const last = Math.min(shown, first + view + 2 * OVERSCAN);
    const key = `${first}:${last}:${shown}:${total}`;
    if (!force && key === drawn) return;
    drawn = key;
    const rows = [spacer(first * ROW_H)];
    const wanted = new Set();
    inView.clear();
    for (let i = first; i < last; i++) {
      if (i === first || i === at[pageOf(at, i)]) inView.add(pageOf(at, i));
      const e = entryAt(at, i);
      if (e === undefined) {
        wanted.add(pageOf(at, i));
        rows.push(el("tr", { class: "loading", dataset: { index: i } }, el("td", { colspan: 9, class: "dim", text: "…" })));
        continue;
      }
      const tr = e.group ? groupRow(e.group, i) : frameRow(e.row, e.member ? "child" : "");
      tr.dataset.index = i;
      if (e.member) tr.dataset.parent = e.member.id;
      if (!e.group && e.row.id === selected) tr.classList.add("selected");
      if (e.group && e.group.rows.some((r) => r.id === selected) && !expanded.has(e.group.id)) tr.classList.add("selected");
      if (i === current) tr.classList.add("current");
      rows.push(tr);
    }
    rows.push(spacer(Math.max(0, shown - last) * ROW_H));
    tbody.replaceChildren(...rows);
    for (const p of wanted) fetchPage(p);
  };
  box.addEventListener("change", () => {
    collapse = box.checked;
    entries.clear();
    counts.clear();
    current = -1;
    draw(true);
  });
  let scheduled = false;
  scroll.addEventListener("scroll", () => {
    if (scheduled) return;
    scheduled = true;
    requestAnimationFrame(() => { scheduled = false; draw(false); });
  });
  const atBottom = () => scroll.scrollTop + scroll.clientHeight >= scroll.scrollHeight - 2 * ROW_H;
  const me = {
    async start() {
      const data = await api(url({ offset: 0, limit: PAGE }));
      if (!data.ok) return data;
      if (data.filter_error) return data;
      total = data.total;
      cursor = data.last;
      pages.set(0, data.rows);
      counts.set(0, closed(0));
      onCount(total);
      draw(true);
      return data;
    },
    // Live: only the frames recorded after the page's cursor are asked for. A chunk that follows
    // the last group joins it (its page's entries are laid out again), in place.
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
        if (page && page.length === i % PAGE) {
          // The page's group marks: a chunk continues the group of the frame before it.
          const prev = page.length ? page[page.length - 1] : (pages.get(p - 1) || []).slice(-1)[0];
          if (r.group) {
            const same = prev && prev.chunk_key && prev.chunk_key === r.chunk_key;
            if (same && page.length) r.group = prev.group;
            if (!page.length) r.group_cont = !!same;
          }
          page.push(r); r.fresh = true; forget(p);
        }
      }
      total += data.total;
      // The frames not sent yet (more than a page) are fetched by offset when they come into view.
      if (data.rows.length === data.total) cursor = data.cursor;
      else { cursor = null; const tail = await api(url({ offset: Math.max(0, total - 1), limit: 1 })); if (tail.ok && tail.rows.length) cursor = tail.rows[0].id; }
      for (const p of pages.keys()) if (p >= pageCount() - 2) counts.set(p, closed(p));
      onCount(total);
      if (follow) scroll.scrollTop = scroll.scrollHeight;
      draw(true);
      if (follow) scroll.scrollTop = scroll.scrollHeight;
      return data;
    },
    move(step) {
      if (!total) return null;
      let at = starts();
      const shown = at[at.length - 1];
      current = Math.max(0, Math.min(shown - 1, (current < 0 ? Math.floor(scroll.scrollTop / ROW_H) - (step > 0 ? 1 : 0) : current) + step));
      const top = current * ROW_H;
      if (top < scroll.scrollTop) scroll.scrollTop = top;
      else if (top + 2 * ROW_H > scroll.scrollTop + scroll.clientHeight) scroll.scrollTop = top + 2 * ROW_H - scroll.clientHeight;
      at = starts();
      const e = entryAt(at, current);
      currentId = e ? (e.group ? e.group.rows[0].id : e.row.id) : null;
      draw(true);
      return currentId;
    },
    current() { return currentId; },
    end() { scroll.scrollTop = scroll.scrollHeight; draw(true); },
    // Bring a frame into view (a link to it, a click in the conversation): its index is asked
    // for, its page fetched, and the group that holds it opened.
    async reveal(id) {
      const data = await api(url({ limit: 0, at: id }));
      if (dead || !data.ok || data.position === null || data.position === undefined) return;
      const p = Math.floor(data.position / PAGE);
      if (!pages.has(p)) {
        const got = await api(url({ offset: p * PAGE, limit: PAGE }));
        if (dead || !got.ok) return;
        pages.set(p, got.rows);
        forget(p);
      }
      const hit = (pages.get(p) || []).find((r) => r.id === id);
      // A member of a closed group: the group is opened, so that the frame has a row of its own.
      if (collapse && hit && hit.group && hit.group !== hit.id && !expanded.has(hit.group)) { expanded.add(hit.group); forget(p); }
      counts.set(p, closed(p));
      const at = starts();
      let found = 0;
      layout(p).forEach((e, i) => { if (e.row.id === id) found = i; }); // an open group's member row, not its head
      current = at[p] + found;
      currentId = id;
      draw(true); // first: the list's height, which an opened group changes, bounds the scroll
      scroll.scrollTop = Math.max(0, current * ROW_H - scroll.clientHeight / 2);
      draw(true);
    },
    selected() { draw(true); },
    // A row's data changed (a mark, computed checks): kept in its page, drawn again.
    patch(id, fields) {
      for (const [p, page] of pages) for (const r of page) if (r.id === id) { Object.assign(r, fields); forget(p); }
      draw(true);
    },
    rows() { return [...pages.values()].flat(); },
    stop() { dead = true; toggle.remove(); table.classList.remove("virtual"); scroll.classList.remove("virtual"); },
    get total() { return total; },
  };
  box.addEventListener("change", () => { if (currentId || selected) me.reveal(currentId || selected); });
  return me;
}
