package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LeaderPodLabel marks the pod of the replica that holds the Lease (value
// "true"). The kerf-leader Service selects it, so the agents' streams reach
// the leader, while every replica stays Ready. A PodDisruptionBudget can
// then let a drain evict the leader's pod, and the standby takes over.
// Were the standby never Ready, the drain would block on it.
const LeaderPodLabel = "kerf.dev/leader"

// labelPatch sets LeaderPodLabel (value "true") or removes it (value "").
func labelPatch(value string) client.Patch {
	var v any
	if value != "" {
		v = value
	}
	raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{LeaderPodLabel: v}}})
	return client.RawPatch(types.MergePatchType, raw)
}

// unmarkOwnPod removes the label from this replica's pod: a replica that
// starts, or starts again, does not lead yet.
func (l *Leader) unmarkOwnPod(ctx context.Context) error {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: l.cfg.Namespace, Name: l.cfg.PodName}}
	if err := l.mgr.GetClient().Patch(ctx, pod, labelPatch("")); err != nil {
		return fmt.Errorf("remove label %s from pod %s/%s: %w", LeaderPodLabel, l.cfg.Namespace, l.cfg.PodName, err)
	}
	return nil
}

// markLeaderPod labels this replica's pod and removes the label from any
// other pod that still has it. A leader that died without cleaning up
// leaves one. It retries until it succeeds or ctx is done.
func (l *Leader) markLeaderPod(ctx context.Context) {
	delay := 100 * time.Millisecond
	for {
		err := l.markOnce(ctx)
		if err == nil {
			l.log.Info("marked the leader's pod", "pod", l.cfg.Namespace+"/"+l.cfg.PodName, "label", LeaderPodLabel)
			return
		}
		l.log.Error("mark the leader's pod (the agents' Service routes by it); retrying", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

func (l *Leader) markOnce(ctx context.Context) error {
	var pods corev1.PodList
	if err := l.mgr.GetAPIReader().List(ctx, &pods, client.InNamespace(l.cfg.Namespace), client.HasLabels{LeaderPodLabel}); err != nil {
		return fmt.Errorf("list pods labeled %s: %w", LeaderPodLabel, err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Name != l.cfg.PodName {
			if err := client.IgnoreNotFound(l.mgr.GetClient().Patch(ctx, p, labelPatch(""))); err != nil {
				return fmt.Errorf("remove label %s from the former leader's pod %s: %w", LeaderPodLabel, p.Name, err)
			}
		}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: l.cfg.Namespace, Name: l.cfg.PodName}}
	if err := l.mgr.GetClient().Patch(ctx, pod, labelPatch("true")); err != nil {
		return fmt.Errorf("label pod %s/%s %s=true: %w", l.cfg.Namespace, l.cfg.PodName, LeaderPodLabel, err)
	}
	return nil
}
