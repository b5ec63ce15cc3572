// GET /trace: every request the proxy handled, newest first, live (server-sent events read with fetch so the
// token can travel as a header); a playground sends one request through the proxy and marks its injections inline.
"use strict";
(() => {
  const { el, status, api, fetchAuthed, readEvents, fmtScore, fmtLines } = CR;
  const main = document.getElementById("main");
  const records = el("ol", { className: "records", id: "records", "aria-label": "requests, newest first" });
  const empty = el("p", { className: "hint", id: "empty", text: "No requests yet: point an OpenAI client at this server's /v1, or use the playground." });
  const byId = new Map();
  let maxId = 0;
  let keep = 100; // the server's --trace-size, read below: the page shows what the server keeps
  let mine = null; // the playground's request: { after, question, text, out, recordId }

  // -- playground --------------------------------------------------------------------------
  const kind = el("select", { id: "play-kind", "aria-label": "endpoint" }, [
    el("option", { value: "chat", text: "chat" }), el("option", { value: "completions", text: "completion" }),
  ]);
  const model = el("input", { id: "play-model", placeholder: "model (optional)", "aria-label": "model", autocomplete: "off" });
  const prompt = el("textarea", { id: "play-prompt", rows: "3", placeholder: "Ask something the knowledge base knows", "aria-label": "prompt" });
  const send = el("button", { type: "submit", id: "play-send", text: "Send" });
  const out = el("pre", { className: "play-out", id: "play-out", "aria-live": "polite" });
  const playForm = el("form", { className: "play", id: "play" }, [
    el("div", { className: "row" }, [kind, model, send]), prompt, out,
  ]);
  main.append(
    el("details", { className: "playground" }, [el("summary", { text: "Playground: send a request through the proxy" }), playForm]),
    records, empty,
  );

  function renderPlayground() {
    if (!mine) return;
    const rec = mine.recordId != null ? byId.get(mine.recordId) : null;
    const text = mine.text;
    const cuts = rec ? rec.data.injections.filter((i) => i.offset != null && i.block != null) : [];
    const frag = document.createDocumentFragment();
    let at = 0;
    for (const inj of cuts) {
      const cut = Math.min(inj.offset, text.length);
      frag.append(text.slice(at, cut));
      frag.append(el("span", { className: "inline-block", title: inj.block, text: "\u27e6injected: " + inj.query + "\u27e7" }));
      at = cut;
    }
    frag.append(text.slice(at));
    out.replaceChildren(frag);
  }

  playForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const question = prompt.value.trim();
    if (!question) return;
    const chat = kind.value === "chat";
    const body = chat ? { messages: [{ role: "user", content: question }], stream: true } : { prompt: question, stream: true };
    if (model.value.trim()) body.model = model.value.trim();
    mine = { after: maxId, question, text: "", recordId: null };
    out.replaceChildren();
    send.disabled = true;
    try {
      const resp = await fetchAuthed(chat ? "/v1/chat/completions" : "/v1/completions", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
      });
      if (!resp.ok) {
        let msg = resp.status + " " + resp.statusText;
        try { const j = await resp.json(); if (j.error && j.error.message) msg = j.error.message; } catch (e) { /* keep */ }
        throw new Error(msg);
      }
      await readEvents(resp, (chunk) => {
        if (!chunk || !chunk.choices || !chunk.choices.length) return;
        const c = chunk.choices[0];
        const piece = chat ? (c.delta && c.delta.content) || "" : c.text || "";
        if (piece) { mine.text += piece; renderPlayground(); }
      });
      renderPlayground();
    } catch (err) {
      out.replaceChildren(el("span", { className: "error", text: err.message }));
    } finally {
      send.disabled = false;
    }
  });

  // -- records -----------------------------------------------------------------------------
  function passages(list) {
    return el("table", { className: "passages" }, [
      el("thead", {}, [el("tr", {}, [el("th", { text: "source" }), el("th", { text: "lines" }), el("th", { text: "score" })])]),
      el("tbody", {}, list.map((p) => el("tr", {}, [
        el("td", { className: "source" }, [p.source]),
        el("td", { text: fmtLines(p.start_line, p.end_line) + (p.section ? " · " + p.section : "") }),
        el("td", { className: "num", text: fmtScore(p.score) }),
      ]))),
    ]);
  }

  function injection(inj, n) {
    const timing = [
      inj.retrieval_ms != null ? "retrieval " + inj.retrieval_ms + " ms" : null,
      inj.first_token_ms != null ? "first resumed token " + inj.first_token_ms + " ms" : null,
    ].filter(Boolean).join(" · ");
    const parts = [
      el("div", { className: "inj-head" }, [
        el("span", { className: "badge", text: inj.trigger }),
        el("span", { className: "label", text: "query " }),
        el("q", { className: "query", text: inj.query }),
        timing ? el("span", { className: "timing", text: timing }) : null,
      ]),
    ];
    if (inj.error) parts.push(el("p", { className: "error", text: inj.error }));
    parts.push(inj.passages.length ? passages(inj.passages) : el("p", { className: "hint", text: "no passages" }));
    if (inj.block != null) {
      parts.push(el("details", {}, [el("summary", { text: "the block as injected" }), el("pre", { className: "block", text: inj.block })]));
      parts.push(el("pre", { className: "context" }, [
        el("span", { className: "before", text: inj.before ? "\u2026" + inj.before : "(start of the answer)" }),
        el("span", { className: "inline-block", text: "\u27e6block " + (n + 1) + "\u27e7" }),
        el("span", { className: "after", text: inj.after ? inj.after + "\u2026" : "" }),
      ]));
    } else {
      parts.push(el("p", { className: "hint", text: "not injected" }));
    }
    return el("li", { className: "inj" }, parts);
  }

  function recordBody(r) {
    const when = new Date(r.time);
    const head = el("div", { className: "rec-head" }, [
      el("time", { datetime: r.time, text: isNaN(when) ? r.time : when.toLocaleTimeString() }),
      el("span", { className: "kind", text: r.kind }),
      el("span", { className: "model", text: r.model || "(no model)" }),
      el("span", { className: "st st-" + r.status, text: r.status + (r.total_ms != null ? " · " + Math.round(r.total_ms) + " ms" : "") }),
    ]);
    const list = el("ol", { className: "injections" }, r.injections.map(injection));
    return [
      head,
      el("p", { className: "question", text: r.question || "(no question)" }),
      r.injections.length ? list : el("p", { className: "hint", text: r.status === "running" ? "no injection yet" : "no injection" }),
      r.text ? el("details", {}, [el("summary", { text: "the answer" }), el("pre", { className: "answer", text: r.text })]) : null,
    ];
  }

  function upsert(r) {
    maxId = Math.max(maxId, r.id);
    let entry = byId.get(r.id);
    if (!entry) {
      const node = el("li", { className: "record", id: "record-" + r.id });
      entry = { node, data: r };
      byId.set(r.id, entry);
      records.prepend(node);
    }
    // Sections the reader opened stay open across updates.
    const open = [...entry.node.querySelectorAll("details")].map((d) => d.open);
    entry.data = r;
    entry.node.replaceChildren(...recordBody(r).filter(Boolean));
    entry.node.querySelectorAll("details").forEach((d, i) => { if (open[i]) d.open = true; });
    // The oldest request drops out here as the server drops it.
    while (byId.size > keep) {
      const oldest = Math.min(...byId.keys());
      byId.get(oldest).node.remove();
      byId.delete(oldest);
    }
    empty.hidden = byId.size > 0;
    if (mine && mine.recordId == null && r.id > mine.after && r.question === mine.question) mine.recordId = r.id;
    if (mine && mine.recordId === r.id) renderPlayground();
  }

  async function follow() {
    for (;;) {
      try {
        const resp = await fetchAuthed("/clanker-rag/trace/events");
        if (!resp.ok) throw new Error(resp.status + " " + resp.statusText);
        status("live");
        await readEvents(resp, (r) => { if (r && r.id != null) upsert(r); });
        status("reconnecting…");
      } catch (err) {
        status("disconnected: " + err.message, true);
      }
      await new Promise((res) => setTimeout(res, 1000));
    }
  }
  api("/clanker-rag/info").then((info) => { keep = info.trace_size || keep; }, () => {});
  follow();
})();
