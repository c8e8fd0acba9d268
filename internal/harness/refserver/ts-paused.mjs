// ts-paused.mjs appends to a paused stream with the TypeScript client (@durable-streams/client,
// pinned in package.json), once with DurableStream.append and once through an IdempotentProducer,
// and prints one JSON line: {"append": {status, details}, "producer": {status, details},
// "requests": N, "timedOut": bool}. A client that retried the refusal forever would never print;
// the script gives up after 10 s and says so. Used by foldstream's server tests:
// node ts-paused.mjs <stream-url>.
import { DurableStream, IdempotentProducer } from "@durable-streams/client"

const [url] = process.argv.slice(2)
let requests = 0
const countingFetch = (...args) => {
  requests++
  return fetch(...args)
}
const guard = setTimeout(() => {
  process.stdout.write(JSON.stringify({ requests, timedOut: true }) + "\n")
  process.exit(0)
}, 10_000)

const describe = (err) => ({
  status: err?.status ?? null,
  details: typeof err?.details === "string" ? err.details : (err?.text ?? String(err)),
})

const stream = new DurableStream({ url, contentType: "application/json", fetch: countingFetch })
let append = null
try {
  await stream.append(JSON.stringify({ n: 1 }))
} catch (err) {
  append = describe(err)
}

let producerErr = null
const producer = new IdempotentProducer(stream, "ts-paused", {
  fetch: countingFetch,
  onError: (err) => (producerErr ??= err),
})
producer.append(JSON.stringify({ n: 2 }))
try {
  await producer.flush()
} catch (err) {
  producerErr ??= err
}
await producer.detach().catch(() => {})
clearTimeout(guard)
process.stdout.write(JSON.stringify({ append, producer: producerErr && describe(producerErr), requests, timedOut: false }) + "\n")
