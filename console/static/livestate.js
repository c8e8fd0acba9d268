// livestate.js — follow a foldstream processor's live state from a browser (or Node 18+).
//
// One dependency-free ES module, served by foldstream at /console/livestate.js:
//
//   import { followLiveState } from "/console/livestate.js";
//   const follower = followLiveState("/v1/processor/counter/counters/a", {
//     onState(state, rev) { render(state); },
//   });
//   // later: follower.close();
//
// The server's live route (GET <processor URL>?live=sse) sends a "seed" event {rev, state} and then
// one "delta" event {from, to, patch} per change, where patch is an RFC 6902 JSON Patch turning the
// state at revision `from` into the state at revision `to`. The rule for a follower (see
// docs/console.md#the-live-state-module): apply a delta only when its `from` equals the revision
// held; ignore one whose `to` is not past it (already in the seed); on anything else — a gap, a
// `null` patch (the server sends null when the patch would be too large), or a patch that does not
// apply — the chain is broken: fetch a fresh seed (GET <processor URL>?view=live) and continue from
// it. States passed to onState are never mutated afterwards: each change builds new objects along
// the changed paths and shares the unchanged parts with the previous state.

/** PatchError is thrown by applyPatch when an operation cannot be applied. */
export class PatchError extends Error {
  constructor(message) {
    super(message);
    this.name = "PatchError";
  }
}

// parsePointer splits an RFC 6901 JSON Pointer into unescaped tokens.
function parsePointer(pointer) {
  if (pointer === "") return [];
  if (typeof pointer !== "string" || pointer[0] !== "/") {
    throw new PatchError(`invalid JSON pointer ${JSON.stringify(pointer)}`);
  }
  return pointer
    .slice(1)
    .split("/")
    .map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
}

function isContainer(v) {
  return v !== null && typeof v === "object";
}

function arrayIndex(arr, token, forAdd) {
  if (forAdd && token === "-") return arr.length;
  if (!/^(0|[1-9][0-9]*)$/.test(token)) throw new PatchError(`invalid array index ${JSON.stringify(token)}`);
  const i = Number(token);
  const max = forAdd ? arr.length : arr.length - 1;
  if (i > max) throw new PatchError(`array index ${i} out of range`);
  return i;
}

function hasOwn(obj, key) {
  return Object.prototype.hasOwnProperty.call(obj, key);
}

function shallowCopy(v) {
  return Array.isArray(v) ? v.slice() : Object.assign({}, v);
}

// getAt returns the value at tokens in doc, or throws.
function getAt(doc, tokens) {
  let cur = doc;
  for (const t of tokens) {
    if (Array.isArray(cur)) cur = cur[arrayIndex(cur, t, false)];
    else if (isContainer(cur) && hasOwn(cur, t)) cur = cur[t];
    else throw new PatchError(`path /${tokens.join("/")} does not exist`);
  }
  return cur;
}

// updateAt returns a copy of doc where the container holding the last token was replaced by
// edit(copyOfContainer, lastToken); only the containers on the path are copied.
function updateAt(doc, tokens, edit) {
  if (tokens.length === 0) throw new PatchError("the root has no parent");
  const walk = (node, depth) => {
    if (!isContainer(node)) throw new PatchError(`path /${tokens.slice(0, depth).join("/")} is not a container`);
    const copy = shallowCopy(node);
    const t = tokens[depth];
    if (depth === tokens.length - 1) {
      edit(copy, t);
      return copy;
    }
    let key = t;
    if (Array.isArray(copy)) key = arrayIndex(copy, t, false);
    else if (!hasOwn(copy, t)) throw new PatchError(`path /${tokens.slice(0, depth + 1).join("/")} does not exist`);
    copy[key] = walk(copy[key], depth + 1);
    return copy;
  };
  return walk(doc, 0);
}

function addAt(doc, tokens, value) {
  if (tokens.length === 0) return value;
  return updateAt(doc, tokens, (c, t) => {
    if (Array.isArray(c)) c.splice(arrayIndex(c, t, true), 0, value);
    else c[t] = value;
  });
}

function removeAt(doc, tokens) {
  if (tokens.length === 0) throw new PatchError("cannot remove the root");
  return updateAt(doc, tokens, (c, t) => {
    if (Array.isArray(c)) c.splice(arrayIndex(c, t, false), 1);
    else if (hasOwn(c, t)) delete c[t];
    else throw new PatchError(`path /${tokens.join("/")} does not exist`);
  });
}

function replaceAt(doc, tokens, value) {
  if (tokens.length === 0) return value;
  return updateAt(doc, tokens, (c, t) => {
    if (Array.isArray(c)) c[arrayIndex(c, t, false)] = value;
    else if (hasOwn(c, t)) c[t] = value;
    else throw new PatchError(`path /${tokens.join("/")} does not exist`);
  });
}

/** deepEqual compares two JSON values (object member order does not matter). */
export function deepEqual(a, b) {
  if (a === b) return true;
  if (!isContainer(a) || !isContainer(b)) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    if (a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (!deepEqual(a[i], b[i])) return false;
    return true;
  }
  const ka = Object.keys(a);
  if (ka.length !== Object.keys(b).length) return false;
  for (const k of ka) if (!hasOwn(b, k) || !deepEqual(a[k], b[k])) return false;
  return true;
}

/**
 * applyPatch applies an RFC 6902 JSON Patch (add, remove, replace, move, copy, test) to doc and
 * returns the new document. doc is not modified: containers on changed paths are copied, the rest
 * is shared. It throws PatchError when an operation does not apply; the patch is then applied not
 * at all.
 */
export function applyPatch(doc, patch) {
  if (!Array.isArray(patch)) throw new PatchError("a patch must be an array of operations");
  let cur = doc;
  for (const op of patch) {
    if (!isContainer(op) || typeof op.op !== "string") throw new PatchError("an operation must be an object with an op");
    const path = parsePointer(op.path);
    switch (op.op) {
      case "add":
        if (!hasOwn(op, "value")) throw new PatchError("add needs a value");
        cur = addAt(cur, path, op.value);
        break;
      case "remove":
        cur = removeAt(cur, path);
        break;
      case "replace":
        if (!hasOwn(op, "value")) throw new PatchError("replace needs a value");
        cur = replaceAt(cur, path, op.value);
        break;
      case "move": {
        const from = parsePointer(op.from);
        if (from.length < path.length && from.every((t, i) => t === path[i])) {
          throw new PatchError("cannot move a value into itself");
        }
        const v = getAt(cur, from);
        cur = addAt(removeAt(cur, from), path, v);
        break;
      }
      case "copy":
        cur = addAt(cur, path, getAt(cur, parsePointer(op.from)));
        break;
      case "test":
        if (!deepEqual(getAt(cur, path), op.value)) throw new PatchError(`test failed at ${op.path}`);
        break;
      default:
        throw new PatchError(`unknown op ${JSON.stringify(op.op)}`);
    }
  }
  return cur;
}

/**
 * LiveStateChain holds one processor's live state and applies the server's events to it. It does
 * no I/O, so it can be tested and reused on its own: feed it seeds and deltas; when delta() answers
 * "reseed", fetch a fresh seed and pass it to seed(). Deltas that arrive while a re-seed is pending
 * are kept and applied after the seed when they follow it.
 */
export class LiveStateChain {
  constructor() {
    /** rev is the revision of state; null before the first seed. */
    this.rev = null;
    /** state is the live state at rev. */
    this.state = undefined;
    /** reseeding is true between delta() answering "reseed" and the next seed(). */
    this.reseeding = false;
    this.pending = [];
  }

  /**
   * seed replaces the state with {rev, state}. It returns true when the held state changed, and
   * applies deltas kept during a re-seed that follow the new revision.
   */
  seed(s) {
    if (!isContainer(s) || typeof s.rev !== "number") throw new PatchError("a seed is {rev, state}");
    const changed = this.rev !== s.rev || !deepEqual(this.state, s.state);
    this.rev = s.rev;
    this.state = s.state === undefined ? null : s.state;
    this.reseeding = false;
    const kept = this.pending;
    this.pending = [];
    let applied = false;
    for (const d of kept) {
      const r = this.delta(d);
      if (r === "applied") applied = true;
      if (r === "reseed") break;
    }
    return changed || applied;
  }

  /**
   * delta applies one {from, to, patch} event and answers "applied" (the state moved to rev
   * `to`), "stale" (nothing to do: already in the state held) or "reseed" (the chain is broken:
   * a gap, a null patch, or a patch that does not apply; the state is unchanged until the next
   * seed).
   */
  delta(d) {
    if (!isContainer(d) || typeof d.from !== "number" || typeof d.to !== "number") return this.broken(null);
    if (this.reseeding || this.rev === null) {
      this.pending.push(d);
      if (this.pending.length > 1000) this.pending.shift();
      return this.rev === null && !this.reseeding ? "stale" : "reseed";
    }
    if (d.to <= this.rev) return "stale";
    if (d.patch === null || d.patch === undefined) return this.broken(null);
    // A delta from a later revision may still follow the seed the re-seed brings: keep it.
    if (d.from !== this.rev) return this.broken(d.from > this.rev ? d : null);
    try {
      this.state = applyPatch(this.state, d.patch);
    } catch (err) {
      if (err instanceof PatchError) return this.broken(null);
      throw err;
    }
    this.rev = d.to;
    return "applied";
  }

  broken(keep) {
    this.reseeding = true;
    if (keep) this.pending.push(keep);
    return "reseed";
  }
}

/**
 * readEventStream reads a text/event-stream response body and calls onEvent({event, data, id})
 * for each event (comments and keep-alives are skipped). It resolves when the body ends and
 * rejects when reading fails (including an abort).
 */
export async function readEventStream(body, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let event = "";
  let data = [];
  let id = "";
  const line = (l) => {
    if (l === "") {
      if (data.length > 0) onEvent({ event: event || "message", data: data.join("\n"), id });
      event = "";
      data = [];
      return;
    }
    if (l[0] === ":") return;
    const c = l.indexOf(":");
    const field = c < 0 ? l : l.slice(0, c);
    let value = c < 0 ? "" : l.slice(c + 1);
    if (value[0] === " ") value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let start = 0;
    for (let i = 0; i < buf.length; i++) {
      const ch = buf[i];
      if (ch === "\n" || ch === "\r") {
        // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
        if (ch === "\r" && i === buf.length - 1) break;
        line(buf.slice(start, i));
        if (ch === "\r" && buf[i + 1] === "\n") i++;
        start = i + 1;
      }
    }
    buf = buf.slice(start);
  }
  buf += decoder.decode();
  if (buf !== "") line(buf);
  line("");
}

/** HTTPError is the error passed to onError for an unsuccessful answer; status is the HTTP status. */
export class HTTPError extends Error {
  constructor(status, message, code) {
    super(message);
    this.name = "HTTPError";
    this.status = status;
    this.code = code || "";
  }
}

// errorText is an error answer's message: the detail of a problem body (application/problem+json,
// what a foldstream server answers), else the body's text.
export async function errorText(res) {
  let text = "";
  try {
    text = (await res.text()).trim();
  } catch {
    return "";
  }
  if ((res.headers.get("Content-Type") || "").startsWith("application/problem+json")) {
    try {
      const p = JSON.parse(text);
      if (p && typeof p.detail === "string" && p.detail) return p.detail;
    } catch {
      // not JSON after all: show the text
    }
  }
  return text;
}

async function checkResponse(res) {
  if (res.ok) return res;
  const text = await errorText(res);
  throw new HTTPError(res.status, text || `HTTP ${res.status}`, res.headers.get("Foldstream-Error-Code"));
}

function withQuery(url, query) {
  return url + (url.includes("?") ? "&" : "?") + query;
}

// A refusal that retrying cannot fix stops the follower (a bad token, an unknown processor);
// anything else is retried with backoff.
function permanent(err) {
  return err instanceof HTTPError && err.status >= 400 && err.status < 500 && err.status !== 408 && err.status !== 429;
}

/**
 * followLiveState follows the live state of the processor at url (for example
 * "/v1/processor/counter/counters/a") and calls onState(state, rev) with every new state: once
 * after the seed, then after every applied delta or re-seed. It reconnects by itself (the server
 * ends each live connection after a while) with backoff on failures.
 *
 * Options:
 *   onState(state, rev)   required; the state passed is never mutated afterwards
 *   onError(err)          optional; every failure (HTTPError has .status and .code). A 4xx other
 *                         than 408 and 429 stops the follower: retrying cannot fix it
 *   onStatus(status)      optional; "connecting", "live", "reseeding", "retrying", "stopped"
 *   headers               optional; extra request headers, e.g. {Authorization: "Bearer …"}
 *   fetch                 optional; the fetch function to use (defaults to globalThis.fetch)
 *   maxBackoffMs          optional; the longest wait between reconnects (default 30000)
 *
 * It returns {close(), chain}: close() stops following; chain is the LiveStateChain.
 */
export function followLiveState(url, opts) {
  const { onState, onError = () => {}, onStatus = () => {}, headers = {}, maxBackoffMs = 30000 } = opts || {};
  if (typeof onState !== "function") throw new TypeError("followLiveState needs an onState callback");
  const doFetch = opts.fetch || globalThis.fetch.bind(globalThis);
  const chain = new LiveStateChain();
  const ctrl = new AbortController();
  let stopped = false;
  let reseedRunning = null;
  let current = null;

  const publish = () => {
    if (!stopped) onState(chain.state, chain.rev);
  };
  const status = (s) => {
    if (!stopped) onStatus(s);
  };

  const reseed = () => {
    if (reseedRunning) return reseedRunning;
    status("reseeding");
    reseedRunning = (async () => {
      try {
        const res = await checkResponse(
          await doFetch(withQuery(url, "view=live"), { headers, signal: ctrl.signal, cache: "no-store" }),
        );
        const seed = await res.json();
        // The live connection may have delivered a newer seed meanwhile: keep that one.
        if (chain.reseeding && chain.seed(seed)) publish();
        status("live");
      } finally {
        reseedRunning = null;
      }
    })();
    return reseedRunning;
  };

  const onEvent = (ev) => {
    if (ev.event === "seed") {
      if (chain.seed(JSON.parse(ev.data))) publish();
      status("live");
    } else if (ev.event === "delta") {
      const r = chain.delta(JSON.parse(ev.data));
      if (r === "applied") publish();
      else if (r === "reseed") {
        reseed().catch((err) => {
          if (stopped || (err && err.name === "AbortError")) return;
          onError(err);
          // Reconnect: the next connection's seed repairs the chain.
          if (current) current.abort();
        });
      }
    }
  };

  (async () => {
    let backoff = 500;
    while (!stopped) {
      status("connecting");
      current = new AbortController();
      const abortCurrent = () => current.abort();
      ctrl.signal.addEventListener("abort", abortCurrent);
      try {
        const res = await checkResponse(
          await doFetch(withQuery(url, "live=sse"), {
            headers: Object.assign({ Accept: "text/event-stream" }, headers),
            signal: current.signal,
            cache: "no-store",
          }),
        );
        let gotEvent = false;
        await readEventStream(res.body, (ev) => {
          if (!gotEvent) {
            gotEvent = true;
            backoff = 500;
          }
          onEvent(ev);
        });
        if (!gotEvent) {
          // Ended without a single event (a proxy cutting it, say): do not reconnect in a loop.
          status("retrying");
          await new Promise((r) => setTimeout(r, backoff));
          backoff = Math.min(backoff * 2, maxBackoffMs);
        }
      } catch (err) {
        if (stopped) break;
        if (!(err && err.name === "AbortError")) {
          onError(err);
          if (permanent(err)) {
            stopped = true;
            break;
          }
        }
        status("retrying");
        await new Promise((r) => setTimeout(r, backoff));
        backoff = Math.min(backoff * 2, maxBackoffMs);
      } finally {
        ctrl.signal.removeEventListener("abort", abortCurrent);
      }
    }
    onStatus("stopped");
  })();

  return {
    chain,
    close() {
      if (stopped) return;
      stopped = true;
      ctrl.abort();
    },
  };
}
