// Package stream is the agent's end of the stream to the leader
// (docs/design.md sections 5 and 6), the counterpart of cluster/stream.
//
// A Client keeps what the agent saw while the leader is unreachable and
// sends it on each stream it opens:
//
//   - client.go: the Client, its configuration and metrics, and Run, which
//     reconnects with a jittered exponential backoff.
//   - conn.go: one stream: dial with TLS and keepalive, the bound token,
//     the Hello, then flushing what changed and reading acks and resync
//     requests.
//   - buffer.go: the bounded buffers of OOM events and container events,
//     kept until acknowledged, and the acknowledged OOM events replayed to
//     every new stream.
//   - delta.go: the per-stream container index and the delta encoding of
//     counter samples.
//   - clock.go: wall times mapped to the kernel's CLOCK_MONOTONIC, the
//     clock of the protocol's kernel_ns fields.
//
// The wire limits both ends keep (keepalive, the largest OOM count and
// message) are api/stream/v1's.
package stream
