// acp-proxy inspector: every page is drawn here from its JSON twin (the same path + ".json").
// Text from a recording only ever reaches the page through textContent, never as HTML.
"use strict";

const POLL_MS = 400; // live pages ask for news this often: a new run or frame shows within 1 s

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// The connection badge: a page whose server has stopped says so instead of going stale.
function connected(ok, why) {
  const badgeNode = document.getElementById("connection");
  if (!badgeNode) return;
  badgeNode.classList.toggle("hidden", ok);
  badgeNode.textContent = ok ? "" : `server unreachable${why ? ": " + why : ""} — showing what was last received`;
  document.body.dataset.connection = ok ? "ok" : "lost";
}

async function api(url) {
  let response;
  try {
    response = await fetch(url, { credentials: "same-origin", headers: { accept: "application/json" } });
  } catch (err) {
    connected(false, "no answer");
    return { ok: false, error: "the acp-proxy ui server does not answer", offline: true };
  }
  connected(response.status < 500, `HTTP ${response.status}`);
  const data = await response.json().catch(() => ({ ok: false, error: `HTTP ${response.status}` }));
  if (!response.ok && data.ok !== false) data.ok = false;
  return data;
}

// Long text is shown collapsed, with a button that reveals the rest.
const COLLAPSE_AT = 2000;
function collapsible(tag, text, cls) {
  text = text || "";
  const node = el(tag, { class: cls || "" });
  if (text.length <= COLLAPSE_AT) { node.textContent = text; return node; }
  node.textContent = text.slice(0, COLLAPSE_AT) + "…";
  node.classList.add("collapsed");
  const more = el("button", { type: "button", class: "reveal", text: `show all ${text.length.toLocaleString()} characters` });
  more.addEventListener("click", (event) => {
    event.stopPropagation();
    node.textContent = text;
    node.classList.remove("collapsed");
    more.remove();
  });
  const wrap = el("div", { class: "collapsible" }, node, more);
  return wrap;
}

function badge(text, cls) {
  return el("span", { class: `badge ${cls || ""}`, text });
}

function clock(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleTimeString([], { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

function when(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  return d.toLocaleDateString() + " " + d.toLocaleTimeString([], { hour12: false });
}

function ms(value) {
  if (value === null || value === undefined) return "";
  return value < 10 ? `${value.toFixed(2)} ms` : value < 1000 ? `${value.toFixed(1)} ms` : `${(value / 1000).toFixed(2)} s`;
}

function short(text, n) {
  text = text || "";
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

function setLive(live) {
  document.getElementById("live").classList.toggle("hidden", !live);
}

function poll(fn) {
  let busy = false;
  const follow = document.getElementById("follow");
  const tick = async () => {
    if (busy || (follow && !follow.checked)) return; // paused: the page stays as it is
    busy = true;
    document.body.dataset.polling = "1"; // while an update is under way (tests wait for it to land)
    try { await fn(); } catch (err) { console.error(err); } finally { busy = false; delete document.body.dataset.polling; }
  };
  return setInterval(tick, POLL_MS);
}


// Feature scripts (playhead, session panel, marks, checks, control) register here; app.js starts
// the ones for the page once the page itself has started.
const FEATURES = [];
const pageState = { playhead: false, conversation: null, unfolded: null };

// A change (a mark, a control request): POST, with this server's CSRF token and Datasette's.
let csrfTokens = null;
async function postJSON(url, body) {
  if (!csrfTokens) {
    const got = await api("/actions/csrf.json");
    if (!got.ok) return got;
    csrfTokens = got;
  }
  let response;
  try {
    response = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "content-type": "application/json", accept: "application/json",
        "x-acp-proxy-csrf": csrfTokens.csrf, "x-csrftoken": csrfTokens.datasette_csrf },
      body: JSON.stringify(body),
    });
  } catch (err) {
    connected(false, "no answer");
    return { ok: false, error: "the acp-proxy ui server does not answer" };
  }
  connected(response.status < 500, `HTTP ${response.status}`);
  const data = await response.json().catch(() => ({ ok: false, error: `HTTP ${response.status}` }));
  if (!response.ok && data.ok !== false) data.ok = false;
  return data;
}
