// Source panel of the topic page. Every piece of conversation text reaches the DOM as a text
// node (textContent / createTextNode), never through innerHTML.
"use strict";

(function () {
  const layout = document.getElementById("layout");
  const panel = document.getElementById("panel");
  if (!layout || !panel) return;

  // el("dt", {class: "x"}, "text", childNode, ...): strings become text nodes.
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  const STATE_BADGE = {
    FINAL: ["badge badge-final", "🔒 final"],
    FORMING: ["badge badge-forming", "forming"],
    IMPROVISE: ["badge badge-draft", "draft — evolving"],
    SUPERSEDED: ["badge badge-superseded", "superseded"],
  };

  function badge(state) {
    const [cls, label] = STATE_BADGE[state] || ["badge", state];
    return el("span", { class: cls }, label);
  }

  function metaRow(term, ...value) {
    return [el("dt", {}, term), el("dd", {}, ...value)];
  }

  function sourceSection(trace, index, total) {
    const title = total > 1 ? `Source ${index + 1} of ${total}` + (index === 0 ? " · canonical" : " · linked") : "Source";
    // This source's own status, as the last sync or verify recorded it.
    const check = trace.checksum_matches
      ? el("span", { class: "flag flag-ok" }, "✓ this node's checksum matches the run file")
      : el("span", { class: "flag flag-bad" }, "✗ no longer matches: " + trace.problems.join("; "));
    // Export conversations are known by their titles; the run id stays on hover.
    const run = trace.run_title
      ? el("span", { title: trace.run_id }, trace.run_label)
      : el("span", { class: "mono" }, trace.run_label || trace.run_id);
    const meta = el(
      "dl",
      { class: "meta" },
      ...metaRow(trace.run_title ? "conversation" : "run", run, trace.run_status ? ` (${trace.run_status})` : ""),
      ...metaRow("path", el("code", {}, trace.json_path)),
      ...metaRow("node", el("span", {}, trace.node_type || "unknown"), " · ",
        trace.branch === "abandoned"
          ? el("span", { class: "badge badge-abandoned" }, "abandoned branch")
          : el("span", {}, "current branch")),
      ...metaRow("offsets", el("code", {}, `[${trace.start}, ${trace.end})`), ` · ${trace.end - trace.start} characters`),
      ...metaRow("node checksum", el("code", { class: "wrap" }, trace.node_checksum)),
      ...metaRow("run version", el("code", { class: "wrap" }, trace.version_id || "not in the vault")),
      ...metaRow("check", check),
    );
    const section = el("section", { class: "source" }, el("h3", {}, title), meta);
    if (trace.json_before === null) {
      section.append(el("p", { class: "message" }, "The run version this source was seen in is not in the vault."));
      return section;
    }
    // The node is shown decoded (offsets count its characters), between the run's JSON around it.
    const mark = el("mark", { class: "quote" }, trace.quote);
    const node = el("span", { class: "node" }, '"', trace.before, mark, trace.after, '"');
    const pre = el("pre", { class: "json", tabindex: "0" }, el("code", {}, trace.json_before, node, trace.json_after));
    section.append(el("h4", {}, "Raw run JSON"), pre);
    return section;
  }

  // Bricks whose meaning overlaps this one's; a conflict states another value. Nexus never picks.
  function relatedSection(related) {
    const items = related.map((r) => {
      const open = el("button", { type: "button", class: "brick-link", "data-brick-id": r.brick_id }, r.content);
      open.addEventListener("click", () => openBrick(r.brick_id));
      return el(
        "li",
        { class: r.conflict ? "related is-conflict" : "related" },
        r.conflict ? el("span", { class: "badge badge-conflict" }, "⚠ " + r.conflict) : null,
        r.conflict ? " " : null,
        open,
        el("span", { class: "dim" }, ` · similarity ${r.similarity.toFixed(4)} · ${r.state.toLowerCase()}`),
      );
    });
    return el("section", { class: "related-bricks" }, el("h3", {}, `Related bricks · ${related.length}`), el("ol", { class: "related-list" }, ...items));
  }

  // The shadow stack: the fragments this brick superseded, as they were said.
  function historySection(history) {
    const items = history.map((h) =>
      el("li", {}, el("del", {}, h.content), " ", el("span", { class: "run mono dim" }, h.run_id || ""), " ", el("code", { class: "dim" }, h.json_path || "")),
    );
    return el("section", { class: "history-stack" }, el("h3", {}, `History · ${history.length} superseded fragment${history.length > 1 ? "s" : ""}`), el("ol", { class: "history-list" }, ...items));
  }

  function scrollToMarks() {
    for (const pre of panel.querySelectorAll("pre.json")) {
      const mark = pre.querySelector("mark");
      if (mark) pre.scrollTop = Math.max(0, mark.offsetTop - pre.clientHeight / 3);
    }
  }

  function closePanel() {
    panel.hidden = true;
    panel.replaceChildren();
    layout.classList.remove("with-panel");
    for (const li of document.querySelectorAll(".brick.is-selected")) li.classList.remove("is-selected");
    history.replaceState(null, "", location.pathname + location.search);
  }

  async function openBrick(brickId) {
    for (const li of document.querySelectorAll(".brick.is-selected")) li.classList.remove("is-selected");
    const item = document.getElementById("brick-" + brickId);
    if (item) item.classList.add("is-selected");
    layout.classList.add("with-panel");
    panel.hidden = false;
    panel.setAttribute("aria-busy", "true");
    panel.replaceChildren(el("p", { class: "dim" }, "Loading source…"));
    history.replaceState(null, "", location.pathname + location.search + "#brick=" + brickId);

    let data;
    try {
      const response = await fetch(`/api/bricks/${encodeURIComponent(brickId)}/trace`, { headers: { Accept: "application/json" } });
      data = await response.json();
      if (!response.ok) throw new Error(data.error || response.statusText);
    } catch (err) {
      panel.replaceChildren(el("p", { class: "message" }, "Could not load the source: " + err.message));
      panel.removeAttribute("aria-busy");
      return;
    }
    const close = el("button", { type: "button", class: "close", "aria-label": "Close source panel" }, "×");
    close.addEventListener("click", closePanel);
    const head = el(
      "div",
      { class: "panel-head" },
      el("h2", {}, "Where this brick comes from"),
      close,
    );
    const brick = el(
      "p",
      { class: "panel-brick" },
      badge(data.state),
      data.stale ? el("span", { class: "badge badge-stale" }, "⚠ stale — source changed") : null,
      el("code", { class: "wrap dim" }, data.brick_id),
    );
    // The brick's text as the vault stores it, character for character: the page draws its Markdown.
    const stored = el("section", { class: "stored-text" }, el("h3", {}, "Stored text"), el("pre", { class: "exact" }, data.content));
    panel.replaceChildren(head, brick, stored);
    if (data.related && data.related.length) panel.append(relatedSection(data.related));
    if (data.history && data.history.length) panel.append(historySection(data.history));
    data.traces.forEach((trace, i) => panel.append(sourceSection(trace, i, data.traces.length)));
    panel.removeAttribute("aria-busy");
    panel.scrollTop = 0;
    scrollToMarks();
  }

  document.addEventListener("click", (event) => {
    const link = event.target.closest("a.brick-text");
    if (!link || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
    event.preventDefault();
    openBrick(link.dataset.brickId);
  });
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !panel.hidden) closePanel();
  });

  // Keep / drop (served by `nexus api`): the brick's text joins its topic's examples; the next sync selects with it.
  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button.teach");
    if (!button) return;
    const verdict = button.dataset.verdict;
    const note = button.parentElement.querySelector(".teach-note");
    let reason = null;
    if (verdict === "drop") {
      reason = window.prompt("Why drop it? (optional, kept in the audit trail)", "");
      if (reason === null) return;
    }
    button.disabled = true;
    try {
      const response = await fetch(`/v1/bricks/${encodeURIComponent(button.dataset.brickId)}/${verdict}`, {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "application/json" },
        body: JSON.stringify(reason ? { reason } : {}),
      });
      const data = await response.json();
      if (!response.ok) {
        note.textContent = data.detail || `refused (${response.status})`;
        button.disabled = false;
        return;
      }
      note.textContent = verdict === "keep" ? "kept: the next sync keeps sentences like it" : "dropped: it leaves at the next sync";
      button.closest("li.brick").classList.add(`taught-${verdict}`);
      const examples = document.getElementById("examples");
      if (examples) examples.textContent = `examples: keep ${data.examples.keep}, drop ${data.examples.drop}`;
    } catch (err) {
      note.textContent = "could not reach the API";
      button.disabled = false;
    }
  });

  const wanted = /^#brick=([0-9a-f]{64})$/.exec(location.hash);
  if (wanted) openBrick(wanted[1]);
})();
