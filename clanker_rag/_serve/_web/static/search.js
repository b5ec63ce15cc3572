// GET /: search the knowledge base; Enter searches, a hit opens its source, "explain" shows each term's share.
"use strict";
(() => {
  const { el, marked, status, api, fmtScore, fmtLines } = CR;
  const main = document.getElementById("main");
  const input = el("input", {
    type: "search", id: "q", name: "q", autocomplete: "off", spellcheck: "false",
    placeholder: "Search the knowledge base", "aria-label": "query",
  });
  const form = el("form", { className: "search", role: "search" }, [input, el("button", { type: "submit", text: "Search" })]);
  const summary = el("p", { id: "summary", className: "summary" });
  const hits = el("ol", { id: "hits", className: "hits" });
  main.append(form, summary, hits);

  function sourceLink(hit) {
    const params = new URLSearchParams({ src: hit.source });
    if (hit.start != null) { params.set("start", hit.start); params.set("end", hit.end); }
    return el("a", { className: "source", href: "/sources#" + params.toString(), text: hit.source });
  }

  async function explain(query, hit, box, button) {
    button.disabled = true;
    try {
      const params = new URLSearchParams({ q: query, source: hit.source, chunk_id: hit.chunk_id });
      const ex = await api("/clanker-rag/explain?" + params.toString());
      const rows = ex.terms.map((t) => {
        const share = ex.score > 0 ? (100 * t.contribution) / ex.score : 0;
        const bar = el("span", { className: "bar" }, [el("span", { className: "fill" })]);
        bar.firstChild.style.width = Math.max(0, Math.min(100, share)).toFixed(1) + "%";
        return el("tr", {}, [
          el("th", { scope: "row", text: t.term }),
          el("td", { text: share.toFixed(1) + "%" }),
          el("td", { className: "barcell" }, [bar]),
          el("td", { text: "tf " + t.tf + " · df " + t.df }),
        ]);
      });
      box.replaceChildren(el("table", { className: "explain" }, [
        el("caption", { text: "score " + fmtScore(ex.score) + " = the sum of each term's contribution" }),
        el("tbody", {}, rows),
      ]));
      button.setAttribute("aria-expanded", "true");
    } catch (err) {
      box.replaceChildren(el("p", { className: "error", text: err.message }));
    } finally {
      button.disabled = false;
    }
  }

  function render(result) {
    hits.replaceChildren();
    summary.textContent = result.hits.length
      ? result.hits.length + " hits for \u201c" + result.query + "\u201d"
      : result.query ? "No hits for \u201c" + result.query + "\u201d" : "";
    for (const hit of result.hits) {
      const box = el("div", { className: "explain-box" });
      const meta = el("div", { className: "meta" }, [
        sourceLink(hit),
        el("span", { className: "lines", text: fmtLines(hit.start_line, hit.end_line) }),
        hit.section ? el("span", { className: "section", text: hit.section }) : null,
        el("span", { className: "score", text: "score " + fmtScore(hit.score) }),
      ]);
      const item = el("li", { className: "hit" }, [meta, el("pre", { className: "text" }, [marked(hit.text, hit.marks)])]);
      if (result.explain && hit.chunk_id != null) {
        const button = el("button", { type: "button", className: "small", text: "explain", "aria-expanded": "false" });
        button.addEventListener("click", () => explain(result.query, hit, box, button));
        item.append(button, box);
      }
      hits.append(item);
    }
  }

  async function search(query, push) {
    status("searching…");
    try {
      const result = await api("/clanker-rag/search?" + new URLSearchParams({ q: query, k: "10" }).toString());
      render(result);
      status("");
      if (push) history.replaceState(null, "", query ? "#" + new URLSearchParams({ q: query }).toString() : "/");
    } catch (err) {
      status(err.message, true);
    }
  }

  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    search(input.value.trim(), true);
  });
  const first = new URLSearchParams(location.hash.slice(1)).get("q");
  if (first) { input.value = first; search(first, false); }
  input.focus();
})();
