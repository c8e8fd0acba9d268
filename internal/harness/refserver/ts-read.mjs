// ts-read.mjs reads a stream once with the TypeScript client (@durable-streams/client, pinned in
// package.json) in catch-up mode (live: false), as a user of that client would, and prints one
// JSON line: {"messages": N, "bytes": N, "offset": "...", "upToDate": bool, "streamClosed": bool,
// "requests": N}. Used by foldstream's server tests: node ts-read.mjs <stream-url>.
import { stream } from "@durable-streams/client"

const [url] = process.argv.slice(2)
let requests = 0
const countingFetch = (...args) => {
  requests++
  return fetch(...args)
}
const res = await stream({ url, live: false, fetch: countingFetch })
let messages = 0
let bytes = 0
if ((res.contentType ?? "").startsWith("application/json")) {
  messages = (await res.json()).length
} else {
  bytes = (await res.body()).length
}
console.log(
  JSON.stringify({
    messages,
    bytes,
    offset: res.offset,
    upToDate: res.upToDate,
    streamClosed: res.streamClosed,
    requests,
  }),
)
