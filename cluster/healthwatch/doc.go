// Package healthwatch is the health watch's rules (docs/design.md section 3): after
// a change is applied at T0 it decides, from the workload's pods and the
// kernel's signals, whether the change breached a guardrail (and which
// resources to restore), is still being watched, or ended healthy. Every
// failure is a breach rolled back the same way: a signal (Restarts,
// OOMKills, Throttling), a pod of the change stuck (Unschedulable,
// Infeasible), or too few pods running the applied values (NotAdopted).
//
// The package is pure: no I/O, no locks, no goroutines. Evaluate reads no
// clock and writes nothing. The caller passes the time it decides at, the
// change from status.change, the policy's rollback guardrails, the
// workload's pods, the restart baselines captured at T0 and the signal
// sources. The sources are small interfaces: KernelSource for OOM kills the
// agents saw, AgentStatusSource for the container restarts and terminations
// the agents saw in the kubelet's Pods API before the apiserver had them,
// ThrottlingSource for the CFS throttling sums per container name. The
// stores that implement them from the agents' stream, and tell the leader
// which pod a new signal is about, are in cluster/signals.
//
// Decisions where the design is silent:
//
//   - Adoption (Adopted): for InPlace a pod is adopted when, for every
//     container the change changed, status.containerStatuses[].resources
//     holds the applied value of every request and limit of a touched
//     resource (status.resources absent means not adopted: the kubelet
//     reports it for running containers and, since Kubernetes 1.33, the
//     values a stopped container will restart with); for Rollout and
//     Deferred (and any other strategy) the pod's spec must hold them. A
//     pod without one of the changed containers is not adopted, nor is any
//     pod for a change without applied values. Quantities compare by
//     amount (250m equals 0.25), exactly, as cluster/apply does.
//   - Signals come only from the containers the change changed, and each
//     signal only from the containers where its resource changed (a request
//     or limit of it differs between previous and applied values): an OOM
//     kill in a container whose memory the change did not move cannot be
//     cured by restoring memory. Restarts count in every changed container.
//   - Restarts: restartCount minus the baseline captured at T0 (never below
//     zero) for pods created at or before T0; pods created after T0 count
//     in full whatever the baselines say. A pod or container with no
//     baseline counts in full (RestartBaselines, which the leader records
//     in status.change, records 0 for containers without a status, so a
//     pod that existed at T0 is always present).
//   - Restarts the change causes itself are not harm: for an InPlace
//     change, a container whose resizePolicy is RestartContainer for a
//     resource the change moved in it restarts once to be resized, so one
//     restart per such container of a pod that existed at T0 is not
//     counted (the message says so); every further restart counts. Pods
//     created after T0 started with the values and were not resized.
//     restartCount has no timestamps, so restarts after the watch's end are
//     counted if the watch is evaluated late.
//   - OOM kills per (pod, container): max(kernel events, kernel count,
//     status count). The kernel count is each instance's absolute count
//     (OOMCountSource) less its baseline at T0 (Input.OOMBaselines, taken
//     on the first evaluation that has the count: Verdict.OOMBaselines),
//     in full for an instance started at or after T0 or a pod created
//     after it; it is read as of now, so kills after the watch's end count
//     if the watch is evaluated late. The status count is the terminations with reason OOMKilled that finished
//     after T0 and at or before the watch's end, among state.terminated and
//     lastState.terminated (one termination seen in both is counted once):
//     the kubelet shows at most the two newest, so it is 0, 1 or 2 even
//     when restartCount rose more; the kernel count covers kills the status
//     folded away, and restarts it does not explain still count as
//     restarts. Without kernel data for a container, the status count
//     alone.
//   - The agents' view of a container's status (AgentStatusSource) is an
//     earlier copy of pod status, so it can make a count arrive sooner but
//     never count twice: restartCount is the higher of the two; the status
//     OOM count takes each run that ended OOMKilled once wherever it shows
//     (the same container id, or without one the same finish time to the
//     second, as the apiserver keeps status times), including runs pod
//     status folded away that the agent saw.
//   - Throttling (see ThrottlingSource and Counters): per container name
//     over [T0+2m, min(now, end)], evaluated for a name once its Σ Δperiods
//     ≥ 300; the ratio is compared exactly (rational arithmetic against the
//     decimal string) and shown truncated, never rounded across the
//     threshold. The signal counts as evaluated only when every container
//     whose cpu changed has a ratio; a container without a CPU limit has no
//     CFS periods and is never evaluated, which the message says. With a
//     source that gives raw samples (a CounterSource: the agents'
//     counters), each container's counters at the window's start are
//     returned once the window opens (Verdict.ThrottlingBaselines) for
//     status.change, and a recorded baseline is added as a reading of the
//     instance that ran at its time, so a leader that took over continues
//     the window instead of starting it at its own first sample.
//   - Stuck pods: a pod of the change (its spec holds the applied values:
//     a pod of the new template, one the webhook injected, one resized in
//     place) that is Pending with PodScheduled=False, reason
//     Unschedulable, or whose PodResizePending condition says Infeasible
//     (observed for the pod's generation, as cluster/apply reads it), for
//     unschedulableGrace or longer (≥; 59s of a 1m grace is not enough,
//     60s is), counted from the condition's lastTransitionTime but not
//     before T0, is a breach Unschedulable or Infeasible without waiting
//     for the end. It restores every touched resource. NextCheck is when
//     the first stuck pod reaches the grace.
//   - Several breaches at once: the reason is the first of Restarts,
//     Unschedulable, Infeasible, OOMKills, Throttling (widest restore
//     first); Restore is the union of the breached signals' restores, so
//     an OOM kill and throttling together restore both memory and cpu;
//     Figures lists every crossing figure.
//   - Adoption (NotAdopted), checked only without another breach: the
//     adopted share of the current pods (not terminated, not being
//     deleted) is short when no pod adopted (whatever
//     adoptionThresholdPercent says: 0 requires no share but does not
//     accept none; with no current pod the share is 0) or when it is below
//     adoptionThresholdPercent. Short at or after the watch's end is a
//     breach NotAdopted restoring every touched resource. Before the end
//     it is one as soon as the threshold can no longer be met: from T0 +
//     unschedulableGrace on, with at least one current pod, every current
//     pod either adopted or never will by itself. A pod never will when
//     its spec lacks the values and it was created after T0 or the change
//     is InPlace (a pod's resources change after creation only by a
//     resize, and the leader resizes only when it applies), or, for
//     InPlace, when its spec holds them but the kubelet is done with it
//     (status.observedGeneration ≥ generation, resources reported for
//     every changed container, no PodResizePending or PodResizeInProgress)
//     and it runs other values. A pod of a Rollout or Deferred change that
//     existed at T0 may still be replaced and keeps the decision for the
//     end. A breach of a signal up to the end still wins at the end.
//   - Watching says what is not evaluated yet in its message (Verdict's
//     NotEvaluated: throttling before its window opens or holds 300
//     periods, or without a throttling source), never in its reason; a
//     watch that ends Healthy with a signal never evaluated says so in its
//     message.
package healthwatch
