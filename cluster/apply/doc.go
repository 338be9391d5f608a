// Package apply makes a RightsizingRecommendation's values run on its
// workload, and puts values back for a rollback.
//
// It writes with the recommendation's strategy (docs/design.md sections 2
// and 4). It reads the workload, its ReplicaSets, its running pods and
// HPAs. It writes the pod template, the pods' pods/resize subresource and
// the coordinated HPA's cpu target.
//
// The leader calls Plan, records the returned change in status.change, then
// calls Apply. Every write is conditional on the object's resourceVersion
// and idempotent. So a leader that takes over mid-apply calls Apply again
// with the recorded change and finishes it without changing anything twice.
// Restore undoes a change, or part of it, with the strategy that applied it.
//
// Decisions where the design is silent:
//
//   - What runs now (Running, and Plan's previous values): for InPlace the
//     value every running pod agrees on, per field, else the template's;
//     for Rollout and Deferred the template's. A change records only the
//     containers whose values differ, with the fields the recommendation
//     sets. Resources are cpu and/or memory where a request or limit
//     differs.
//   - Plan refuses values that cannot run: a container the template lacks,
//     a request above the limit the container keeps, an InPlace change of
//     QoS class (Kubernetes forbids it in place).
//   - InPlace resizes the running, not deleted pods the workload controls
//     through pods/resize. A Deployment controls them through its current
//     ReplicaSet: the one whose template is the Deployment's, ignoring
//     pod-template-hash. A resize is conditional on resourceVersion and
//     retried on conflict with a fresh read. A refusal by the apiserver is
//     a Failure with reason v1alpha1.ResizeRejected. A change with an
//     unpromoted canary (status.change.canary) resizes, and restores,
//     only the canary pods; the others are neither written nor reported.
//   - The pods are resized up to Applier.ResizeConcurrency at once
//     (DefaultResizeConcurrency, 16); the Clientset's rate limiter still
//     bounds the requests. Result lists them by pod name whatever order
//     the resizes finish in. An error on one pod starts no further resize.
//     Those in flight finish and the error of the first pod by name is
//     returned. Apply and Restore then return no Result: done again, the
//     apply reports the pods already resized without writing them again.
//     A cancelled context starts no further resize either.
//   - RestartContainer resize policies are honoured and noted. The pod's
//     resize conditions decide:
//     Infeasible ends an apply at once with the pod in Result.Infeasible,
//     not Failed. The health watch rolls the change back if it stays
//     Infeasible past unschedulableGrace; a restore gives up on the pod
//     (see Left).
//     Deferred and InProgress fail once they last ResizeTimeout (≥,
//     counted from the condition's lastTransitionTime but not before
//     appliedAt).
//     A condition observed for an older pod generation is ignored.
//     Otherwise the pod is Pending while the kubelet has not observed its
//     generation or its status reports other values than its spec.
//   - Rollout, and Deferred on OnDelete workloads, send a strategic-merge
//     patch of the named containers' resources carrying the resourceVersion
//     read; a conflict is returned.
//   - Restore patches the template for Deferred whatever the update
//     strategy, as design section 4 says; with the previous values that is
//     no write on a rolling workload. It also resizes back in place the
//     pods that started with the values, which the webhook gave them, since
//     nothing else would: an OOM-killed container restarts with its pod's
//     limits. So does the restore of a Rollout on an OnDelete workload,
//     whose pods from the changed template nothing replaces. A pod that
//     cannot be resized back (QoS class, Infeasible, or stuck past
//     ResizeTimeout) is in Result.Left, not Failed. It keeps the values
//     until it is recreated, and the leader says so in the rollback's
//     message.
//   - The HPA target keeps utilization × request: new = round(old × old
//     request / new request). The request is the sum of the pod's
//     containers' cpu requests, a missing request counting its limit, as
//     the HPA divides a pod's usage by that sum. It is at least 1 and not
//     capped at 100.
//   - Only an autoscaling/v2 cpu Resource metric with a Utilization target
//     is coordinated. Several HPAs on one workload, none, or none of that
//     metric are noted and skipped. The HPA moves only from the recorded
//     previous target to the applied one, and back. A target someone else
//     changed is left alone with a note.
//   - Result.Touched lists every object that carries the values, written by
//     this call or an earlier one, so calling again reports the same.
package apply
