// Starts the reference Durable Streams server (in memory) on 127.0.0.1 with a random port and a
// 500 ms long-poll timeout, prints "LISTENING <url>" on stdout, and exits when stdin closes (so
// the Go test that spawned it never leaks it).
import { DurableStreamTestServer } from "@durable-streams/server"

const server = new DurableStreamTestServer({
  host: "127.0.0.1",
  port: 0,
  longPollTimeout: Number(process.env.LONG_POLL_MS ?? 500),
})
const url = await server.start()
process.stdout.write(`LISTENING ${url}\n`)
process.stdin.resume()
process.stdin.on("end", async () => {
  await server.stop()
  process.exit(0)
})
