// acp-proxy inspector: marks on frames — m marks or unmarks the frame under the cursor (M asks
// for a note), written as `acp-proxy mark` writes it, by a POST carrying the CSRF tokens.
// Text only ever reaches the page through textContent.
"use strict";

FEATURES.push({ page: "conversation", start() {
  const rowOf = (id) => {
    const tr = document.querySelector(`#timeline tr[data-frame="${CSS.escape(id)}"]:not(.chunks)`);
    if (tr && tr._row) return tr._row;
    return virtual ? virtual.rows().find((r) => r.id === id) : null;
  };
  const target = () => {
    const current = virtual ? virtual.current() : (document.querySelector("#timeline tbody tr.current") || {}).dataset?.frame;
    return current || selected;
  };
  const toggle = async (id, withNote) => {
    const row = rowOf(id);
    let note = null;
    if (withNote) {
      note = window.prompt(`A note on frame ${id}`, (row && row.mark) || "");
      if (note === null) return;
    }
    const marked = withNote ? true : !(row && row.marked);
    const [run, seq] = id.split(":");
    const data = await postJSON(`/runs/${run}/frames/${seq}/mark`, { marked, note });
    const status = document.getElementById("mark-status");
    if (status) status.remove();
    if (!data.ok) {
      document.getElementById("timeline-panel").prepend(el("p", { class: "error", id: "mark-status", text: data.error }));
      return;
    }
    patchFrame(id, { marked, mark: marked ? (note ?? (row && row.mark) ?? "") : null });
  };
  // For the mouse: a button beside the frame's detail does what m does.
  const button = el("button", { type: "button", id: "detail-mark", title: "mark or unmark this frame (m)", text: "★ mark / unmark",
    onclick: () => { if (selected) toggle(selected, false); } });
  document.getElementById("detail-title").after(button);
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest("input, textarea, select")) return;
    if (event.key !== "m" && event.key !== "M") return;
    const id = target();
    if (!id) return;
    event.preventDefault();
    toggle(id, event.key === "M");
  });
} });
