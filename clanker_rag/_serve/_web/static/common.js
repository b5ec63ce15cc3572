// Shared by the pages: DOM building (textContent only: nothing a server sends is ever parsed as HTML),
// the bearer token (asked for once, kept for this tab), JSON and event-stream requests to this origin.
"use strict";
const CR = (() => {
  const TOKEN_KEY = "clanker-rag-token";
  let asking = null;

  function el(tag, props, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null) continue;
      if (key === "text") node.textContent = String(value);
      else if (key === "className") node.className = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children || []) {
      if (child === null || child === undefined) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  // Text with [start, end) spans wrapped in <mark>; every piece a text node.
  function marked(text, marks) {
    const frag = document.createDocumentFragment();
    let at = 0;
    for (const [start, end] of marks || []) {
      if (start < at) continue;
      frag.append(document.createTextNode(text.slice(at, start)));
      frag.append(el("mark", { text: text.slice(start, end) }));
      at = end;
    }
    frag.append(document.createTextNode(text.slice(at)));
    return frag;
  }

  function status(message, isError) {
    const node = document.getElementById("status");
    node.textContent = message || "";
    node.classList.toggle("error", !!isError);
  }

  function headers(extra) {
    const h = Object.assign({}, extra || {});
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) h.Authorization = "Bearer " + token;
    return h;
  }

  // The server wants a token: ask once (every request waiting shares the question), then retry.
  function askToken(message) {
    if (asking) return asking;
    asking = new Promise((resolve) => {
      const input = el("input", { type: "password", id: "token", autocomplete: "off", "aria-label": "token" });
      const form = el("form", { className: "token", id: "token-form" }, [
        el("label", { for: "token", text: message }),
        input,
        el("button", { type: "submit", text: "Use token" }),
      ]);
      form.addEventListener("submit", (ev) => {
        ev.preventDefault();
        sessionStorage.setItem(TOKEN_KEY, input.value.trim());
        form.remove();
        asking = null;
        resolve();
      });
      document.getElementById("main").prepend(form);
      input.focus();
    });
    return asking;
  }

  async function fetchAuthed(path, init) {
    for (;;) {
      const opts = Object.assign({}, init || {});
      opts.headers = headers(opts.headers);
      const resp = await fetch(path, opts);
      if (resp.status !== 401) return resp;
      await askToken(sessionStorage.getItem(TOKEN_KEY)
        ? "That token was refused. Token (CLANKER_RAG_TOKEN):"
        : "This server needs its token (CLANKER_RAG_TOKEN):");
    }
  }

  async function api(path) {
    const resp = await fetchAuthed(path);
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    if (!resp.ok) {
      const msg = body && body.error && body.error.message ? body.error.message : resp.status + " " + resp.statusText;
      throw new Error(msg);
    }
    return body;
  }

  // Read server-sent events from a response body; calls onData(parsed JSON) per "data:" event.
  async function readEvents(resp, onData) {
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const raw = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = raw.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
        if (!data) continue;
        if (data === "[DONE]") { onData(null); continue; }
        try { onData(JSON.parse(data)); } catch (e) { /* not JSON: skipped */ }
      }
    }
  }

  function fmtScore(x) { return typeof x === "number" ? x.toFixed(2) : "–"; }
  function fmtLines(a, b) { return a == null ? "" : a === b ? "line " + a : "lines " + a + "–" + b; }

  document.addEventListener("DOMContentLoaded", () => {
    const here = document.body.dataset.page;
    const link = document.getElementById("nav-" + here);
    if (link) link.setAttribute("aria-current", "page");
  });

  return { el, marked, status, api, fetchAuthed, readEvents, fmtScore, fmtLines };
})();
