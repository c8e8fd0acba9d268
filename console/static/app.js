// The foldstream console: a view of a server's streams and processors, with the operator's verbs
// on processors (pause, resume, retry, replay, skip, rebuild, and all but replay in bulk over a
// path pattern; parked events redriven or discarded), each after a confirmation, and their audit. Plain
// ES module, no dependencies; it talks to the server only through its public HTTP routes (see
// docs/console.md), with the token when one is set.
import { followLiveState, readEventStream, HTTPError, errorText as answerText } from "./livestate.js";

const TOKEN_KEY = "foldstream.console.token";
const PLATFORM_KEY = "foldstream.console.platform";
// PLATFORM_PREFIX starts the type of every record the platform writes itself (the contract's
// birth and wake records, work failures, loop limits, pause and resume); hidden unless asked for.
const PLATFORM_PREFIX = "events.iterate.com/";
const POLL_MS = 2000;
const KEEP_MESSAGES = 500;
const FIRST_MESSAGES = 200;
const MAX_RENDER_CHARS = 200000;

const $ = (id) => document.getElementById(id);
const cfg = await fetch("console/config.json", { cache: "no-cache" }).then((r) => r.json());

// ---- small helpers ------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") n.className = v;
    else if (k === "text") n.textContent = v;
    else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) n.append(c);
  return n;
}

function escapeHTML(s) {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function offsetPosition(off) {
  if (typeof off !== "string") return 0;
  const i = off.indexOf("_");
  return Number(i < 0 ? off : off.slice(i + 1)) || 0;
}

function formatOffset(n) {
  return "0000000000000000_" + String(Math.max(0, n)).padStart(16, "0");
}

function isJSONType(ct) {
  return /^application\/json\s*(;|$)/i.test(ct || "");
}

function isTextType(ct) {
  return isJSONType(ct) || /^text\//i.test(ct || "");
}

function shortType(ct) {
  const t = (ct || "").split(";")[0].trim().toLowerCase();
  return { "application/json": "json", "application/octet-stream": "bytes", "text/plain": "text" }[t] || t;
}

function ago(iso) {
  const t = Date.parse(iso);
  if (!t) return "";
  const s = Math.max(0, (Date.now() - t) / 1000);
  if (s < 60) return `${Math.floor(s)}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

// waited says a lag in seconds briefly: "0s", "42s", "3m 20s", "5h 2m", "2d 4h".
function waited(sec) {
  const s = Math.floor(sec);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

function plural(n, word) {
  return `${n.toLocaleString()} ${word}${n === 1 ? "" : "s"}`;
}

// pausedChip marks a paused stream (appends are refused until a resume), its reason on hover.
function pausedChip(s) {
  return s.paused ? el("span", { class: "chip paused", title: "stream paused: " + (s.pauseReason || ""), text: "paused" }) : "";
}

// tailText shows a stream's tail: a byte count for byte and text streams; for JSON streams the
// offset, which counts messages and the processors' ephemeral events (docs/server.md).
function tailText(s) {
  const n = offsetPosition(s.tail);
  return isJSONType(s.contentType) ? n.toLocaleString() : plural(n, "byte");
}

// streamURL turns a store path ("/carts/1") into its URL under the stream prefix.
function streamURL(p) {
  return cfg.streamPrefix + p.replace(/^\//, "").split("/").map(encodeURIComponent).join("/");
}

function processorURL(slug, p) {
  return cfg.processorPrefix + encodeURIComponent(slug) + "/" + p.replace(/^\//, "").split("/").map(encodeURIComponent).join("/");
}

function streamHash(p) {
  return "#/stream" + p.split("/").map(encodeURIComponent).join("/");
}

// ---- the token and the connection indicator -------------------------------------------------------

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function authHeaders() {
  const t = token();
  return t ? { Authorization: "Bearer " + t } : {};
}

function setConn(ok, title) {
  const c = $("conn");
  c.className = "conn " + (ok ? "ok" : "bad");
  c.title = title;
}

function showBanner(text) {
  const b = $("banner");
  b.textContent = text;
  b.hidden = !text;
}

function noteError(err) {
  if (err instanceof HTTPError && (err.status === 401 || err.status === 403)) {
    showBanner(
      err.status === 401
        ? "This server needs an access token: paste one under Token (a read-only token is enough)."
        : "Your token does not allow reading this: " + err.message,
    );
    $("token-panel").hidden = false;
    setConn(false, err.message);
    return;
  }
  setConn(false, String(err.message || err));
}

$("token-btn").addEventListener("click", () => {
  const p = $("token-panel");
  p.hidden = !p.hidden;
  if (!p.hidden) $("token-input").focus();
});
$("token-form").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
  $("token-input").value = "";
  $("token-panel").hidden = true;
  showBanner("");
  route();
});
$("token-clear").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  $("token-panel").hidden = true;
  route();
});

async function getJSON(url, signal) {
  const res = await fetch(url, { headers: authHeaders(), signal, cache: "no-store" });
  if (!res.ok) {
    const text = await answerText(res);
    throw new HTTPError(res.status, text || `HTTP ${res.status}`, res.headers.get("Foldstream-Error-Code"));
  }
  setConn(true, "connected");
  showBanner("");
  return res.json();
}

// poll runs fn now and then every POLL_MS while the page is visible, until signal aborts.
function poll(fn, signal) {
  let timer = 0;
  const tick = async () => {
    if (signal.aborted) return;
    if (!document.hidden) {
      try {
        await fn();
      } catch (err) {
        if (err.name !== "AbortError") noteError(err);
      }
    }
    if (!signal.aborted) timer = setTimeout(tick, POLL_MS);
  };
  tick();
  signal.addEventListener("abort", () => clearTimeout(timer));
}

function flash(node) {
  node.classList.remove("flash");
  void node.offsetWidth; // restart the animation
  node.classList.add("flash");
}

// ---- JSON rendering with changed values marked ------------------------------------------------

const UNCHANGED = Symbol("unchanged");

// renderJSON returns HTML for value, marking the values that differ from prev. prev is UNCHANGED
// for a subtree known to be the same (livestate.js shares unchanged parts, so identity says it).
function renderJSON(value, prev, indent) {
  const pad = "  ".repeat(indent);
  const changed = prev !== UNCHANGED && (prev === undefined || !sameLeaf(value, prev));
  if (value === null || typeof value !== "object") {
    let cls = "j-" + (value === null ? "null" : typeof value);
    const text = typeof value === "string" ? JSON.stringify(value) : String(value);
    if (changed) cls += " chg";
    return `<span class="${cls}">${escapeHTML(text)}</span>`;
  }
  const isArr = Array.isArray(value);
  const keys = isArr ? value.map((_, i) => i) : Object.keys(value);
  if (keys.length === 0) return `<span class="j-punct${changed && prev === undefined ? " chg" : ""}">${isArr ? "[]" : "{}"}</span>`;
  const prevObj = prev !== UNCHANGED && prev !== null && typeof prev === "object" && Array.isArray(prev) === isArr ? prev : undefined;
  const parts = keys.map((k) => {
    const v = value[k];
    let pv;
    if (prev === UNCHANGED) pv = UNCHANGED;
    else if (prevObj === undefined) pv = undefined;
    else if (!Object.prototype.hasOwnProperty.call(prevObj, k)) pv = undefined;
    else pv = prevObj[k] === v ? UNCHANGED : prevObj[k];
    const key = isArr ? "" : `<span class="j-key">${escapeHTML(JSON.stringify(k))}</span>: `;
    return pad + "  " + key + renderJSON(v, pv, indent + 1);
  });
  const [open, close] = isArr ? ["[", "]"] : ["{", "}"];
  return `<span class="j-punct">${open}</span>\n${parts.join(",\n")}\n${pad}<span class="j-punct">${close}</span>`;
}

function sameLeaf(a, b) {
  if (a === null || typeof a !== "object") return a === b;
  return b !== null && typeof b === "object";
}

function stateHTML(state, prev) {
  const text = JSON.stringify(state);
  if (text === undefined) return `<span class="j-null">undefined</span>`;
  if (text.length > MAX_RENDER_CHARS) return escapeHTML(JSON.stringify(state, null, 2));
  return renderJSON(state, prev, 0);
}

// ---- routing ------------------------------------------------------------------------------------

let cleanup = new AbortController();

function route() {
  cleanup.abort();
  cleanup = new AbortController();
  const h = location.hash.replace(/^#/, "");
  const main = $("main");
  main.replaceChildren();
  $("nav-processors").hidden = !cfg.processorsPath;
  $("nav-processors").classList.toggle("here", h.startsWith("/processors"));
  if (h.startsWith("/stream/")) {
    const p = "/" + h.slice("/stream/".length).split("/").map(decodeURIComponent).join("/");
    streamView(main, p, cleanup.signal);
  } else if (h.startsWith("/processors") && cfg.processorsPath) {
    processorsView(main, new URLSearchParams(h.split("?")[1] || "").get("state") || "", cleanup.signal);
  } else {
    listView(main, new URLSearchParams(h.split("?")[1] || "").get("prefix") || "", cleanup.signal);
  }
}

function crumbs(p, root) {
  const c = $("crumbs");
  c.replaceChildren();
  c.append(root === "processors" ? el("a", { href: "#/processors", text: "processors" }) : el("a", { href: "#/", text: "streams" }));
  if (p) c.append(el("span", { class: "sep", text: "/" }), el("span", { class: "here", text: p }));
}

window.addEventListener("hashchange", route);

// ---- the stream list ----------------------------------------------------------------------------

function listView(main, prefix, signal) {
  crumbs("");
  document.title = "Streams · foldstream";
  const input = el("input", {
    type: "search",
    class: "filter",
    placeholder: "filter by path prefix, e.g. /carts/",
    value: prefix,
    "aria-label": "path prefix",
    spellcheck: "false",
  });
  const count = el("span", { class: "muted count" });
  const body = el("tbody");
  const table = el(
    "table",
    { class: "streams" },
    el(
      "thead",
      {},
      el("tr", {}, el("th", { text: "Stream" }), el("th", { text: "Type" }), el("th", { class: "num", text: "Tail" }), el("th", { class: "when", text: "Created" })),
    ),
    body,
  );
  const empty = el("div", { class: "empty", hidden: true });
  const more = el("button", { type: "button", class: "ghost more", hidden: true, text: "Load more" });
  main.append(el("section", { class: "card" }, el("div", { class: "toolbar" }, input, count), table, empty, more));

  let limit = 100;
  let next = "";
  const rows = new Map(); // path → {tr, tail}
  let loaded = false; // rows of the first answer do not flash
  const render = (streams) => {
    const seen = new Set();
    let before = null;
    for (let i = streams.length - 1; i >= 0; i--) {
      const s = streams[i];
      seen.add(s.path);
      let r = rows.get(s.path);
      if (!r) {
        const tr = el(
          "tr",
          { "data-path": s.path },
          el("td", { class: "path" }, el("a", { href: streamHash(s.path), text: s.path })),
          el("td", {}, el("span", { class: "chip" })),
          el("td", { class: "num tail" }),
          el("td", { class: "when" }),
        );
        r = { tr, tail: null };
        rows.set(s.path, r);
        if (loaded) flash(tr);
      }
      const [, typeTd, tailTd, whenTd] = r.tr.children;
      typeTd.firstChild.textContent = shortType(s.contentType);
      typeTd.firstChild.title = s.contentType;
      tailTd.replaceChildren(tailText(s), s.closed ? el("span", { class: "chip closed", text: "closed" }) : "", pausedChip(s));
      tailTd.title = s.tail;
      whenTd.textContent = ago(s.createdAt);
      whenTd.title = s.createdAt || "";
      if (r.tail !== null && r.tail !== s.tail) flash(tailTd);
      r.tail = s.tail;
      body.insertBefore(r.tr, before);
      before = r.tr;
    }
    loaded = true;
    for (const [p, r] of rows) {
      if (!seen.has(p)) {
        r.tr.remove();
        rows.delete(p);
      }
    }
    count.textContent = streams.length ? plural(streams.length, "stream") + (next ? "+" : "") : "";
    more.hidden = !next;
    table.hidden = streams.length === 0;
    empty.hidden = streams.length !== 0;
    if (streams.length === 0) {
      empty.replaceChildren(
        el("p", { text: prefix ? `No stream starts with ${prefix}.` : "No streams yet." }),
        prefix ? "" : el("p", { class: "muted", text: "Create one with an append, for example:" }),
        prefix ? "" : el("pre", { class: "hint", text: `curl -X POST -H 'Content-Type: application/json' \\\n  --data '{"type":"hello","payload":{}}' ${location.origin}${streamURL("/demo")}` }),
      );
    }
  };
  const load = async () => {
    const q = new URLSearchParams({ limit: String(limit) });
    if (prefix) q.set("prefix", prefix);
    const page = await getJSON(cfg.listPath + "?" + q, signal);
    next = page.next || "";
    render(page.streams || []);
  };
  more.addEventListener("click", () => {
    limit = Math.min(limit + 100, 1000);
    load().catch(noteError);
  });
  let debounce = 0;
  input.addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => {
      const v = input.value.trim();
      history.replaceState(null, "", v ? "#/?prefix=" + encodeURIComponent(v) : "#/");
      prefix = v;
      limit = 100;
      load().catch(noteError);
    }, 200);
  });
  poll(load, signal);
}

// ---- the processors across streams --------------------------------------------------------------

// PROCESSOR_FILTERS are the processors page's filters: the states a host reports, and lagging
// (durable events left to reduce, whatever the state). "paused" shows when the server reports it.
const PROCESSOR_FILTERS = ["failing", "paused", "parked", "catching_up", "lagging", "unowned", "idle", "running"];
// MAX_PROCESSOR_PAGES bounds the pages of streams one refresh walks (of 100 streams each).
const MAX_PROCESSOR_PAGES = 10;

function processorsView(main, state, signal) {
  crumbs("", "processors");
  document.title = "Processors · foldstream";
  const filters = el("div", { class: "filters", role: "group", "aria-label": "filter by state" });
  const setFilter = (v) => {
    history.replaceState(null, "", v ? "#/processors?state=" + encodeURIComponent(v) : "#/processors");
    state = v;
    for (const b of filters.children) b.classList.toggle("on", b.dataset.state === v);
    load().catch(noteError);
  };
  for (const f of ["", ...PROCESSOR_FILTERS]) {
    filters.append(
      el("button", { type: "button", class: "ghost filter-chip" + (f === state ? " on" : ""), "data-state": f, text: f ? f.replace("_", " ") : "all", onclick: () => setFilter(f) }),
    );
  }
  const count = el("span", { class: "muted count" });
  const body = el("tbody");
  const table = el(
    "table",
    { class: "streams processors" },
    el(
      "thead",
      {},
      el(
        "tr",
        {},
        el("th", { text: "Stream" }),
        el("th", { text: "Processor" }),
        el("th", { text: "State" }),
        el("th", { class: "num through", text: "Through", title: "the offset it reduced through" }),
        el("th", { class: "num", text: "Lag", title: "durable events of the stream it consumes and has not processed yet" }),
        el("th", { class: "num", text: "Waiting", title: "how long the oldest event it has not processed has waited" }),
        el("th", { class: "when", text: "Owner" }),
        el("th", { class: "actions", text: "Actions" }),
      ),
    ),
    body,
  );
  const empty = el("div", { class: "empty", hidden: true });
  // The table scrolls sideways inside its card at phone width; the page never does.
  main.append(el("section", { class: "card" }, el("div", { class: "toolbar" }, filters, count), el("div", { class: "table-scroll" }, table), empty), bulkForm(() => load().catch(noteError)));

  const rows = new Map(); // stream + slug → {tr, detail, verbs, details}
  const render = (list, more) => {
    const seen = new Set();
    let before = null;
    for (let i = list.length - 1; i >= 0; i--) {
      const ps = list[i];
      const key = ps.stream + "\u0000" + ps.slug;
      seen.add(key);
      let row = rows.get(key);
      if (!row) {
        const tr = el(
          "tr",
          { "data-stream": ps.stream, "data-slug": ps.slug },
          el("td", { class: "path" }, el("a", { href: streamHash(ps.stream), text: ps.stream })),
          el("td", { class: "slug" }),
          el("td", { class: "pstate-cell" }),
          el("td", { class: "num through" }),
          el("td", { class: "num lag" }),
          el("td", { class: "num lag-seconds" }),
          el("td", { class: "when owner" }),
          el("td", { class: "actions" }),
        );
        row = { tr, detail: null, verbs: null, details: null };
        rows.set(key, row);
      }
      const { tr } = row;
      const [, slugTd, stateTd, offTd, lagTd, lagSecTd, ownerTd, actTd] = tr.children;
      slugTd.textContent = ps.slug + (ps.version ? " v" + ps.version : "");
      const st = ps.state || "running";
      const problem = statusProblem(ps);
      stateTd.replaceChildren(
        el("span", { class: "chip pstate " + st, title: STATE_TITLES[st] || "", text: st.replace("_", " ") }),
        problem ? el("div", { class: "problem small", text: problem }) : "",
      );
      offTd.textContent = String(ps.offset);
      offTd.title = "tail " + offsetPosition(ps.tail);
      // The lag the metrics report (docs/server.md#processor-listing): events and seconds.
      const approx = ps.lagEstimated || ps.lagUnknown;
      lagTd.textContent = (approx ? "≤ " : "") + Number(ps.lag || 0).toLocaleString();
      lagTd.title = plural(ps.lag || 0, "durable event") + (approx ? " at most" : "") + " to process";
      lagSecTd.textContent = ps.lagUnknown ? "?" : waited(ps.lagSeconds || 0);
      lagSecTd.title = ps.oldestUnprocessed ? "the oldest event it has not processed was committed at " + ps.oldestUnprocessed : "nothing to process";
      ownerTd.textContent = ps.owner ? ps.owner + (ps.local ? " (this node)" : "") : "—";
      // The verbs that apply in its state, and the details (audit, parked events) of any.
      // Rebuild goes with a next version registered and not switched in (docs/operations.md#rebuild-beside-the-running-version).
      const verbs = (VERBS_BY_STATE[st] || VERBS_BY_STATE.running).concat(ps.nextVersion || ps.rebuilding ? ["rebuild"] : []);
      if (row.verbs !== verbs.join()) {
        row.verbs = verbs.join();
        const reload = () => load().catch(noteError); // the row and its open details
        const toggle = (e) => {
          if (row.detail) {
            row.detail.remove();
            row.detail = null;
            row.details = null;
            e.target.setAttribute("aria-expanded", "false");
            e.target.textContent = "Details";
            return;
          }
          row.details = processorDetails(ps.stream, ps.slug, reload);
          row.detail = el("tr", { class: "detail", "data-detail-of": ps.stream + " " + ps.slug }, el("td", { colspan: "8" }, row.details.node));
          tr.after(row.detail);
          e.target.setAttribute("aria-expanded", "true");
          e.target.textContent = "Hide";
        };
        actTd.replaceChildren(
          ...verbs.map((v) => el("button", { type: "button", class: "verb " + v, "data-verb": v, text: VERB_LABELS[v], onclick: () => confirmVerb(v, ps.stream, ps.slug, reload, ps) })),
          el("button", { type: "button", class: "ghost details-btn", text: row.detail ? "Hide" : "Details", "aria-expanded": row.detail ? "true" : "false", onclick: toggle }),
        );
      }
      if (row.detail) {
        row.details.load(); // redrawn only when an answer changed
        body.insertBefore(row.detail, before);
        before = row.detail;
      }
      body.insertBefore(tr, before);
      before = tr;
    }
    for (const [k, row] of rows) {
      if (!seen.has(k)) {
        row.tr.remove();
        if (row.detail) row.detail.remove();
        rows.delete(k);
      }
    }
    count.textContent = list.length ? plural(list.length, "processor") + (more ? "+" : "") : "";
    table.hidden = list.length === 0;
    empty.hidden = list.length !== 0;
    if (list.length === 0) {
      empty.replaceChildren(el("p", { text: state ? `No processor is ${state.replace("_", " ")} now.` : "No processor runs on any stream." }));
    }
  };
  const load = async () => {
    const list = [];
    let after = "";
    let pages = 0;
    do {
      const q = new URLSearchParams({ limit: "100" });
      if (state) q.set("state", state);
      if (after) q.set("after", after);
      const page = await getJSON(cfg.processorsPath + "?" + q, signal);
      list.push(...(page.processors || []));
      after = page.next || "";
    } while (after && ++pages < MAX_PROCESSOR_PAGES);
    render(list, !!after);
  };
  poll(load, signal);
}

// ---- operator actions ---------------------------------------------------------------------------

// VERBS_BY_STATE are the verbs the processors page offers for a processor in each state
// (docs/operations.md#the-state-machine); the server refuses one that does not apply, and the
// confirmation shows its problem.
const VERBS_BY_STATE = {
  running: ["pause", "replay"],
  catching_up: ["pause", "replay"],
  idle: ["pause", "replay"],
  unowned: ["pause", "replay"],
  failing: ["retry", "skip", "pause", "replay"],
  paused: ["resume", "replay"],
  parked: ["replay"],
};

const VERB_LABELS = { pause: "Pause", resume: "Resume", retry: "Retry", replay: "Replay", skip: "Skip", rebuild: "Rebuild" };

// statusProblem is what a processor's status says is wrong, or "".
function statusProblem(ps) {
  if (ps.failing) return failingText(ps.failing);
  if (ps.parked) return `parked: ${ps.parked.code || ""} ${ps.parked.message || ""}`.trim();
  if (ps.paused) return `paused${ps.paused.by ? " by " + ps.paused.by : ""}${ps.paused.reason ? ": " + ps.paused.reason : ""}`;
  if (ps.waitingForStore) return storeWaitText(ps.waitingForStore);
  return "";
}

// Refusal is a refused request: its status and its RFC 9457 problem's title, detail and code.
class Refusal extends Error {
  constructor(status, title, detail, code) {
    super(detail || title);
    this.status = status;
    this.title = title;
    this.detail = detail;
    this.code = code;
  }
}

// refusal reads a refused answer's problem body (or its text when it is not one).
async function refusal(res) {
  const text = (await res.text().catch(() => "")).trim();
  let p = {};
  try {
    const v = JSON.parse(text);
    if (v && typeof v === "object") p = v;
  } catch {
    p = { detail: text };
  }
  return new Refusal(res.status, p.title || `HTTP ${res.status}`, p.detail || "", p.code || res.headers.get("Foldstream-Error-Code") || "");
}

// problemNode shows a refusal: the problem's title and code, its detail, and for a token that may
// not act, what token it takes.
function problemNode(err) {
  if (!(err instanceof Refusal)) return el("div", { class: "problem-box" }, el("div", { class: "p-detail", text: String(err.message || err) }));
  return el(
    "div",
    { class: "problem-box" },
    el("b", { class: "p-title", text: err.title }),
    err.code ? el("code", { class: "p-code", text: err.code }) : "",
    err.detail ? el("div", { class: "p-detail", text: err.detail }) : "",
    err.status === 401 || err.status === 403 ? el("div", { class: "p-hint", text: "Your token does not allow operator actions: use a token of the ops scope (under Token)." }) : "",
  );
}

// operate sends an operator's verb (POST with ?op=…) and returns its JSON answer, or throws a
// Refusal.
async function operate(url, params) {
  const res = await fetch(url + "?" + new URLSearchParams(params), { method: "POST", headers: authHeaders(), cache: "no-store" });
  if (!res.ok) throw await refusal(res);
  return res.json();
}

// readOps reads an ops route (the audit, the parked events) and returns its JSON, or throws a
// Refusal.
async function readOps(url, params) {
  const res = await fetch(url + "?" + new URLSearchParams(params), { headers: authHeaders(), cache: "no-store" });
  if (!res.ok) throw await refusal(res);
  return res.json();
}

// confirmAction opens the confirmation: title and text, the extra fields, the reason and the
// button okText. prepare, when given, runs first (the bulk verbs' dry run): the button waits for
// it and its text replaces text; a refusal shows its problem and leaves nothing to confirm. On the
// button, run(reason) sends the verb: its answer closes the dialog and done(answer) says what
// happened; a refusal stays in the dialog with its problem. Cancel sends nothing.
function confirmAction({ title, text, fields = [], okText, prepare, run, done }) {
  const dlg = $("confirm");
  $("confirm-title").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-fields").replaceChildren(...fields);
  $("confirm-reason").value = "";
  $("confirm-error").replaceChildren();
  const ok = $("confirm-ok");
  const cancel = $("confirm-cancel");
  ok.textContent = okText;
  ok.disabled = false;
  let open = true;
  const close = () => {
    open = false;
    ok.onclick = null;
    cancel.onclick = null;
    dlg.close();
  };
  cancel.onclick = close;
  // The close event comes after close() returned, as a task of its own: a confirmation closed and
  // opened again at once gets the old one's close while the dialog is open again, which must not
  // end the new one (its count would never show). Only a close that left the dialog closed does.
  dlg.onclose = () => {
    if (!dlg.open) open = false;
  };
  ok.onclick = async () => {
    ok.disabled = true;
    $("confirm-error").replaceChildren();
    try {
      const answer = await run($("confirm-reason").value.trim());
      close();
      done(answer);
    } catch (err) {
      $("confirm-error").replaceChildren(problemNode(err));
    } finally {
      ok.disabled = false;
    }
  };
  dlg.showModal();
  if (prepare) {
    ok.disabled = true;
    prepare().then(
      (t) => {
        if (!open) return;
        $("confirm-text").textContent = t;
        ok.disabled = false;
      },
      (err) => {
        if (open) $("confirm-error").replaceChildren(problemNode(err));
      },
    );
  }
}

// confirmVerb asks for a confirmation of verb on processor slug of stream, then sends it; then
// refreshes what shows the processor.
function confirmVerb(verb, stream, slug, then, ps) {
  const url = processorURL(slug, stream);
  const finish = (msg) => {
    showNote(msg);
    then();
  };
  const send = (params) => (reason) => operate(url, reason ? { ...params, reason } : params);
  switch (verb) {
    case "retry":
      confirmAction({
        title: `Retry ${slug} now?`,
        text: `The processor ${slug} on ${stream} runs its failing event again at once, instead of at its next retry time. Its effects may run again.`,
        okText: "Retry now",
        run: send({ op: "retry" }),
        done: () => finish(`Retry asked of ${slug} on ${stream}.`),
      });
      return;
    case "pause":
      confirmAction({
        title: `Pause ${slug}?`,
        text: `The processor ${slug} on ${stream} stops taking work on every node until it is resumed: the event in progress finishes, appends still land. Say why for the next operator.`,
        okText: "Pause",
        run: send({ op: "pause" }),
        done: () => finish(`Paused ${slug} on ${stream}.`),
      });
      return;
    case "resume":
      confirmAction({
        title: `Resume ${slug}?`,
        text: `The processor ${slug} on ${stream} catches up from its checkpoint with everything appended while it was paused, running each event once.`,
        okText: "Resume",
        run: send({ op: "resume" }),
        done: () => finish(`Resumed ${slug} on ${stream}: it catches up from its checkpoint.`),
      });
      return;
    case "skip":
      confirmAction({
        title: `Skip the failing event of ${slug}?`,
        text: `The processor ${slug} on ${stream} goes on past the event it fails on, which is kept in its parked events: redrive it there once the cause is fixed, or discard it.`,
        okText: "Skip",
        run: send({ op: "skip" }),
        done: (a) => {
          const off = a?.parked?.offset;
          finish(`Skipped ${off !== undefined ? "the event at offset " + off : "the failing event"} of ${slug} on ${stream}: it is parked.`);
        },
      });
      return;
    case "rebuild": {
      const next = ps?.nextVersion || ps?.rebuilding?.version || "";
      confirmAction({
        title: `Rebuild ${slug}${next ? " v" + next : ""}?`,
        text: `The next version${next ? " (v" + next + ")" : ""} of ${slug} on ${stream} folds the log beside the running one, which goes on answering reads and running effects; once it has caught up it is switched in and runs from there. Asked again, it reports how far the rebuild is.`,
        okText: "Rebuild",
        run: send({ op: "rebuild" }),
        done: (a) => {
          const r = a?.rebuild || {};
          finish(r.switched ? `${slug} on ${stream} runs version ${r.version}.` : `Rebuilding ${slug} v${r.version || next} on ${stream}: at offset ${r.offset ?? 0}.`);
        },
      });
      return;
    }
    case "replay": {
      const from = el("input", { id: "confirm-from", type: "number", min: "0", step: "1", value: "0", inputmode: "numeric" });
      const effects = el("select", { id: "confirm-effects" }, el("option", { value: "none", text: "none: rebuild the state only" }), el("option", { value: "again", text: "again: run the effects of the range once more" }));
      confirmAction({
        title: `Replay ${slug}?`,
        text: `The state of ${slug} on ${stream} is rebuilt from the log. With effects none nothing runs again; with effects again every event from the offset on runs its effects once more.`,
        fields: [el("label", { for: "confirm-from", text: "From offset (0: the start of the log)" }), from, el("label", { for: "confirm-effects", text: "Effects" }), effects],
        okText: "Replay",
        run: (reason) => {
          const n = from.value.trim() === "" ? 0 : Number(from.value);
          if (!Number.isInteger(n) || n < 0) return Promise.reject(new Error("From must be a whole number, 0 or more."));
          return send({ op: "replay", from: String(n), effects: effects.value })(reason);
        },
        done: (a) => finish(`Replayed ${slug} on ${stream} from ${a.from} through ${a.through} (effects ${a.effects}, ${plural(a.reduced || 0, "event")} folded).`),
      });
      return;
    }
  }
}

// BULK_VERBS say, for each bulk verb, which streams it changes (as its dry run counts them) and
// what was done (docs/operations.md#bulk-verbs).
const BULK_VERBS = {
  pause: { would: "pause", which: "those not paused yet", done: "Paused" },
  resume: { would: "resume", which: "the paused ones", done: "Resumed" },
  retry: { would: "retry now", which: "the failing ones", done: "Retry asked of" },
  skip: { would: "skip the failing event (parking it)", which: "the failing ones", done: "Skipped the failing event of" },
  rebuild: { would: "rebuild its next version", which: "those not switched to the next version yet", done: "Rebuild started of" },
};

// bulkForm is the processors page's bulk verbs: pause, resume, retry, skip or rebuild processor
// slug on every stream a path pattern matches. Its confirmation first shows the dry run's count,
// then runs the verb.
function bulkForm(then) {
  const slug = el("input", { id: "bulk-slug", type: "text", placeholder: "slug, e.g. cart", "aria-label": "processor slug", spellcheck: "false", required: true });
  const pattern = el("input", { id: "bulk-pattern", type: "text", placeholder: "pattern, e.g. /carts/*", "aria-label": "path pattern", spellcheck: "false", required: true });
  const open = (op) => {
    const s = slug.value.trim();
    const p = pattern.value.trim();
    if (!s || !p) {
      showNote("Give a processor slug and a path pattern.");
      return;
    }
    const url = cfg.processorPrefix + encodeURIComponent(s) + "/";
    const bv = BULK_VERBS[op];
    confirmAction({
      title: `${VERB_LABELS[op]} ${s} on ${p}?`,
      text: `Counting the streams ${p} matches…`,
      okText: `${VERB_LABELS[op]} them`,
      prepare: async () => {
        const d = await operate(url, { op, pattern: p, dryRun: "1" });
        return `A dry run: ${s} would ${bv.would} on ${plural(d.changed, "stream")} of the ${plural(d.matched, "stream")} ${p} matches where it runs (${bv.which}).`;
      },
      run: (reason) => operate(url, reason ? { op, pattern: p, reason } : { op, pattern: p }),
      done: (a) => {
        showNote(`${bv.done} ${s} on ${a.changed} of ${plural(a.matched, "stream")} matching ${p}` + (a.failed ? `; ${a.failed} failed: ${a.firstError || ""}` : "."));
        then();
      },
    });
  };
  return el(
    "section",
    { class: "card bulk" },
    el("h2", { text: "Bulk" }),
    el("p", { class: "muted small", text: "Pause, resume, retry, skip or rebuild one processor on every stream a path pattern matches. The confirmation shows how many it would change first." }),
    el(
      "div",
      { class: "row" },
      slug,
      pattern,
      el("button", { type: "button", class: "bulk-pause", text: "Pause…", onclick: () => open("pause") }),
      el("button", { type: "button", class: "bulk-resume", text: "Resume…", onclick: () => open("resume") }),
      el("button", { type: "button", class: "bulk-retry", text: "Retry…", onclick: () => open("retry") }),
      el("button", { type: "button", class: "bulk-skip", text: "Skip…", onclick: () => open("skip") }),
      el("button", { type: "button", class: "bulk-rebuild", text: "Rebuild…", onclick: () => open("rebuild") }),
    ),
  );
}

// processorDetails is a processor's audit (the operators' verbs on it, newest first) and its
// parked events, each with Redrive and Discard, and Redrive all. Both need a token of the ops
// scope; a refusal shows its problem in place.
function processorDetails(stream, slug, then) {
  const url = processorURL(slug, stream);
  const audit = el("div", { class: "audit" });
  const parked = el("div", { class: "parked-events" });
  const node = el("div", { class: "details" }, el("div", {}, el("h3", { text: "Parked events" }), parked), el("div", {}, el("h3", { text: "Audit" }), audit));
  const finish = (msg) => {
    showNote(msg);
    then();
  };
  const redrive = (offset) =>
    confirmAction({
      title: offset === undefined ? `Redrive every parked event of ${slug}?` : `Redrive the event at offset ${offset}?`,
      text: `The processor ${slug} on ${stream} processes ${offset === undefined ? "its parked events, in offset order," : "the parked event"} again at the state it has reached, effects included; ${offset === undefined ? "each that succeeds leaves the list, and the first that fails again stays with the ones after it" : "if it succeeds it leaves the list, if it fails again it stays"}.`,
      okText: "Redrive",
      run: (reason) => operate(url, { op: "redrive", ...(offset === undefined ? {} : { offset: String(offset) }), ...(reason ? { reason } : {}) }),
      done: (a) => {
        const done = (a && a.redriven) || [];
        finish(`Redrove ${done.length === 1 ? "the event at offset " + done[0] : plural(done.length, "parked event") + (done.length ? " (offsets " + done.join(", ") + ")" : "")} of ${slug} on ${stream}: processed, off the list.`);
      },
    });
  const discard = (offset) =>
    confirmAction({
      title: `Discard the event at offset ${offset}?`,
      text: `The parked event leaves ${slug}'s list on ${stream} without being processed: its effects never run. The event stays in the stream's log.`,
      okText: "Discard",
      run: (reason) => operate(url, { op: "discard", offset: String(offset), ...(reason ? { reason } : {}) }),
      done: () => finish(`Discarded the event at offset ${offset} of ${slug} on ${stream}.`),
    });
  // Each list is redrawn only when its answer changed, so a refresh never moves a button away.
  const seen = { parked: null, audit: null };
  const changed = (k, v) => {
    const j = JSON.stringify(v);
    if (seen[k] === j) return false;
    seen[k] = j;
    return true;
  };
  const loadParked = async () => {
    let list;
    try {
      const a = await readOps(url, { parked: "1" });
      if (!changed("parked", a && a.parked)) return;
      // A server without parked events answers the plain snapshot here: no parked member.
      if (!a || typeof a !== "object" || !("parked" in a)) {
        parked.replaceChildren(el("p", { class: "muted small", text: "This server keeps no parked events." }));
        return;
      }
      list = a.parked || [];
    } catch (err) {
      if (changed("parked", { refused: err.message })) parked.replaceChildren(problemNode(err));
      return;
    }
    if (list.length === 0) {
      parked.replaceChildren(el("p", { class: "muted small", text: "No parked events." }));
      return;
    }
    parked.replaceChildren(
      el(
        "table",
        { class: "parked-list" },
        el("thead", {}, el("tr", {}, ...["Offset", "Type", "Error", "Attempts", "Parked", "By", "Reason", ""].map((h) => el("th", { text: h })))),
        el(
          "tbody",
          {},
          ...list.map((p) =>
            el(
              "tr",
              { "data-offset": String(p.offset) },
              el("td", { class: "num", text: String(p.offset) }),
              el("td", { text: p.type || "" }),
              el("td", { class: "problem small", text: `${p.code || ""} ${p.message || ""}`.trim() }),
              el("td", { class: "num", text: String(p.attempts ?? "") }),
              el("td", { class: "when", title: p.at || "", text: ago(p.at) + (p.node ? " on " + p.node : "") }),
              el("td", { text: p.by || "" }),
              el("td", { text: p.reason || "" }),
              el(
                "td",
                { class: "actions" },
                el("button", { type: "button", class: "redrive", text: "Redrive", onclick: () => redrive(p.offset) }),
                el("button", { type: "button", class: "discard", text: "Discard", onclick: () => discard(p.offset) }),
              ),
            ),
          ),
        ),
      ),
      el("button", { type: "button", class: "redrive-all", text: "Redrive all", onclick: () => redrive(undefined) }),
    );
  };
  const loadAudit = async () => {
    let recs;
    try {
      recs = (await readOps(url, { audit: "1", limit: "20" })).audit || [];
    } catch (err) {
      if (changed("audit", { refused: err.message })) audit.replaceChildren(problemNode(err));
      return;
    }
    if (!changed("audit", recs)) return;
    if (recs.length === 0) {
      audit.replaceChildren(el("p", { class: "muted small", text: "No operator has acted on it yet." }));
      return;
    }
    audit.replaceChildren(
      el(
        "table",
        { class: "audit-list" },
        el("thead", {}, el("tr", {}, ...["When", "Who", "Verb", "On", "Reason", "Outcome", "Node"].map((h) => el("th", { text: h })))),
        el(
          "tbody",
          {},
          ...recs.map((r) =>
            el(
              "tr",
              { "data-op": r.op },
              el("td", { class: "when", title: r.at || "", text: ago(r.at) }),
              el("td", { text: r.actor || "—" }),
              el("td", { class: "op", text: r.op }),
              el("td", { class: "path", text: r.path }),
              el("td", { class: "reason", text: r.reason || "" }),
              el("td", { class: "outcome" + (String(r.outcome).startsWith("refused") ? " problem" : ""), text: r.outcome }),
              el("td", { text: r.node || "" }),
            ),
          ),
        ),
      ),
    );
  };
  const load = () => Promise.all([loadParked(), loadAudit()]);
  load();
  return { node, load };
}

// showNote shows a short confirmation under the bar for a few seconds.
function showNote(text) {
  const n = $("note");
  n.textContent = text;
  n.hidden = false;
  clearTimeout(showNote.timer);
  showNote.timer = setTimeout(() => (n.hidden = true), 4000);
}

// ---- one stream ---------------------------------------------------------------------------------

function streamView(main, p, signal) {
  crumbs(p);
  document.title = p + " · foldstream";
  const meta = el("div", { class: "meta" });
  const procs = el("div", { class: "procs" });
  const msgs = el("ol", { class: "messages", reversed: true });
  const msgNote = el("p", { class: "muted small" });
  // The platform's own records are hidden unless the toggle shows them (kept for the tab).
  const showPlatform = el("input", { type: "checkbox", id: "show-platform" });
  showPlatform.checked = sessionStorage.getItem(PLATFORM_KEY) === "1";
  const hiddenCount = el("span", { class: "muted small platform-count" });
  const applyPlatform = () => {
    msgs.classList.toggle("hide-platform", !showPlatform.checked);
    const n = msgs.querySelectorAll("li.platform").length;
    hiddenCount.textContent = !showPlatform.checked && n ? `(${plural(n, "platform record")} hidden)` : "";
  };
  showPlatform.addEventListener("change", () => {
    sessionStorage.setItem(PLATFORM_KEY, showPlatform.checked ? "1" : "0");
    applyPlatform();
  });
  msgs.addEventListener("messages", applyPlatform);
  applyPlatform();
  const platformToggle = el(
    "label",
    { class: "platform-toggle small", title: "records the platform writes itself: " + PLATFORM_PREFIX + "*" },
    showPlatform,
    " platform records ",
    hiddenCount,
  );
  const header = el("section", { class: "card head" }, el("h1", { class: "path", text: p }), meta);
  main.append(
    header,
    el(
      "div",
      { class: "grid" },
      el("section", { class: "card col-procs" }, el("h2", { text: "Processors" }), procs),
      el("section", { class: "card col-msgs" }, el("h2", {}, "Messages ", el("span", { class: "live-dot", title: "following live" }), platformToggle), msgNote, msgs),
    ),
  );

  let info = null;
  let following = false;
  const cards = new Map(); // slug → {node, follower, update}
  const renderMeta = () => {
    meta.replaceChildren(
      el("span", { class: "chip", title: info.contentType, text: shortType(info.contentType) }),
      el("span", { title: info.tail }, isJSONType(info.contentType) ? "tail offset " : "tail ", el("b", { text: tailText(info) })),
      el("span", { title: info.createdAt || "" }, "created ", el("b", { text: ago(info.createdAt) })),
      info.closed ? el("span", { class: "chip closed", text: "closed" }) : "",
      pausedChip(info),
    );
  };
  const renderProcs = () => {
    const list = info.processors || [];
    if (!cfg.processorPrefix) {
      procs.replaceChildren(el("p", { class: "muted", text: "This server runs no processor host. Processors are Go code: embed a host with the server (see examples/hosted) to see their live state here." }));
      return;
    }
    const seen = new Set();
    for (const ps of list) {
      seen.add(ps.slug);
      let c = cards.get(ps.slug);
      if (!c) {
        c = processorCard(p, ps, signal);
        cards.set(ps.slug, c);
        procs.append(c.node);
      }
      c.status(ps);
    }
    for (const [slug, c] of cards) {
      if (!seen.has(slug)) {
        c.close();
        c.node.remove();
        cards.delete(slug);
      }
    }
    if (list.length === 0) procs.replaceChildren(el("p", { class: "muted", text: "No processor runs on this stream." }));
    else [...procs.children].forEach((n) => n.tagName === "P" && n.remove());
  };
  signal.addEventListener("abort", () => cards.forEach((c) => c.close()));

  const load = async () => {
    info = await getJSON(cfg.infoPath + "?" + new URLSearchParams({ path: p }), signal);
    renderMeta();
    renderProcs();
    if (!following) {
      following = true;
      followMessages(p, info, msgs, msgNote, signal);
    }
  };
  poll(
    () =>
      load().catch((err) => {
        if (err instanceof HTTPError && err.status === 404) {
          meta.replaceChildren(el("span", { class: "muted", text: "This stream does not exist (any more)." }));
          return;
        }
        throw err;
      }),
    signal,
  );
}

function processorCard(p, ps, signal) {
  const rev = el("b", { class: "rev" });
  const off = el("b", { class: "off" });
  const owner = el("span", { class: "owner" });
  const pstate = el("span", { class: "chip pstate" });
  const st = el("span", { class: "pstatus" });
  const parked = el("div", { class: "parked", hidden: true });
  const pre = el("pre", { class: "state" });
  const node = el(
    "article",
    { class: "proc", "data-slug": ps.slug },
    el(
      "header",
      {},
      el("span", { class: "slug", text: ps.slug }),
      ps.version ? el("span", { class: "chip", title: "contract version", text: "v" + ps.version }) : "",
      ps.pattern && ps.pattern !== p ? el("span", { class: "pattern", title: "registered on this pattern", text: ps.pattern }) : "",
      pstate,
      st,
    ),
    el("div", { class: "pmeta" }, el("span", {}, "rev ", rev), el("span", {}, "through offset ", off), owner),
    parked,
    pre,
  );
  let held;
  let first = true;
  const follower = followLiveState(processorURL(ps.slug, p), {
    headers: authHeaders(),
    onState(state, r) {
      pre.innerHTML = stateHTML(state, first ? UNCHANGED : held);
      held = state;
      rev.textContent = String(r);
      rev.title = "live-state revision " + r;
      if (!first) flash(node);
      first = false;
    },
    onStatus(s) {
      st.textContent = s === "live" ? "" : s;
      st.className = "pstatus " + s;
    },
    onError: noteError,
  });
  signal.addEventListener("abort", () => follower.close());
  return {
    node,
    close: () => follower.close(),
    status(ps) {
      off.textContent = String(ps.offset);
      // One state, the same on every node: running, catching up, failing, parked, idle, unowned.
      const state = ps.state || "running";
      pstate.textContent = state.replace("_", " ");
      pstate.className = "chip pstate " + state;
      pstate.title = STATE_TITLES[state] || "";
      // The node that runs it (its lease holder) and the lease's generation, on every node.
      owner.textContent = ps.owner ? `on ${ps.owner}${ps.local ? " (this node)" : ""} · lease ${ps.generation}` : "no owner now";
      const lines = [];
      if (ps.parked) lines.push(`parked: ${ps.parked.code || ""} ${ps.parked.message || ""}`.trim());
      else if (ps.failing) lines.push(failingText(ps.failing));
      else if (ps.workFailed) lines.push(`work failed: ${ps.workFailed.code || ""} ${ps.workFailed.message || ""}`.trim());
      if (ps.waitingForStore) lines.push(storeWaitText(ps.waitingForStore));
      for (const sk of ps.skipped || []) {
        lines.push(`skipped ${plural(sk.count, "event")} (${sk.reason}), last at offset ${sk.lastOffset}: ${sk.lastError}`);
      }
      parked.hidden = lines.length === 0;
      parked.textContent = lines.join("\n");
      // No state to show while the processor's routes refuse: the state box says why.
      if (first && (ps.failing || ps.parked)) pre.textContent = lines[0];
    },
  };
}

// STATE_TITLES explains each processor state (ProcessorStatus.State).
const STATE_TITLES = {
  running: "its owner's engine follows the stream",
  catching_up: "its owner's engine reads the log from its checkpoint (just started or taken over)",
  failing: "its ProcessEvent keeps failing on one event; retried with backoff",
  parked: "stopped on an error it cannot retry past",
  idle: "no node runs it: nothing to do until the stream's next event",
  unowned: "no node holds its lease; the preferred node takes it over shortly",
};

// failingText says what fails where and what happens next, from a status's failing field.
function failingText(f) {
  const next = f.nextRetry ? new Date(f.nextRetry).toLocaleTimeString() : "?";
  return `failing at offset ${f.offset}: ${f.code || ""} ${f.message || ""} (attempt ${f.attempts}, next retry ${next})`;
}

// storeWaitText says which write (or log read) of a processor waits for the store's database (its
// engine sends it again, or its host reads again; the processor is not failing), since when and
// until when, or when next.
function storeWaitText(w) {
  const since = new Date(w.since).toLocaleTimeString();
  const line = `waiting for the database since ${since}: its ${w.write} was refused (${w.code}), ${w.attempts} attempts; `;
  if (!w.givesUpAt) return line + `tried again at ${new Date(w.nextRetry).toLocaleTimeString()}`;
  return line + `sent again until ${new Date(w.givesUpAt).toLocaleTimeString()}`;
}

// followMessages shows the last messages of the stream and follows it over SSE, resuming from the
// last offset when the server ends a connection, until the stream closes or signal aborts.
async function followMessages(p, info, list, note, signal) {
  const json = isJSONType(info.contentType);
  const text = isTextType(info.contentType);
  const tail = offsetPosition(info.tail);
  const span = json ? FIRST_MESSAGES : 16384;
  let pos = Math.max(0, tail - span);
  note.textContent = pos > 0 ? `Showing from ${json ? "offset" : "byte"} ${pos.toLocaleString()} on; newest first.` : "Newest first.";
  const add = (label, content) => {
    const li = el("li", {}, label ? el("span", { class: "off", text: label }) : "", content);
    list.prepend(li);
    if (list.children.length > KEEP_MESSAGES) list.lastElementChild.remove();
    return li;
  };
  let backoff = 500;
  while (!signal.aborted) {
    try {
      const res = await fetch(streamURL(p) + "?" + new URLSearchParams({ offset: formatOffset(pos), live: "sse" }), {
        headers: authHeaders(),
        signal,
        cache: "no-store",
      });
      if (!res.ok) {
        const msg = await answerText(res);
        throw new HTTPError(res.status, msg || `HTTP ${res.status}`, res.headers.get("Foldstream-Error-Code"));
      }
      let closed = false;
      const fresh = [];
      await readEventStream(res.body, (ev) => {
        backoff = 500;
        if (ev.event === "data") {
          if (json) {
            let arr;
            try {
              arr = JSON.parse(ev.data);
            } catch {
              arr = [ev.data];
            }
            // No per-message offsets: the processors' ephemeral events take offsets too, so
            // counting messages would mislabel them.
            for (const m of Array.isArray(arr) ? arr : [arr]) {
              const li = add("", messageNode(m));
              if (isPlatformRecord(m)) li.classList.add("platform");
              fresh.push(li);
            }
            list.dispatchEvent(new Event("messages"));
          } else if (text) {
            fresh.push(add("@" + pos, el("code", { class: "text", text: ev.data })));
          } else {
            const n = Math.floor((ev.data.replace(/\s/g, "").length * 3) / 4);
            fresh.push(add("@" + pos, el("span", { class: "muted", text: plural(n, "byte") })));
          }
        } else if (ev.event === "control") {
          const c = JSON.parse(ev.data);
          pos = offsetPosition(c.streamNextOffset);
          closed = !!c.streamClosed;
          if (list.dataset.ready) fresh.forEach(flash);
          fresh.length = 0;
          list.dataset.ready = "1";
        }
      });
      if (closed) {
        note.textContent = "The stream is closed: no more messages will come.";
        return;
      }
    } catch (err) {
      if (signal.aborted) return;
      noteError(err);
      if (err instanceof HTTPError && err.status >= 400 && err.status < 500 && err.status !== 408 && err.status !== 429) return;
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 30000);
    }
  }
}

// isPlatformRecord reports whether a JSON message is an event the platform wrote itself.
function isPlatformRecord(m) {
  return m !== null && typeof m === "object" && typeof m.type === "string" && m.type.startsWith(PLATFORM_PREFIX);
}

function messageNode(m) {
  const isEvent = m !== null && typeof m === "object" && !Array.isArray(m) && typeof m.type === "string";
  const body = isEvent ? (m.payload === undefined ? null : m.payload) : m;
  const compact = JSON.stringify(body);
  const short = compact.length > 240 ? compact.slice(0, 240) + "…" : compact;
  const code = el("code", { class: "msg", text: short });
  const node = el("div", { class: "mbody" }, isEvent ? el("span", { class: "type", text: m.type }) : "", code);
  if (compact.length > 60 || isEvent) {
    node.classList.add("expandable");
    node.title = "click to expand";
    node.addEventListener("click", () => {
      const open = node.classList.toggle("open");
      code.textContent = open ? JSON.stringify(m, null, 2) : short;
    });
  }
  return node;
}

route();
