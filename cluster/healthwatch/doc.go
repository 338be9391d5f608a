// Package healthwatch is the health watch's rules: whether a change
// applied at T0 breached a guardrail, is still watched, or ended healthy.
//
// docs/design.md section 3 sets the rules. They decide from the
// workload's pods and the kernel's signals, and a breach says which
// resources to restore. Every failure is a breach rolled back the same
// way:
//   - a signal: Restarts, OOMKills, Throttling;
//   - a pod of the change stuck: Unschedulable, Infeasible;
//   - too few pods running the applied values: NotAdopted.
//
// The package is pure: no I/O, no locks, no goroutines. Evaluate reads no
// clock and writes nothing. The caller passes the time it decides at, the
// change from status.change, the policy's rollback guardrails, the
// workload's pods, the restart baselines captured at T0 and the signal
// sources. The sources are small interfaces:
//   - KernelSource for the OOM kills the agents saw, and OOMCountSource
//     for the kernel's absolute OOM kill counts;
//   - AgentStatusSource for the container restarts and terminations the
//     agents saw in the kubelet's Pods API before the apiserver had them;
//   - ThrottlingSource for the CFS throttling sums per container name;
//     Counters makes one of a CounterSource's raw samples.
//
// The stores that implement them from the agents' stream, and tell the
// leader which pod a new signal is about, are in cluster/signals.
//
// Decisions where the design is silent:
//
//   - Adoption (Adopted): for InPlace a pod is adopted when, for every
//     container the change changed, status.containerStatuses[].resources
//     holds the applied value of every request and limit of a touched
//     resource. status.resources absent means not adopted. The kubelet
//     reports it for running containers and, since Kubernetes 1.33, the
//     values a stopped container will restart with. For Rollout and
//     Deferred, and any other strategy, the pod's spec must hold them. A
//     pod without one of the changed containers is not adopted, nor is any
//     pod for a change without applied values. Quantities compare by
//     amount (250m equals 0.25), exactly, as cluster/apply does.
//   - Signals come only from the containers the change changed. Each
//     signal comes only from the containers where its resource changed: a
//     request or limit of it differs between previous and applied values.
//     An OOM kill in a container whose memory the change did not move
//     cannot be cured by restoring memory. Restarts count in every changed
//     container.
//   - Restarts: restartCount minus the baseline captured at T0, never
//     below zero, for pods created at or before T0. Pods created after T0
//     count in full whatever the baselines say. A pod or container with no
//     baseline counts in full. RestartBaselines, which the leader records
//     in status.change, records 0 for containers without a status, so a
//     pod that existed at T0 is always present.
//   - Restarts the change causes itself are not harm. For an InPlace
//     change, a container whose resizePolicy is RestartContainer for a
//     resource the change moved in it restarts once to be resized. So one
//     restart per such container of a pod that existed at T0 is not
//     counted, and the message says so; every further restart counts.
//     Pods created after T0 started with the values and were not resized.
//     restartCount has no timestamps, so restarts after the watch's end
//     are counted if the watch is evaluated late.
//   - OOM kills per (pod, container): max(kernel events, kernel count,
//     status count).
//     The kernel count is each instance's absolute count (OOMCountSource)
//     less its baseline at T0. The baseline is Input.OOMBaselines, taken
//     on the first evaluation that has the count (Verdict.OOMBaselines).
//     An instance started at or after T0, or of a pod created after it,
//     counts in full. The count is read as of now, so kills after the
//     watch's end count if the watch is evaluated late.
//     The status count is the terminations with reason OOMKilled that
//     finished after T0 and at or before the watch's end. They are
//     counted among state.terminated and lastState.terminated, a
//     termination seen in both once. The kubelet shows at most the two
//     newest, so the count is 0, 1 or 2 even when restartCount rose more.
//     The kernel count covers kills the status folded away, and restarts
//     it does not explain still count as restarts. Without kernel data
//     for a container, the status count alone.
//   - The agents' view of a container's status (AgentStatusSource) is an
//     earlier copy of pod status. So it can make a count arrive sooner but
//     never count twice. restartCount is the higher of the two. The
//     status OOM count takes each run that ended OOMKilled once wherever
//     it shows, including runs pod status folded away that the agent saw.
//     Two views show the same run when they have the same container id,
//     or without one the same finish time to the second, as the apiserver
//     keeps status times.
//   - Throttling (see ThrottlingSource and Counters) is per container
//     name over [T0+2m, min(now, end)]. It is evaluated for a name once
//     its Σ Δperiods ≥ 300. The ratio is compared exactly, in rational
//     arithmetic against the decimal string, and shown truncated, never
//     rounded across the threshold. The signal counts as evaluated only
//     when every container whose cpu changed has a ratio. A container
//     without a CPU limit has no CFS periods and is never evaluated, which
//     the message says.
//     A CounterSource, such as the agents' counters, gives raw samples.
//     With one, each container's counters at the window's start are
//     returned once the window opens (Verdict.ThrottlingBaselines), for
//     status.change. A recorded baseline is added as a reading of the
//     instance that ran at its time. So a leader that took over continues
//     the window instead of starting it at its own first sample.
//   - Stuck pods: a pod of the change is stuck when it is Pending with
//     PodScheduled=False, reason Unschedulable, or when its
//     PodResizePending condition says Infeasible, observed for the pod's
//     generation as cluster/apply reads it. A pod of the change is one
//     whose spec holds the applied values: a pod of the new template, one
//     the webhook injected, one resized in place. Stuck for
//     unschedulableGrace or longer, it is a breach Unschedulable or
//     Infeasible without waiting for the end. The grace is inclusive: 59s
//     of a 1m grace is not enough, 60s is. The time counts from the condition's
//     lastTransitionTime but not before T0. The breach restores every
//     touched resource. NextCheck is when the first stuck pod reaches the
//     grace.
//   - Several breaches at once: the reason is the first of Restarts,
//     Unschedulable, Infeasible, OOMKills, Throttling, the widest restore
//     first. Restore is the union of the breached signals' restores, so an
//     OOM kill and throttling together restore both memory and cpu.
//     Figures lists every crossing figure.
//   - Adoption (NotAdopted) is checked only without another breach. The
//     current pods are those not terminated and not being deleted. Their
//     adopted share is short when it is below adoptionThresholdPercent. It
//     is short too when no pod adopted, whatever adoptionThresholdPercent
//     says: 0 requires no share but does not accept none. With no current
//     pod the share is 0.
//     Short at or after the watch's end is a breach NotAdopted restoring
//     every touched resource. Before the end it is one as soon as the
//     threshold can no longer be met. That is from T0 + unschedulableGrace
//     on, when there is at least one current pod and every current pod
//     either adopted or never will by itself.
//     A pod's resources change after creation only by a resize, and the
//     leader resizes only when it applies. So a pod never will when its
//     spec lacks the values and it was created after T0 or the change is
//     InPlace. For InPlace a pod never will either when its spec holds the
//     values but it runs others and the kubelet is done with it. Done means
//     status.observedGeneration ≥ generation, resources reported for
//     every changed container, and no PodResizePending or
//     PodResizeInProgress.
//     A pod of a Rollout or Deferred change that existed at T0 may still
//     be replaced and keeps the decision for the end. A breach of a signal
//     up to the end still wins at the end.
//   - Watching says what is not evaluated yet in its message, never in its
//     reason (Verdict's NotEvaluated). That is throttling before its
//     window opens or holds 300 periods, or without a throttling source. A
//     watch that ends Healthy with a signal never evaluated says so in its
//     message.
package healthwatch
