// Measures the TypeScript IdempotentProducer (@durable-streams/client, pinned in package.json),
// run by bench/producer
// with its default options: node ts-producer.mjs <stream-url> <messages> <bytes-per-message>.
// The stream must exist (application/json). Prints one JSON line with the result.
import { DurableStream, IdempotentProducer } from "@durable-streams/client"

const [url, countArg, sizeArg] = process.argv.slice(2)
const count = Number(countArg)
const size = Number(sizeArg)

function message(i) {
  const head = `{"id":${i},"pad":"`
  const tail = `"}`
  return head + "x".repeat(Math.max(0, size - head.length - tail.length)) + tail
}

const msgs = Array.from({ length: count }, (_, i) => message(i))
const stream = new DurableStream({ url, contentType: "application/json" })
let failed = null
const producer = new IdempotentProducer(stream, "bench-ts", {
  onError: (err) => {
    failed ??= err
  },
})
const start = process.hrtime.bigint()
for (const m of msgs) producer.append(m)
await producer.flush()
const seconds = Number(process.hrtime.bigint() - start) / 1e9
await producer.detach()
if (failed) {
  console.error(String(failed))
  process.exit(1)
}
const bytes = msgs.reduce((n, m) => n + Buffer.byteLength(m), 0)
process.stdout.write(JSON.stringify({ messages: count, bytes, seconds }) + "\n")
