package stream

import (
	"fmt"
	"math"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster/healthwatch"
	"github.com/kerf-dev/kerf/cluster/signals"
)

// malformedError is a message that breaks the protocol; it closes the
// stream.
type malformedError struct {
	code   codes.Code
	reason string
	msg    string
}

func (e *malformedError) Error() string { return e.reason + ": " + e.msg }

func malformed(reason, format string, args ...any) error {
	return &malformedError{code: codes.InvalidArgument, reason: reason, msg: fmt.Sprintf(format, args...)}
}

// container is one indexed container instance on a stream, with its
// absolute counters and its latest usage.
//   - The counters are the sum of the deltas received.
//   - The usage is the base of the next usage's deltas, zero before the
//     first.
//
// It is kept small, as there is one per container of the node for the
// stream's life (docs/performance.md). So the start is Unix nanoseconds.
// Once the pod is found on the node, the pod UID and name are the strings
// of the stream's cache of the node's pods (onNode). They are shared by
// every index of the pod and by the signals stores, not each index's own
// copy from its message.
type container struct {
	podUID types.UID
	name   string
	// startedNs is when the instance started, in Unix nanoseconds; zero
	// when unknown.
	startedNs  int64
	lastNs     uint64
	periods    uint64
	throttled  uint64
	throttleNs uint64
	cpuNs      uint64
	workingSet uint64
	peak       uint64
	// oomKills is the instance's absolute OOM kill count (the sum of
	// oom_kills), known once a sample carried oom_kills_read.
	oomKills uint64
	oomRead  bool
	onNode   bool
	// refused is set when the pod's spec does not name the container: its
	// samples are dropped.
	refused bool
}

// started is when the instance started; the zero time when unknown.
func (c *container) started() time.Time {
	if c.startedNs == 0 {
		return time.Time{}
	}
	return time.Unix(0, c.startedNs)
}

// key is the instance's key among the node's containers.
func (c *container) key() instanceKey {
	return instanceKey{c.podUID, c.name, c.started().UnixNano()}
}

// podNames is a pod found on the stream's node with its containers' names,
// the strings the stream's containers share.
type podNames struct {
	uid   types.UID
	names []string
}

// ingest is one stream's state: the index table of the protocol (see
// streamv1.Counters) and the highest acknowledged OOM seq.
type ingest struct {
	s    *Server
	node string
	// agent is the stream's agent incarnation, shared by its streams; the
	// stream's own when the agent did not say when it started.
	agent *incarnation
	// table holds the live indexes; used every index given an identity
	// since the last snapshot, since indexes are never reused.
	table map[uint32]*container
	used  map[uint32]struct{}
	// onNode caches pods found on the node, with their containers' names:
	// a bound pod never moves, and only ephemeral containers are added.
	onNode map[types.UID]podNames
	// anchorNs and anchorAt map kernel time to wall time.
	anchored bool
	anchorNs uint64
	anchorAt time.Time
	ackedSeq uint64
	// unknown counts the reports refused on this stream because their
	// pod has no such container.
	unknown int
	// resyncAsked is set once the stream was asked for a snapshot because
	// too many indexes were given since the last.
	resyncAsked bool
	// ackedEventSeq is the highest acknowledged ContainerEvent seq.
	ackedEventSeq uint64
}

func newIngest(s *Server, node string, hello *streamv1.Hello) *ingest {
	in := &ingest{
		s:      s,
		node:   node,
		table:  map[uint32]*container{},
		used:   map[uint32]struct{}{},
		onNode: map[types.UID]podNames{},
		agent:  s.incarnation(node, hello.GetStartedAtUnixNs()),
	}
	if ns := hello.GetKernelNs(); ns != 0 {
		in.anchored, in.anchorNs, in.anchorAt = true, ns, s.cfg.Now()
	}
	return in
}

// podOnNode reports whether the pod is on the stream's node, and the
// reason to drop the report when not.
func (in *ingest) podOnNode(uid types.UID) (bool, string) {
	if _, ok := in.onNode[uid]; ok {
		return true, ""
	}
	pod, ok := in.s.cfg.Pods.PodByUID(uid)
	if !ok {
		return false, DropPodUnknown
	}
	if pod.Spec.NodeName != in.node {
		return false, DropPodNotOnNode
	}
	in.cachePod(pod)
	return true, ""
}

// maxIndexes is how many indexes a stream may give an identity between two
// snapshots before the leader asks for one; twice as many close it.
func (in *ingest) maxIndexes() int { return 4 * in.s.cfg.MaxContainers }

// checkIdentity checks the lengths of a pod UID and container name an
// agent sent.
func checkIdentity(what string, uid, name string) error {
	switch {
	case len(uid) > streamv1.MaxPodUIDBytes:
		return malformed("field_too_long", "%s.pod_uid is longer than %d bytes (limit MaxPodUIDBytes)", what, streamv1.MaxPodUIDBytes)
	case len(name) > streamv1.MaxContainerNameBytes:
		return malformed("field_too_long", "%s.container is longer than %d bytes (limit MaxContainerNameBytes)", what, streamv1.MaxContainerNameBytes)
	}
	return nil
}

// MaxUnknownContainers is how many reports about containers their pod's
// spec does not name one stream may send before it is closed. Below it,
// such a report is refused alone: dropped, counted, acknowledged. A real
// agent takes its names from the pods. One that disagrees with the
// leader's cache must not be locked out by resending the report on every
// stream.
const MaxUnknownContainers = 100

// containerUnknown refuses a report about a container its pod's spec does
// not name. The report is dropped and counted. Past MaxUnknownContainers
// on the stream, the stream is closed.
func (in *ingest) containerUnknown(what string, uid types.UID, name string) error {
	in.s.metrics.dropped.WithLabelValues(DropContainerUnknown).Inc()
	in.unknown++
	if in.unknown > MaxUnknownContainers {
		return &malformedError{code: codes.ResourceExhausted, reason: "too_many_unknown_containers",
			msg: fmt.Sprintf("%s: pod %s has no container %q, and more than %d reports on this stream named containers their pod does not have (limit MaxUnknownContainers)",
				what, uid, name, MaxUnknownContainers)}
	}
	in.s.log.Debug("report about a container the pod does not have dropped", "node", in.node, "pod", uid, "container", name)
	return nil
}

// wall turns a kernel time that just arrived into a wall time (see the
// package doc). Every arrival bounds the mapping: a kernel time cannot map
// later than the moment it reached the leader. So the anchor moves to the
// earliest mapping any arrival allows. Otherwise the transit and
// processing delay of the Hello, a TokenReview included, would put every
// later time that much in the future, and the health watch counts no kill
// "after now".
func (in *ingest) wall(ns uint64) time.Time {
	now := in.s.cfg.Now()
	if ns == 0 {
		return now
	}
	if !in.anchored {
		in.anchored, in.anchorNs, in.anchorAt = true, ns, now
		return now
	}
	at := in.anchorAt.Add(time.Duration(int64(ns - in.anchorNs)))
	if at.After(now) {
		in.anchorNs, in.anchorAt = ns, now
		return now
	}
	return at
}

// counters ingests one sampling pass. resync is true when the agent should
// be asked for a snapshot: it gave more than maxIndexes indexes since its
// last.
func (in *ingest) counters(c *streamv1.Counters) (resync bool, err error) {
	// The pass's own time tightens the kernel-to-wall mapping.
	in.wall(c.GetKernelNs())
	if c.GetSnapshot() {
		clear(in.table)
		clear(in.used)
		in.resyncAsked = false
	}
	sc := counterScratches.Get().(*counterScratch)
	defer sc.put()
	samples, usage, listed := sc.samples[:0], sc.usage[:0], sc.listed[:0]
	defer func() { sc.samples, sc.usage, sc.listed = samples, usage, listed }()
	for _, cc := range c.GetContainers() {
		idx := cc.GetIndex()
		ns := c.GetKernelNs() + cc.GetKernelNsDelta()
		if ns < c.GetKernelNs() {
			return false, malformed("counters_backwards", "index %d: kernel_ns_delta overflows", idx)
		}
		e, known := in.table[idx]
		if cc.GetPodUid() != "" || cc.GetContainer() != "" {
			if _, reused := in.used[idx]; reused {
				return false, malformed("index_reused", "index %d was already given an identity on this stream", idx)
			}
			if cc.GetPodUid() == "" || cc.GetContainer() == "" {
				return false, malformed("missing_identity", "index %d: the first sample needs both pod_uid and container", idx)
			}
			if len(in.table) >= in.s.cfg.MaxContainers {
				return false, &malformedError{code: codes.ResourceExhausted, reason: "too_many_containers",
					msg: fmt.Sprintf("more than %d containers indexed on one stream (limit MaxContainers)", in.s.cfg.MaxContainers)}
			}
			if err := checkIdentity("counters", cc.GetPodUid(), cc.GetContainer()); err != nil {
				return false, err
			}
			if len(in.used) >= 2*in.maxIndexes() {
				return false, &malformedError{code: codes.ResourceExhausted, reason: "too_many_indexes",
					msg: fmt.Sprintf("more than %d indexes given since the last snapshot, which was asked for", 2*in.maxIndexes())}
			}
			in.used[idx] = struct{}{}
			e = &container{
				podUID:     types.UID(cc.GetPodUid()),
				name:       cc.GetContainer(),
				lastNs:     ns,
				periods:    cc.GetPeriods(),
				throttled:  cc.GetThrottled(),
				throttleNs: cc.GetThrottledNs(),
			}
			e.startedNs = cc.GetStartedAtUnixNs()
			in.table[idx] = e
		} else {
			if !known {
				return false, malformed("unknown_index", "index %d has no identity on this stream", idx)
			}
			if ns < e.lastNs {
				return false, malformed("counters_backwards", "index %d: sample time went backwards", idx)
			}
			var ok1, ok2, ok3 bool
			e.periods, ok1 = add(e.periods, cc.GetPeriods())
			e.throttled, ok2 = add(e.throttled, cc.GetThrottled())
			e.throttleNs, ok3 = add(e.throttleNs, cc.GetThrottledNs())
			if !ok1 || !ok2 || !ok3 {
				return false, malformed("counters_backwards", "index %d: counters overflow (a restarted container needs a new index)", idx)
			}
			e.lastNs = ns
		}
		if e.throttled > e.periods {
			return false, malformed("counters_inconsistent", "index %d: throttled %d exceeds periods %d", idx, e.throttled, e.periods)
		}
		if cc.GetOomKillsRead() || cc.GetOomKills() > 0 {
			var ok bool
			if e.oomKills, ok = add(e.oomKills, cc.GetOomKills()); !ok {
				return false, malformed("counters_backwards", "index %d: OOM kill count overflows (a restarted container needs a new index)", idx)
			}
			e.oomRead = true
		}
		u := cc.GetUsage()
		if u != nil {
			var ok bool
			if e.cpuNs, ok = add(e.cpuNs, u.GetCpuNs()); !ok {
				return false, malformed("counters_backwards", "index %d: CPU usage overflows (a restarted container needs a new index)", idx)
			}
			// Deltas wrap as unsigned, the agent's encoding: a working set or
			// peak below zero or past 2^63 bytes is a broken message.
			e.workingSet += uint64(u.GetWorkingSetDelta())
			e.peak += uint64(u.GetPeakDelta())
			if e.workingSet > math.MaxInt64 || e.peak > math.MaxInt64 {
				return false, malformed("usage_out_of_range", "index %d: working set or memory peak out of range", idx)
			}
		}
		if !e.onNode {
			var reason string
			if e.onNode, reason = in.podOnNode(e.podUID); !e.onNode {
				in.s.metrics.dropped.WithLabelValues(reason).Inc()
				continue
			}
			if !in.hasContainer(e.podUID, e.name) {
				e.refused = true
				if err := in.containerUnknown("counters", e.podUID, e.name); err != nil {
					return false, err
				}
			} else {
				e.podUID, e.name = in.shared(e.podUID, e.name)
			}
		}
		if e.refused {
			continue
		}
		listed = append(listed, e.key())
		at := in.wall(ns)
		samples = append(samples, healthwatch.CounterSample{
			PodUID:    e.podUID,
			Container: e.name,
			Started:   e.started(),
			At:        at,
			Periods:   e.periods,
			Throttled: e.throttled,
			// The absolute count goes with every sample (the store keeps
			// the latest per instance), so a sample replacing another
			// keeps it.
			OOMKills:    e.oomKills,
			HasOOMKills: e.oomRead,
		})
		if u != nil {
			usage = append(usage, signals.UsageSample{PodUID: e.podUID, Container: e.name, At: at,
				CPU: time.Duration(e.cpuNs), WorkingSet: e.workingSet, Peak: e.peak})
		}
	}
	var gone []instanceKey
	for _, idx := range c.GetGone() {
		if e, ok := in.table[idx]; ok && e.onNode && !e.refused {
			gone = append(gone, e.key())
		}
		delete(in.table, idx)
	}
	if len(samples) > 0 {
		in.s.cfg.Kernel.AddSamples(samples...)
		in.s.metrics.samples.Add(float64(len(samples)))
	}
	if len(usage) > 0 && in.s.cfg.Usage != nil {
		in.s.cfg.Usage.Add(usage...)
	}
	if err := in.s.nodeContainers(in.node, c.GetSnapshot(), listed, gone); err != nil {
		return false, err
	}
	if len(in.used) > in.maxIndexes() && !in.resyncAsked {
		in.resyncAsked = true
		return true, nil
	}
	return false, nil
}

// add returns a+b and false when the sum overflows.
func add(a, b uint64) (uint64, bool) {
	s := a + b
	return s, s >= a
}

// oom ingests one OOM event and returns the seq to acknowledge. A resent
// event (seq already acknowledged on this stream, or counted on an earlier
// stream of the same agent incarnation) is acknowledged again without
// being counted twice. An event about a pod the leader's cache does not
// hold yet is kept pending (at least once: retryPending counts it when the
// pod appears) and acknowledged.
func (in *ingest) oom(ev *streamv1.OOMEvent) (uint64, error) {
	if ev.GetSeq() == 0 {
		return 0, malformed("missing_seq", "oom_event.seq must be at least 1")
	}
	if ev.GetSeq() <= in.ackedSeq {
		return in.ackedSeq, nil
	}
	if ev.GetPodUid() == "" || ev.GetContainer() == "" {
		return 0, malformed("missing_identity", "oom_event needs pod_uid and container")
	}
	if err := checkIdentity("oom_event", ev.GetPodUid(), ev.GetContainer()); err != nil {
		return 0, err
	}
	if ev.GetCount() > streamv1.MaxOOMCount {
		return 0, malformed("oom_count_too_large", "oom_event.count %d exceeds %d (limit MaxOOMCount)", ev.GetCount(), streamv1.MaxOOMCount)
	}
	uid := types.UID(ev.GetPodUid())
	ok, reason := in.podOnNode(uid)
	if ok && !in.hasContainer(uid, ev.GetContainer()) {
		if err := in.containerUnknown("oom_event", uid, ev.GetContainer()); err != nil {
			return 0, err
		}
		in.ackedSeq = ev.GetSeq()
		return in.ackedSeq, nil
	}
	if !in.agent.count(ev.GetSeq()) {
		// Counted on an earlier stream of the same agent, whose ack was
		// lost: acknowledge again, count once.
		in.s.metrics.resent.Inc()
		in.ackedSeq = ev.GetSeq()
		return in.ackedSeq, nil
	}
	at := in.wall(ev.GetKernelNs())
	n := int(max(ev.GetCount(), 1))
	switch {
	case ok:
		in.s.cfg.Kernel.AddOOMKills(uid, ev.GetContainer(), at, n)
	case reason == DropPodUnknown:
		in.addPending(pendingOOM{pod: uid, container: ev.GetContainer(), at: at, count: n,
			expires: in.s.cfg.Now().Add(in.s.cfg.PendingOOMTTL)})
	default:
		in.s.metrics.dropped.WithLabelValues(reason).Inc()
	}
	in.ackedSeq = ev.GetSeq()
	return in.ackedSeq, nil
}

// addPending keeps an OOM event until its pod appears, within
// MaxPendingOOM per agent (the oldest goes first, counted as expired).
func (in *ingest) addPending(p pendingOOM) {
	a := in.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) >= in.s.cfg.MaxPendingOOM {
		a.pending = slices.Delete(a.pending, 0, 1)
		in.s.metrics.expired.WithLabelValues("full").Inc()
		in.s.metrics.pending.Dec()
	}
	a.pending = append(a.pending, p)
	in.s.metrics.pending.Inc()
}

// pendingRetry is how often a stream looks for the pods of its agent's
// pending OOM events.
const pendingRetry = time.Second

// retryPending goes over the agent's pending OOM events.
//   - It counts those whose pod the cache now holds.
//   - It drops those whose pod is on another node or has no such
//     container.
//   - It expires those that waited PendingOOMTTL.
func (in *ingest) retryPending() {
	a := in.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pending) == 0 {
		return
	}
	now := in.s.cfg.Now()
	a.pending = slices.DeleteFunc(a.pending, func(p pendingOOM) bool {
		ok, reason := in.podOnNode(p.pod)
		switch {
		case ok && in.hasContainer(p.pod, p.container):
			in.s.cfg.Kernel.AddOOMKills(p.pod, p.container, p.at, p.count)
			in.s.metrics.pendingCounted.Inc()
		case ok:
			in.s.metrics.dropped.WithLabelValues(DropContainerUnknown).Inc()
		case reason != DropPodUnknown:
			in.s.metrics.dropped.WithLabelValues(reason).Inc()
		case !now.Before(p.expires):
			in.s.metrics.expired.WithLabelValues("ttl").Inc()
		default:
			return false
		}
		in.s.metrics.pending.Dec()
		return true
	})
}

// Bounds of a container event's strings: far above what the kubelet
// reports, low enough that no agent fills the leader with them.
const (
	maxReasonBytes      = 256
	maxContainerIDBytes = 512
)

// containerEvent ingests one container event and returns the seq to
// acknowledge. An event about a pod that is not on the node, or a
// container its spec does not name, is dropped, counted and acknowledged.
// Applying an event twice (resent after a reconnect) changes nothing in
// signals.AgentStatuses, so events need no deduplication across streams.
func (in *ingest) containerEvent(ev *streamv1.ContainerEvent) (uint64, error) {
	switch {
	case ev.GetSeq() == 0:
		return 0, malformed("missing_seq", "container_event.seq must be at least 1")
	case ev.GetSeq() <= in.ackedEventSeq:
		return in.ackedEventSeq, nil
	case ev.GetPodUid() == "" || ev.GetContainer() == "":
		return 0, malformed("missing_identity", "container_event needs pod_uid and container")
	case ev.GetRestartCount() < 0:
		return 0, malformed("negative_restart_count", "container_event.restart_count %d is negative", ev.GetRestartCount())
	}
	var term *healthwatch.Termination
	if t := ev.GetTerminated(); t != nil {
		switch {
		case len(t.GetReason()) > maxReasonBytes:
			return 0, malformed("field_too_long", "container_event.terminated.reason is longer than %d bytes", maxReasonBytes)
		case len(t.GetContainerId()) > maxContainerIDBytes:
			return 0, malformed("field_too_long", "container_event.terminated.container_id is longer than %d bytes", maxContainerIDBytes)
		case t.GetFinishedAtUnixNs() <= 0:
			return 0, malformed("missing_finished_at", "container_event.terminated.finished_at_unix_ns must be set")
		}
		term = &healthwatch.Termination{ContainerID: t.GetContainerId(), Reason: t.GetReason(), ExitCode: t.GetExitCode(),
			FinishedAt: time.Unix(0, t.GetFinishedAtUnixNs())}
		if ns := t.GetStartedAtUnixNs(); ns > 0 {
			term.StartedAt = time.Unix(0, ns)
		}
	}
	in.ackedEventSeq = ev.GetSeq()
	uid := types.UID(ev.GetPodUid())
	if ok, reason := in.podOnNode(uid); !ok {
		in.s.metrics.dropped.WithLabelValues(reason).Inc()
		return in.ackedEventSeq, nil
	}
	if err := checkIdentity("container_event", ev.GetPodUid(), ev.GetContainer()); err != nil {
		return 0, err
	}
	if !in.hasContainer(uid, ev.GetContainer()) {
		in.s.metrics.dropped.WithLabelValues(DropContainerUnknown).Inc()
		return in.ackedEventSeq, nil
	}
	result := "known"
	if in.s.cfg.Statuses != nil && in.s.cfg.Statuses.Add(signals.ContainerEvent{PodUID: uid, Container: ev.GetContainer(),
		RestartCount: ev.GetRestartCount(), Terminated: term, At: in.wall(ev.GetKernelNs())}) {
		result = "new"
	}
	in.s.metrics.events.WithLabelValues(result).Inc()
	return in.ackedEventSeq, nil
}

// cachePod keeps a pod found on the node, with its containers' names.
func (in *ingest) cachePod(pod *corev1.Pod) {
	if len(in.onNode) >= in.s.cfg.MaxContainers {
		in.onNode = map[types.UID]podNames{} // a cache: bounded like the index table
	}
	spec := &pod.Spec
	names := make([]string, 0, len(spec.Containers)+len(spec.InitContainers)+len(spec.EphemeralContainers))
	for i := range spec.Containers {
		names = append(names, spec.Containers[i].Name)
	}
	for i := range spec.InitContainers {
		names = append(names, spec.InitContainers[i].Name)
	}
	for i := range spec.EphemeralContainers {
		names = append(names, spec.EphemeralContainers[i].Name)
	}
	in.onNode[pod.UID] = podNames{uid: pod.UID, names: names}
}

// shared returns the stream's cached strings equal to a pod UID and
// container name (see container). When the pod or name is not cached, it
// returns them as they are.
func (in *ingest) shared(uid types.UID, name string) (types.UID, string) {
	p, ok := in.onNode[uid]
	if !ok {
		return uid, name
	}
	if i := slices.Index(p.names, name); i >= 0 {
		name = p.names[i]
	}
	return p.uid, name
}

// hasContainer reports whether the pod's spec names the container, among
// its containers, init containers and ephemeral containers. It asks the
// stream's cache of the node's pods, else the leader's pod cache: for an
// ephemeral container added since, or a pod not cached.
func (in *ingest) hasContainer(uid types.UID, name string) bool {
	if p, ok := in.onNode[uid]; ok && slices.Contains(p.names, name) {
		return true
	}
	pod, ok := in.s.cfg.Pods.PodByUID(uid)
	if !ok {
		return false
	}
	if pod.Spec.NodeName == in.node {
		in.cachePod(pod)
	}
	for _, cs := range [][]corev1.Container{pod.Spec.Containers, pod.Spec.InitContainers} {
		for i := range cs {
			if cs[i].Name == name {
				return true
			}
		}
	}
	for i := range pod.Spec.EphemeralContainers {
		if pod.Spec.EphemeralContainers[i].Name == name {
			return true
		}
	}
	return false
}
