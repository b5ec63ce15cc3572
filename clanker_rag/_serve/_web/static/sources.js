// GET /sources: filter the sources; one opens with its text, a chunk given in the address marked in place.
"use strict";
(() => {
  const { el, status, api, fmtLines } = CR;
  const main = document.getElementById("main");
  const filter = el("input", {
    type: "search", id: "filter", autocomplete: "off", placeholder: "Filter sources", "aria-label": "filter sources",
  });
  const count = el("p", { className: "summary", id: "count" });
  const list = el("ul", { className: "sources", id: "sources" });
  const viewer = el("section", { className: "viewer", id: "viewer", "aria-live": "polite" });
  main.append(el("form", { className: "search", role: "search" }, [filter]), count, el("div", { className: "split" }, [list, viewer]));

  let timer = null;
  async function load() {
    try {
      const result = await api("/clanker-rag/sources?" + new URLSearchParams({ filter: filter.value }).toString());
      list.replaceChildren(...result.sources.map((name) =>
        el("li", {}, [el("a", { href: "#" + new URLSearchParams({ src: name }).toString(), text: name })])));
      markCurrent();
      count.textContent = result.total + " sources" + (result.total > result.sources.length ? " (first " + result.sources.length + " shown)" : "");
    } catch (err) {
      status(err.message, true);
    }
  }

  function markCurrent() {
    const name = new URLSearchParams(location.hash.slice(1)).get("src");
    for (const a of list.querySelectorAll("a")) {
      if (a.textContent === name) a.setAttribute("aria-current", "true");
      else a.removeAttribute("aria-current");
    }
  }

  async function open() {
    markCurrent();
    const params = new URLSearchParams(location.hash.slice(1));
    const name = params.get("src");
    if (!name) { viewer.replaceChildren(el("p", { className: "hint", text: "Pick a source to read it." })); return; }
    status("loading…");
    try {
      const src = await api("/clanker-rag/source?" + new URLSearchParams({ name }).toString());
      const text = src.text;
      const start = params.has("start") ? Number(params.get("start")) : null;
      const end = params.has("end") ? Number(params.get("end")) : null;
      const pre = el("pre", { className: "doc", id: "doc", tabindex: "0" });
      let chunk = null;
      if (start !== null && end !== null && start >= 0 && end <= text.length && start <= end) {
        chunk = el("mark", { className: "chunk", id: "chunk", text: text.slice(start, end) });
        pre.append(text.slice(0, start), chunk, text.slice(end));
      } else {
        pre.textContent = text;
      }
      const info = src.chunks.find((c) => c.start === start);
      viewer.replaceChildren(
        el("h2", { className: "docname", text: src.name }),
        el("p", { className: "meta" }, [
          src.chunks.length + (src.chunks.length === 1 ? " chunk" : " chunks"),
          info ? " · chunk " + info.chunk_index + ", " + fmtLines(info.start_line, info.end_line) : "",
          info && info.section ? " · " + info.section : "",
          src.truncated ? " · shown in part (too long)" : "",
        ]),
        pre,
      );
      if (chunk) chunk.scrollIntoView({ block: "center" });
      status("");
    } catch (err) {
      viewer.replaceChildren(el("p", { className: "error", text: err.message }));
      status("");
    }
  }

  filter.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(load, 150); });
  filter.closest("form").addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  window.addEventListener("hashchange", open);
  load();
  open();
  filter.focus();
})();
