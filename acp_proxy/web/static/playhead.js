// acp-proxy inspector: the playhead — a run's conversation rebuilt by the server up to one frame
// (/runs/ID/playhead.json?seq=N, the read layer's fold), stepped frame by frame with buttons or
// [ and ]. The browser keeps no model of the conversation: each step asks the server again, and
// the server sends what a page holds (the last entries, a long message's tail, how much is left
// out).
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";

FEATURES.push({ page: "conversation", start() {
  if (document.body.dataset.kind !== "run") return; // a session spans runs: step through a run
  const run = document.body.dataset.ident;
  const box = document.getElementById("playhead");
  const controls = document.getElementById("ph-controls");
  const enter = document.getElementById("ph-enter");
  const where = document.getElementById("ph-where");
  const error = document.getElementById("ph-error");
  let at = null; // the last answer: seq, previous, next, first, last, position, total
  let asking = 0;
  let selecting = null; // the pending selection of the frame at the playhead
  const SELECT_AFTER_MS = 250;
  box.classList.remove("hidden");
  const show = async (seq) => {
    const mine = ++asking;
    const data = await api(`/runs/${run}/playhead.json${seq === null || seq === undefined ? "" : "?seq=" + seq}`);
    if (mine !== asking) return;
    error.classList.toggle("hidden", data.ok);
    error.textContent = data.ok ? "" : data.error;
    if (!data.ok) return;
    if (data.folding) {
      // A first visit far into a long run: the server folds a slice at a time and says how far
      // it got; ask again (a newer step supersedes this one). Later steps cost a checkpoint's.
      where.textContent = `folding the run up to #${data.seq}: ${data.position.toLocaleString()} of ${data.total.toLocaleString()} frames…`;
      controls.classList.remove("hidden");
      enter.classList.add("hidden");
      return show(seq);
    }
    at = data;
    pageState.playhead = true;
    document.body.dataset.playhead = data.seq === null ? "start" : String(data.seq);
    controls.classList.remove("hidden");
    enter.classList.add("hidden");
    const f = data.frame;
    const what = f ? `${f.dir} · ${f.kind}${f.method ? " · " + f.method : ""}${f.update_kind ? " · " + f.update_kind : ""}` : "before the first frame";
    where.textContent = `frame ${data.position} of ${data.total}${data.seq === null ? "" : " · #" + data.seq} · ${what}`;
    document.getElementById("ph-prev").disabled = data.seq === null;
    document.getElementById("ph-first").disabled = data.seq === null;
    document.getElementById("ph-next").disabled = data.next === null;
    document.getElementById("ph-last").disabled = data.next === null;
    const target = document.getElementById("conversation");
    target.replaceChildren(...(data.conversations.length ? conversationView(data.conversations)
      : [el("p", { class: "dim", text: "Nothing said yet at this point." })]));
    // The frame is selected in the list (its detail opened, the list moved to it) once the steps
    // pause: each selection asks the server for the list around the frame and its detail, and
    // while a key is held down those would queue ahead of the next step.
    clearTimeout(selecting);
    if (data.seq !== null) { const id = `${run}:${data.seq}`; selecting = setTimeout(() => selectFrame(id, true), SELECT_AFTER_MS); }
  };
  const leave = () => {
    clearTimeout(selecting);
    pageState.playhead = false;
    delete document.body.dataset.playhead;
    at = null;
    controls.classList.add("hidden");
    enter.classList.remove("hidden");
    if (pageState.conversation) document.getElementById("conversation").replaceChildren(...conversationView(pageState.conversation));
    else if (pageState.unfolded) document.getElementById("conversation").replaceChildren(el("p", { class: "dim", text: pageState.unfolded }));
  };
  const here = () => {
    const m = (selected || "").match(/^(\d+):(\d+)$/);
    return m && m[1] === run ? Number(m[2]) : null;
  };
  // Steps queue up: a key held down steps once per frame, each from where the last one landed.
  let queue = Promise.resolve();
  const stepNow = (dir) => {
    if (!at) return show(here() ?? null);
    if (dir > 0 && at.next !== null) return show(at.next);
    if (dir < 0) return at.previous === null ? show(null) : show(at.previous);
  };
  const step = (dir) => { queue = queue.then(() => stepNow(dir)); return queue; };
  enter.addEventListener("click", () => show(here()));
  document.getElementById("ph-first").addEventListener("click", () => show(null));
  document.getElementById("ph-prev").addEventListener("click", () => step(-1));
  document.getElementById("ph-next").addEventListener("click", () => step(1));
  document.getElementById("ph-last").addEventListener("click", () => show(at && at.last !== null ? at.last : 999999999999));
  document.getElementById("ph-leave").addEventListener("click", leave);
  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest("input, textarea, select")) return;
    if (event.key === "]" || event.key === "[") { event.preventDefault(); step(event.key === "]" ? 1 : -1); }
  });
} });
