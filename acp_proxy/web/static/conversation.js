// acp-proxy inspector: the page of a run or a session (loading, live follow, filter, keys).
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";


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
    if (data.conversations) pageState.conversation = data.conversations;
    if (data.conversations && !pageState.playhead) document.getElementById("conversation").replaceChildren(...conversationView(data.conversations));
    if (data.waterfall || data.latency) charts({ waterfall: data.waterfall || [], latency: data.latency || [] });
    if (data.folded === false && !pageState.playhead) {
      const n = data.frames_total.toLocaleString();
      pageState.unfolded = `${n} frames: too many to fold into a conversation on each view. The frames are all here, a page at a time; ` +
        `the playhead (Step through, ⏭) rebuilds the conversation at any frame; \`acp-proxy show\` prints the whole of it.`;
      document.getElementById("conversation").replaceChildren(el("p", { class: "dim", text: pageState.unfolded }));
      if (!data.waterfall) document.getElementById("waterfall").textContent = "Not drawn for a run this long.";
    }
    if (data.waterfall_left_out) {
      // Past the fold limit the turns come from the recorder's tables: said, not silently fewer lanes.
      const note = document.getElementById("waterfall-note");
      note.textContent = `${data.frames_total.toLocaleString()} frames: the turns, their marks and permission waits come from the ` +
        `recorder's tables; ${data.waterfall_left_out} are drawn for runs the page folds.`;
      note.hidden = false;
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
    Object.assign(pageState, { base, runIds: head.run_ids || [], runs: head.runs || [], live: head.live });
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
  pageState.ready = load();
  pageState.ready.then(() => poll(async () => {
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
