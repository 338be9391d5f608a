// Package stream is the leader's end of the agents' stream (docs/design.md
// section 6): a gRPC service that authenticates each node agent by its
// projected service-account token, takes the agent's node from the token's
// pod rather than from what the agent claims, and feeds the counter samples
// and OOM kills it reports into a watch.MemorySource.
//
// Decisions where the design is silent:
//
//   - Kernel timestamps (CLOCK_MONOTONIC on the node) become wall times by
//     anchoring the first Counters pass of a stream to the leader's clock;
//     later times keep their kernel distances. An OOM event that arrives
//     before the first pass, or that has no kernel time, is stamped with
//     the leader's clock.
//   - A report about a pod that is not on the agent's node, or that the
//     leader's pod cache does not know, is dropped and counted, never an
//     error: the cache may lag a new pod. OOM events that are dropped are
//     still acknowledged, so the agent does not resend them forever.
//   - A malformed message closes the stream with InvalidArgument; too many
//     containers on one stream closes it with ResourceExhausted.
//   - Only the elected leader serves: Connect returns Unavailable when the
//     server is not leading, and a stream that is open when leadership is
//     lost ends with Unavailable at its next message.
package stream
