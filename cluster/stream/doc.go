// Package stream is the leader's end of the agents' stream, a gRPC
// service (docs/design.md section 6).
//
// It authenticates each node agent by its projected service-account
// token, and takes the agent's node from the token's pod rather than from
// what the agent claims. It creates TokenReviews. It reads the agent pods
// and the pods agents report on from the leader's cache, and an agent pod
// the cache lacks from the apiserver. It writes what the agents report
// into the stores of cluster/signals: counter samples and OOM kills into
// a Kernel, container events into AgentStatuses, usage readings into
// Usage. It signs an agent's /metrics certificate when asked
// (Config.IssueMetricsCertificate). The stream's limits are in
// docs/leader.md, "The agents' stream: limits".
//
// Decisions where the design is silent:
//
//   - Kernel timestamps (CLOCK_MONOTONIC on the node) become wall times by
//     anchoring the Hello's kernel_ns to the leader's clock at its
//     arrival. When an older agent sends none, the first Counters pass
//     anchors them. Later times keep their kernel distances, so counters
//     buffered during an outage keep their times. An OOM event without a
//     kernel time, or before any anchor, is stamped with the leader's
//     clock.
//   - OOM events count once per agent incarnation (node, Hello.started_at)
//     and seq, across that agent's streams. An event resent because its
//     ack was lost is acknowledged again and counted in
//     kerf_stream_oom_events_resent_total, not in the watch. A restarted
//     agent is a new incarnation. A new leader starts with no state and
//     counts what it is sent.
//   - The leader follows each node's container instances: a snapshot
//     replaces the set. Instances it no longer lists, like those the agent
//     says are gone, are marked gone in the signals.Kernel, which drops
//     them once no window can read them.
//   - Keepalive: agents ping every streamv1.KeepaliveTime, the server
//     allows it and pings quiet agents itself.
//   - A report about a pod that is not on the agent's node, or that the
//     leader's pod cache does not know, is dropped and counted, never an
//     error: the cache may lag a new pod. OOM events that are dropped are
//     still acknowledged, so the agent does not resend them forever. One
//     about a pod the cache does not know yet is kept pending for the
//     agent's incarnation (Limits.MaxPendingOOM, PendingOOMTTL). It is
//     counted once the pod appears: at least once.
//   - Counters and OOM events must name a container of the pod's spec.
//     One that does not is dropped, counted and acknowledged
//     (container_unknown). Past MaxUnknownContainers on one stream the
//     stream closes. A real agent takes its names from the pods, and the
//     names key the leader's stores. Closing at the first would lock out
//     an agent that resends the report on every stream.
//   - Every map and list keyed by what an agent says is bounded: Limits,
//     streamv1's limits, signals.Kernel's per-pod caps. A node has one
//     stream, a newer one replaces it, and a stream's end marks its
//     node's containers gone.
//   - An open stream's token is reviewed again every Limits.ReauthEvery;
//     one that no longer authenticates closes the stream. Failed reviews
//     are cached briefly and reviews are rate-limited per source IP.
//   - Container events, the restarts and terminations the agent saw in
//     the kubelet's Pods API, have a seq of their own, acknowledged per
//     stream (Ack.event_seq). They need no dedup across streams: applying
//     one twice to signals.AgentStatuses changes nothing, as it keeps the
//     highest restart count and each run once. One about a container the
//     pod's spec does not name is dropped and counted like one about
//     another node's pod.
//   - A malformed message closes the stream with InvalidArgument; a limit
//     passed closes it with ResourceExhausted; the error names the limit.
//   - Only the elected leader serves: Connect returns Unavailable when the
//     server is not leading, and a stream that is open when leadership is
//     lost ends with Unavailable at its next message.
package stream
