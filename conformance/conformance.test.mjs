import { runConformanceTests } from "@durable-streams/server-conformance-tests"
// subscriptions: the six tests of the protocol's reserved subscription APIs (the server runs with
// --allow-loopback-webhooks, since the suite's webhook receivers listen on 127.0.0.1).
runConformanceTests({ baseUrl: process.env.CONFORMANCE_TEST_URL, subscriptions: true })
