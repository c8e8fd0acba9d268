// server.mjs starts the upstream reference Durable Streams server (@durable-streams/server) on
// 127.0.0.1 for foldstream's tests and benchmarks.
//
// Usage: node server.mjs [--port PORT] [--data-dir DIR] [--long-poll-timeout-ms MS] [--exit-with-stdin]
//
// --port 0 (the default) picks a free port. --data-dir selects the file-backed store (segment
// files + LMDB metadata); without it the store is in memory. The long-poll timeout defaults to
// 500 ms. It prints one line "LISTENING http://127.0.0.1:PORT" once the server accepts
// connections, and stops cleanly on SIGTERM or SIGINT, or, with --exit-with-stdin, when its stdin
// closes (so a Go test that spawned it never leaks it).
import { DurableStreamTestServer } from "@durable-streams/server"

function arg(name, fallback) {
  const i = process.argv.indexOf(name)
  if (i >= 0 && i + 1 < process.argv.length) return process.argv[i + 1]
  return fallback
}

const dataDir = arg("--data-dir", undefined)
const server = new DurableStreamTestServer({
  host: "127.0.0.1",
  port: Number(arg("--port", "0")),
  longPollTimeout: Number(arg("--long-poll-timeout-ms", "500")),
  ...(dataDir ? { dataDir } : {}),
})
const url = await server.start()
process.stdout.write(`LISTENING ${url}\n`)

let stopping = false
async function stop() {
  if (stopping) return
  stopping = true
  try {
    await server.stop()
  } finally {
    process.exit(0)
  }
}
process.on("SIGTERM", stop)
process.on("SIGINT", stop)
if (process.argv.includes("--exit-with-stdin")) {
  process.stdin.resume()
  process.stdin.on("end", stop)
}
