package scenario

import (
	"context"
	"fmt"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
)

// RestartWorkload is the restarts scenario's workload.
var RestartWorkload = Workload{Name: "restart-demo", CPURequest: "50m", CPULimit: "500m", MemoryRequest: "64Mi", MemoryLimit: "128Mi"}

// Restarts changes both resources of a workload through a rollout, then
// makes the new pod crash three times, and expects Kerf to roll both back
// (and the HPA target with them, when opts.HPA).
func (e *Env) Restarts(ctx context.Context, opts Options) (*Result, error) {
	w := RestartWorkload
	r, pod, err := e.begin(ctx, w)
	if err != nil {
		return r, err
	}
	r.mark("kernel", "%s, %s %d MiB", cpuRequest(r.Before), r.Before.MemoryFile(), r.Before.MemoryBytes/Mi)
	var hpa *v1alpha1.HPACoordination
	if opts.HPA {
		if err := e.Client.Create(ctx, hpaFor(e.Namespace, w.Name, 60)); err != nil {
			return r, fmt.Errorf("create HorizontalPodAutoscaler: %w", err)
		}
		r.HPATarget[0] = 60
		hpa = &v1alpha1.HPACoordination{Coordinate: true}
	}

	e.Say("recommending cpu request 100m and memory request 96Mi, by a rollout")
	r.Changed = time.Now()
	r.mark("scenario", "RightsizingRecommendation: requests cpu 50m → 100m, memory 64Mi → 96Mi, Rollout")
	if _, err := e.Recommend(ctx, w, v1alpha1.StrategyRollout, v1alpha1.ContainerResources{
		Requests: &v1alpha1.ResourceValues{CPU: quantity("100m"), Memory: quantity("96Mi")},
	}, hpa); err != nil {
		return r, err
	}
	if _, _, err := e.WaitPhase(ctx, w.Name, v1alpha1.PhaseWatching, "", r.wait(time.Minute)); err != nil {
		return r, err
	}
	if err := Poll(ctx, r.wait(2*time.Minute), 50*time.Millisecond, "the new pod with cpu request 100m", func(ctx context.Context) (bool, error) {
		pods, err := e.RunningPods(ctx, w.Selector())
		if err != nil || len(pods) != 1 {
			return false, err
		}
		if pods[0].Spec.Containers[0].Resources.Requests.Cpu().MilliValue() != 100 {
			return false, nil
		}
		pod = &pods[0]
		return true, nil
	}); err != nil {
		return r, err
	}
	if r.Applied, err = e.KernelLimits(ctx, pod, Container); err != nil {
		return r, err
	}
	r.mark("kernel", "new pod: %s", cpuRequest(r.Applied))
	if opts.HPA {
		if r.HPATarget[1], err = e.hpaTarget(ctx, w.Name); err != nil {
			return r, err
		}
		r.mark("leader", "HPA CPU utilization target %d%% → %d%%", r.HPATarget[0], r.HPATarget[1])
	}
	if opts.MidWatch != nil {
		if err := opts.MidWatch(ctx); err != nil {
			return r, err
		}
	}

	for i := int32(1); i <= 3; i++ {
		e.Say("crash %d of 3: POST /crash?code=1", i)
		r.mark("scenario", "POST /crash?code=1 (%d of 3)", i)
		if err := e.Control(ctx, pod, "crash", "code=1"); err != nil {
			return r, err
		}
		if err := Poll(ctx, r.wait(2*time.Minute), 50*time.Millisecond, fmt.Sprintf("restart %d", i), func(ctx context.Context) (bool, error) {
			var p corev1.Pod
			if err := e.Client.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
				return false, err
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.Name != Container || cs.RestartCount < i {
					continue
				}
				if i == 3 {
					return true, nil
				}
				// The next crash needs the container back up.
				if cs.Ready {
					*pod = p
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return r, err
		}
		r.mark("kubelet", "restartCount %d", i)
		if i == 3 {
			r.signal(time.Now())
		}
	}
	rsr, seen, err := e.WaitPhase(ctx, w.Name, v1alpha1.PhaseRolledBack, v1alpha1.HealthWatchRestarts, r.wait(time.Minute))
	if err != nil {
		return r, err
	}
	r.RSR, r.RolledBack = rsr, seen
	r.mark("scenario", "recommendation reads RolledBack (%s)", rsr.Status.Reason)
	if err := Poll(ctx, r.wait(2*time.Minute), 50*time.Millisecond, "a pod with the manifest's requests again", func(ctx context.Context) (bool, error) {
		pods, err := e.RunningPods(ctx, w.Selector())
		if err != nil || len(pods) != 1 {
			return false, err
		}
		c := pods[0].Spec.Containers[0].Resources.Requests
		if c.Cpu().MilliValue() != 50 || c.Memory().Value() != 64*Mi {
			return false, nil
		}
		pod = &pods[0]
		return true, nil
	}); err != nil {
		return r, err
	}
	if r.Restored, err = e.KernelLimits(ctx, pod, Container); err != nil {
		return r, err
	}
	r.KernelRestored = time.Now()
	r.mark("kernel", "new pod: %s, %s %d MiB", cpuRequest(r.Restored), r.Restored.MemoryFile(), r.Restored.MemoryBytes/Mi)
	if opts.HPA {
		if err := Poll(ctx, r.wait(30*time.Second), 50*time.Millisecond, "the HPA target back at 60%", func(ctx context.Context) (bool, error) {
			t, err := e.hpaTarget(ctx, w.Name)
			r.HPATarget[2] = t
			return err == nil && t == r.HPATarget[0], err
		}); err != nil {
			return r, err
		}
		r.mark("leader", "HPA CPU utilization target back to %d%%", r.HPATarget[2])
	}
	if r.RSR, err = e.waitRestored(ctx, w.Name, r.wait(time.Minute)); err != nil {
		return r, err
	}
	r.Timeline = append(r.Timeline, e.leaderMarks(ctx, w.Name)...)
	return r, nil
}

// hpaFor is an HPA of the Deployment name in ns at a CPU utilization
// target, the one the restarts scenario changes and restores.
func hpaFor(ns, name string, target int32) *autoscalingv2.HorizontalPodAutoscaler {
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: name},
			MinReplicas:    ptr.To[int32](1),
			MaxReplicas:    1,
			Metrics: []autoscalingv2.MetricSpec{{
				Type: autoscalingv2.ResourceMetricSourceType,
				Resource: &autoscalingv2.ResourceMetricSource{
					Name:   corev1.ResourceCPU,
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.UtilizationMetricType, AverageUtilization: ptr.To(target)},
				},
			}},
		},
	}
}

func (e *Env) hpaTarget(ctx context.Context, name string) (int32, error) {
	var h autoscalingv2.HorizontalPodAutoscaler
	if err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: name}, &h); err != nil {
		return 0, err
	}
	for _, m := range h.Spec.Metrics {
		if m.Resource != nil && m.Resource.Name == corev1.ResourceCPU && m.Resource.Target.AverageUtilization != nil {
			return *m.Resource.Target.AverageUtilization, nil
		}
	}
	return 0, fmt.Errorf("HPA %s has no CPU utilization target", name)
}
