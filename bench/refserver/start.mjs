// start.mjs starts the reference Durable Streams server (@durable-streams/server) with its
// file-backed store, for the side-by-side benchmark in ../. It binds to 127.0.0.1 only.
//
// Usage: node start.mjs --port PORT --data-dir DIR [--long-poll-timeout-ms MS]
//
// It prints one line "listening http://127.0.0.1:PORT" once the server accepts connections, and
// stops cleanly on SIGTERM or SIGINT (the harness sends SIGTERM).
import { DurableStreamTestServer } from "@durable-streams/server"

function arg(name, fallback) {
  const i = process.argv.indexOf(name)
  if (i >= 0 && i + 1 < process.argv.length) return process.argv[i + 1]
  if (fallback === undefined) {
    console.error(`start.mjs: missing ${name}`)
    process.exit(2)
  }
  return fallback
}

const port = Number(arg("--port"))
const dataDir = arg("--data-dir")
const longPollTimeout = Number(arg("--long-poll-timeout-ms", "500"))

const server = new DurableStreamTestServer({
  host: "127.0.0.1",
  port,
  dataDir, // a dataDir selects the file-backed store (segment files + LMDB metadata)
  longPollTimeout,
})

const url = await server.start()
console.log(`listening ${url}`)

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
