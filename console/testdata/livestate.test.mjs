// Unit tests of console/static/livestate.js, run with node's built-in runner:
//   node --test console/testdata/
// (console/livestate_test.go runs them under `go test`.)
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  applyPatch,
  PatchError,
  LiveStateChain,
  readEventStream,
  followLiveState,
  HTTPError,
} from "../static/livestate.js";

test("applyPatch applies every RFC 6902 operation", () => {
  const doc = { a: 1, b: [1, 2, 3], c: { d: "x" } };
  const cases = [
    [[{ op: "add", path: "/e", value: true }], { a: 1, b: [1, 2, 3], c: { d: "x" }, e: true }],
    [[{ op: "add", path: "/b/1", value: 9 }], { a: 1, b: [1, 9, 2, 3], c: { d: "x" } }],
    [[{ op: "add", path: "/b/-", value: 4 }], { a: 1, b: [1, 2, 3, 4], c: { d: "x" } }],
    [[{ op: "add", path: "/a", value: 2 }], { a: 2, b: [1, 2, 3], c: { d: "x" } }],
    [[{ op: "remove", path: "/b/0" }], { a: 1, b: [2, 3], c: { d: "x" } }],
    [[{ op: "remove", path: "/c/d" }], { a: 1, b: [1, 2, 3], c: {} }],
    [[{ op: "replace", path: "/c/d", value: null }], { a: 1, b: [1, 2, 3], c: { d: null } }],
    [[{ op: "replace", path: "", value: [1] }], [1]],
    [[{ op: "move", from: "/a", path: "/c/a" }], { b: [1, 2, 3], c: { d: "x", a: 1 } }],
    [[{ op: "move", from: "/b/0", path: "/b/2" }], { a: 1, b: [2, 3, 1], c: { d: "x" } }],
    [[{ op: "copy", from: "/c", path: "/f" }], { a: 1, b: [1, 2, 3], c: { d: "x" }, f: { d: "x" } }],
    [[{ op: "test", path: "/c", value: { d: "x" } }, { op: "remove", path: "/a" }], { b: [1, 2, 3], c: { d: "x" } }],
    [[], doc],
  ];
  for (const [patch, want] of cases) {
    assert.deepEqual(applyPatch(doc, patch), want, JSON.stringify(patch));
  }
  assert.deepEqual(doc, { a: 1, b: [1, 2, 3], c: { d: "x" } }, "the input document was modified");
});

test("applyPatch unescapes ~1 and ~0 in pointers", () => {
  assert.deepEqual(applyPatch({ "a/b": 1, "m~n": 2 }, [
    { op: "replace", path: "/a~1b", value: 3 },
    { op: "remove", path: "/m~0n" },
  ]), { "a/b": 3 });
});

test("applyPatch shares the parts it did not change", () => {
  const doc = { left: { big: [1, 2, 3] }, right: { n: 1 } };
  const next = applyPatch(doc, [{ op: "replace", path: "/right/n", value: 2 }]);
  assert.notEqual(next, doc);
  assert.notEqual(next.right, doc.right);
  assert.equal(next.left, doc.left);
});

test("applyPatch refuses what does not apply, leaving the document as it was", () => {
  const doc = { a: 1, b: [1] };
  const bad = [
    [{ op: "remove", path: "/zz" }],
    [{ op: "replace", path: "/zz", value: 1 }],
    [{ op: "add", path: "/b/5", value: 1 }],
    [{ op: "add", path: "/zz/y", value: 1 }],
    [{ op: "test", path: "/a", value: 2 }],
    [{ op: "add", path: "/c", value: 1 }, { op: "test", path: "/a", value: "1" }],
    [{ op: "move", from: "/b", path: "/b/0" }],
    [{ op: "frobnicate", path: "/a" }],
    [{ op: "add", path: "a", value: 1 }],
    [{ op: "add", path: "/b/01", value: 1 }],
    null,
  ];
  for (const patch of bad) {
    assert.throws(() => applyPatch(doc, patch), PatchError, JSON.stringify(patch));
  }
  assert.deepEqual(doc, { a: 1, b: [1] });
});

test("a chain applies deltas that follow its revision and ignores those already in its seed", () => {
  const c = new LiveStateChain();
  assert.equal(c.seed({ rev: 10, state: { n: 0 } }), true);
  assert.equal(c.delta({ from: 9, to: 10, patch: [{ op: "replace", path: "/n", value: 99 }] }), "stale");
  assert.equal(c.delta({ from: 10, to: 11, patch: [{ op: "replace", path: "/n", value: 1 }] }), "applied");
  assert.equal(c.delta({ from: 11, to: 12, patch: [{ op: "add", path: "/m", value: 2 }] }), "applied");
  assert.deepEqual(c.state, { n: 1, m: 2 });
  assert.equal(c.rev, 12);
});

test("a broken chain (a gap) re-seeds and then applies the deltas that follow the new seed", () => {
  const c = new LiveStateChain();
  c.seed({ rev: 1, state: { n: 1 } });
  // Delta 1→2 was missed; 2→3 arrives: the chain is broken.
  assert.equal(c.delta({ from: 2, to: 3, patch: [{ op: "replace", path: "/n", value: 3 }] }), "reseed");
  assert.deepEqual(c.state, { n: 1 }, "a broken chain must not change the state");
  assert.equal(c.reseeding, true);
  // While the seed is fetched, 3→4 arrives; it is kept.
  assert.equal(c.delta({ from: 3, to: 4, patch: [{ op: "replace", path: "/n", value: 4 }] }), "reseed");
  // The fresh seed is at rev 2: the kept 2→3 and 3→4 follow it.
  assert.equal(c.seed({ rev: 2, state: { n: 2 } }), true);
  assert.equal(c.reseeding, false);
  assert.equal(c.rev, 4);
  assert.deepEqual(c.state, { n: 4 });
});

test("a kept delta older than the new seed is dropped", () => {
  const c = new LiveStateChain();
  c.seed({ rev: 1, state: { n: 1 } });
  assert.equal(c.delta({ from: 5, to: 6, patch: [{ op: "replace", path: "/n", value: 6 }] }), "reseed");
  c.seed({ rev: 7, state: { n: 7 } });
  assert.equal(c.rev, 7);
  assert.deepEqual(c.state, { n: 7 });
});

test("a null patch breaks the chain (the server sends null for a patch too large)", () => {
  const c = new LiveStateChain();
  c.seed({ rev: 5, state: { n: 5 } });
  assert.equal(c.delta({ from: 5, to: 6, patch: null }), "reseed");
  assert.equal(c.rev, 5);
  c.seed({ rev: 6, state: { n: 6, big: "…" } });
  assert.deepEqual(c.state, { n: 6, big: "…" });
});

test("a patch that does not apply breaks the chain and is not retried after the re-seed", () => {
  const c = new LiveStateChain();
  c.seed({ rev: 1, state: { n: 1 } });
  assert.equal(c.delta({ from: 1, to: 2, patch: [{ op: "remove", path: "/nope" }] }), "reseed");
  assert.deepEqual(c.state, { n: 1 });
  c.seed({ rev: 1, state: { n: 1, nope: true } });
  assert.equal(c.rev, 1, "the failing delta must not be re-applied");
  assert.equal(c.reseeding, false);
});

test("a seed with the same revision and state reports no change", () => {
  const c = new LiveStateChain();
  c.seed({ rev: 3, state: { a: [1] } });
  assert.equal(c.seed({ rev: 3, state: { a: [1] } }), false);
  assert.equal(c.seed({ rev: 3, state: { a: [2] } }), true);
});

// body returns a ReadableStream of the given chunks, then ends (or stays open when hold).
function body(chunks, hold) {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(ctrl) {
      for (const c of chunks) ctrl.enqueue(enc.encode(c));
      if (!hold) ctrl.close();
    },
  });
}

test("readEventStream parses events split across chunks, CRLF, comments and multi-line data", async () => {
  const events = [];
  await readEventStream(
    body(["event: seed\r\ndata: {\"rev\"", ":1}\r", "\n\r\n: keep-alive\n\n", "data:a\ndata:b\n\nevent: x\ndata:last"]),
    (e) => events.push(e),
  );
  assert.deepEqual(events, [
    { event: "seed", data: '{"rev":1}', id: "" },
    { event: "message", data: "a\nb", id: "" },
    { event: "x", data: "last", id: "" },
  ]);
});

// fakeServer answers ?live=sse with the scripted SSE bodies in turn (then a body that stays open)
// and ?view=live with the scripted seeds in turn; it records every request.
function fakeServer({ sse, seeds, status = 200 }) {
  const requests = [];
  let s = 0;
  let v = 0;
  const fetch = async (url, init) => {
    requests.push({ url, headers: init.headers });
    if (status !== 200) {
      return new Response("no valid credentials", { status, headers: { "Foldstream-Error-Code": "UNAUTHORIZED" } });
    }
    if (url.includes("live=sse")) {
      const chunks = s < sse.length ? sse[s++] : [];
      const stream = body(chunks, s > sse.length || chunks.hold);
      init.signal.addEventListener("abort", () => stream.cancel().catch(() => {}));
      return new Response(stream, { headers: { "Content-Type": "text/event-stream" } });
    }
    if (url.includes("view=live")) {
      return Response.json(seeds[v++]);
    }
    return new Response("not found", { status: 404 });
  };
  return { fetch, requests };
}

function sseEvent(name, data) {
  return `event: ${name}\ndata:${JSON.stringify(data)}\n\n`;
}

// until resolves once cond() holds, checking after every state callback.
function collector() {
  const states = [];
  let wake = () => {};
  return {
    states,
    onState(state, rev) {
      states.push({ state, rev });
      wake();
    },
    async until(cond) {
      while (!cond()) await new Promise((r) => (wake = r));
    },
  };
}

test("followLiveState seeds, applies deltas, and re-seeds over HTTP when the chain breaks", async () => {
  const open = Object.assign(
    [
      sseEvent("seed", { rev: 100, state: { items: [] } }),
      sseEvent("delta", { from: 100, to: 101, patch: [{ op: "add", path: "/items/-", value: "a" }] }),
      // 101→102 is missing: the gap must trigger GET ?view=live.
      sseEvent("delta", { from: 102, to: 103, patch: [{ op: "add", path: "/items/-", value: "c" }] }),
    ],
    { hold: true },
  );
  const srv = fakeServer({ sse: [open], seeds: [{ rev: 102, state: { items: ["a", "b"] } }] });
  const c = collector();
  const f = followLiveState("/v1/processor/p/s", {
    onState: c.onState,
    headers: { Authorization: "Bearer t" },
    fetch: srv.fetch,
  });
  await c.until(() => c.states.length >= 3);
  f.close();
  assert.deepEqual(c.states, [
    { state: { items: [] }, rev: 100 },
    { state: { items: ["a"] }, rev: 101 },
    { state: { items: ["a", "b", "c"] }, rev: 103 },
  ]);
  assert.deepEqual(srv.requests.map((r) => r.url), ["/v1/processor/p/s?live=sse", "/v1/processor/p/s?view=live"]);
  for (const r of srv.requests) assert.equal(r.headers.Authorization, "Bearer t");
});

test("followLiveState reconnects when the server ends the connection, and takes the new seed", async () => {
  const srv = fakeServer({
    sse: [
      [sseEvent("seed", { rev: 1, state: { n: 1 } })],
      [sseEvent("seed", { rev: 2, state: { n: 2 } })],
    ],
    seeds: [],
  });
  const c = collector();
  const f = followLiveState("/p", { onState: c.onState, fetch: srv.fetch });
  await c.until(() => c.states.length >= 2);
  f.close();
  assert.deepEqual(c.states.map((s) => s.state), [{ n: 1 }, { n: 2 }]);
});

test("followLiveState stops on a refusal that retrying cannot fix and reports it", async () => {
  const srv = fakeServer({ sse: [], seeds: [], status: 401 });
  let seen;
  const stopped = new Promise((resolve) => {
    followLiveState("/p", {
      onState() {
        assert.fail("no state expected");
      },
      onError(err) {
        seen = err;
      },
      onStatus(s) {
        if (s === "stopped") resolve();
      },
      fetch: srv.fetch,
    });
  });
  await stopped;
  assert.ok(seen instanceof HTTPError);
  assert.equal(seen.status, 401);
  assert.equal(seen.code, "UNAUTHORIZED");
  assert.equal(srv.requests.length, 1);
});
