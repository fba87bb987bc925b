// Package bus is agentwork's NATS layer: it starts the embedded nats-server
// (JetStream on, synced to disk on every write, a lock on its data dir,
// loopback listener with generated credentials) or connects to an external
// cluster, provisions the streams and KV buckets every other package uses,
// and defines the subject scheme and the CloudEvents envelope that every
// message on the bus carries. Worker consumes a stream with a handler that
// returns a Verdict: bounded concurrency, progress signals, drain on
// shutdown; the runner, the dispatcher and anything else that consumes a
// stream use it. Latest, Keys and Loading read a whole KV bucket (or a
// watch's first values) without missing the keys written meanwhile, which
// the client's ListKeys and a watch's end-of-values marker do.
//
// NATS is the bus: there is no in-memory substitute and no abstraction that
// hides JetStream. Packages take the *Bus and use JetStream directly.
package bus
