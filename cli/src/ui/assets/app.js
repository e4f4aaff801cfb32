// Kubeless dashboard: small enhancements over server-rendered pages. Everything here has a
// no-script fallback (forms post to the server, logs and charts have links).
"use strict";

const token = document.querySelector('meta[name="kubeless-token"]')?.content || "";

function api(path, options = {}) {
  const headers = Object.assign({ "x-kubeless-token": token }, options.headers || {});
  return fetch(path, Object.assign({}, options, { headers, credentials: "same-origin" }));
}

async function jsonOrError(resp) {
  let body;
  try { body = await resp.json(); } catch (_) { body = {}; }
  if (!resp.ok) throw new Error(body.error || `HTTP ${resp.status}`);
  return body;
}

function el(tag, attrs = {}, text = "") {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
}

// ------------------------------------------------------------------ editor line numbers
function lineNumbers(textarea) {
  const gutter = textarea.parentElement.querySelector(".gutter");
  if (!gutter) return;
  const update = () => {
    const n = textarea.value.split("\n").length;
    let s = "";
    for (let i = 1; i <= n; i++) s += i + "\n";
    gutter.textContent = s;
    gutter.scrollTop = textarea.scrollTop;
  };
  textarea.addEventListener("input", update);
  textarea.addEventListener("scroll", () => { gutter.scrollTop = textarea.scrollTop; });
  // Tab indents inside the editor; Escape then Tab leaves it (keyboard users are not trapped).
  let escaped = false;
  textarea.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") { escaped = true; return; }
    if (ev.key === "Tab" && !ev.shiftKey && !escaped) {
      ev.preventDefault();
      const { selectionStart: a, selectionEnd: b, value } = textarea;
      textarea.value = value.slice(0, a) + "    " + value.slice(b);
      textarea.selectionStart = textarea.selectionEnd = a + 4;
      update();
    }
    if (ev.key !== "Escape") escaped = false;
  });
  update();
}
document.querySelectorAll(".editor textarea").forEach(lineNumbers);

// ------------------------------------------------------------------ new function templates
const templates = document.getElementById("templates");
const runtimeSelect = document.getElementById("runtime");
if (templates && runtimeSelect) {
  const all = JSON.parse(templates.textContent || "{}");
  const code = document.getElementById("code");
  const handler = document.getElementById("handler");
  let lastTemplate = code.value;
  runtimeSelect.addEventListener("change", () => {
    const t = all[runtimeSelect.value];
    if (!t) return;
    // Only replace code the user has not edited.
    if (code.value === lastTemplate || code.value.trim() === "") {
      code.value = t.code;
      lastTemplate = t.code;
      code.dispatchEvent(new Event("input"));
    }
    handler.value = t.handler;
  });
  document.getElementById("use-template")?.setAttribute("hidden", "");
}

// ------------------------------------------------------------------ function page
const functionName = (location.pathname.match(/^\/functions\/([^/]+)$/) || [])[1];

const editor = document.getElementById("editor");
if (editor && functionName) {
  const status = document.getElementById("rollout");
  const save = document.getElementById("save");
  editor.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    save.disabled = true;
    status.textContent = "Saving…";
    try {
      const saved = await jsonOrError(await api(`/api/functions/${functionName}/code`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ code: document.getElementById("code").value }),
      }));
      status.textContent = `Saved (generation ${saved.generation}). Rolling out…`;
      for (let i = 0; i < 300; i++) {
        const r = await jsonOrError(await api(`/api/functions/${functionName}/rollout?generation=${saved.generation}`));
        if (r.state === "ready") { status.textContent = `Deployed: ${r.message}.`; status.dataset.state = "ready"; break; }
        if (r.state === "failed") { status.textContent = `Rollout failed: ${r.message}`; status.dataset.state = "failed"; break; }
        status.textContent = `Rolling out: ${r.message}`;
        status.dataset.state = "pending";
        await new Promise((res) => setTimeout(res, 1000));
      }
    } catch (e) {
      status.textContent = `Error: ${e.message}`;
      status.dataset.state = "error";
    } finally {
      save.disabled = false;
    }
  });
}

const callForm = document.getElementById("call");
if (callForm && functionName) {
  const out = document.getElementById("call-result");
  const send = document.getElementById("call-send");
  callForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    send.disabled = true;
    out.replaceChildren(el("p", { role: "status" }, "Calling…"));
    try {
      const r = await jsonOrError(await api(`/api/functions/${functionName}/call`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          method: document.getElementById("call-method").value,
          headers: document.getElementById("call-headers").value,
          body: document.getElementById("call-body").value,
        }),
      }));
      const dl = el("dl", { class: "answer" });
      dl.append(el("dt", {}, "Status"), el("dd", { id: "call-status" }, String(r.status)));
      dl.append(el("dt", {}, "Time"), el("dd", { id: "call-time" }, `${r.millis.toFixed(1)} ms`));
      const details = el("details");
      details.append(el("summary", {}, "Response headers"),
        el("pre", { id: "call-headers-out" }, r.headers.map(([k, v]) => `${k}: ${v}`).join("\n")));
      out.replaceChildren(dl, details, el("h3", {}, "Response body"), el("pre", { id: "call-answer" }, r.body));
    } catch (e) {
      const box = el("div", { class: "error", role: "alert" });
      box.append(el("strong", {}, "Error:"), document.createTextNode(" " + e.message));
      out.replaceChildren(box);
    } finally {
      send.disabled = false;
    }
  });
}

const logs = document.getElementById("logs");
if (logs && window.EventSource) {
  const status = document.getElementById("logs-status");
  const source = new EventSource(logs.dataset.src);
  source.addEventListener("open", () => { logs.textContent = ""; });
  source.addEventListener("status", (ev) => { status.textContent = ev.data === "following" ? "Following the log live." : ev.data; });
  source.addEventListener("line", (ev) => {
    const atEnd = logs.scrollTop + logs.clientHeight >= logs.scrollHeight - 4;
    logs.append(ev.data + "\n");
    // Keep the last 1000 lines.
    while (logs.childNodes.length > 1000) logs.removeChild(logs.firstChild);
    if (atEnd) logs.scrollTop = logs.scrollHeight;
  });
  source.addEventListener("error", () => { status.textContent = "Log stream interrupted; reconnecting…"; });
}

const charts = document.getElementById("charts");
if (charts) {
  const refresh = async () => {
    try {
      const resp = await fetch(charts.dataset.src, { credentials: "same-origin" });
      if (resp.ok) charts.innerHTML = await resp.text();
    } catch (_) { /* next round */ }
  };
  refresh();
  setInterval(refresh, 2000);
}

// The function's status (Ready condition, pods) follows the cluster while the page is open.
const statusBox = document.getElementById("status");
if (statusBox) {
  setInterval(async () => {
    try {
      const resp = await fetch(statusBox.dataset.src, { credentials: "same-origin" });
      const text = await resp.text();
      if (resp.ok && text !== statusBox.innerHTML) statusBox.innerHTML = text;
    } catch (_) { /* next round */ }
  }, 3000);
}
