package scenario

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/sandbox"
)

// Container is the name of the workload's one container.
const Container = "app"

// Workload describes a kerf-workload Deployment.
type Workload struct {
	// Name is the Deployment's name; its pods carry app=<Name>.
	Name string
	// Requests and Limits are the manifest's values, such as "50m", "64Mi".
	CPURequest, CPULimit, MemoryRequest, MemoryLimit string
	// Args are kerf-workload's flags, such as --burn-millicores=300.
	Args []string
	// Replicas is the number of pods (0: one).
	Replicas int32
	// OnePerNode keeps any two replicas off the same node (a required
	// podAntiAffinity on kubernetes.io/hostname).
	OnePerNode bool
	// Node, when set, is the only node the pods may run on (a nodeSelector
	// on kubernetes.io/hostname).
	Node string
	// TolerateVMNode lets the pods run on the sandbox's VM node: they
	// tolerate its NoSchedule taint sandbox.VMNodeTaint.
	TolerateVMNode bool
}

// Selector is the label selector of the workload's pods.
func (w Workload) Selector() map[string]string { return map[string]string{"app": w.Name} }

// replicas is the number of pods the Deployment runs.
func (w Workload) replicas() int32 {
	if w.Replicas == 0 {
		return 1
	}
	return w.Replicas
}

// Deployment is the workload's Deployment in ns.
func (w Workload) Deployment(ns string) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.Name, Labels: w.Selector()},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(w.replicas()),
			Selector: &metav1.LabelSelector{MatchLabels: w.Selector()},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: w.Selector()},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name:            Container,
						Image:           WorkloadImage,
						ImagePullPolicy: corev1.PullNever,
						Args:            w.Args,
						Ports:           []corev1.ContainerPort{{Name: "control", ContainerPort: 8080}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstrPort(8080)}},
							PeriodSeconds: 1,
						},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: *quantity(w.CPURequest), corev1.ResourceMemory: *quantity(w.MemoryRequest)},
							Limits:   corev1.ResourceList{corev1.ResourceCPU: *quantity(w.CPULimit), corev1.ResourceMemory: *quantity(w.MemoryLimit)},
						},
						// Memory and CPU change in place without a restart,
						// the kubelet's default said out loud.
						ResizePolicy: []corev1.ContainerResizePolicy{
							{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired},
							{ResourceName: corev1.ResourceMemory, RestartPolicy: corev1.NotRequired},
						},
					}},
				},
			},
		},
	}
	spec := &d.Spec.Template.Spec
	if w.Node != "" {
		spec.NodeSelector = map[string]string{corev1.LabelHostname: w.Node}
	}
	if w.TolerateVMNode {
		spec.Tolerations = []corev1.Toleration{{Key: sandbox.VMNodeTaint, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	}
	if w.OnePerNode {
		spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: w.Selector()},
				TopologyKey:   corev1.LabelHostname,
			}},
		}}
	}
	return d
}

// Deploy creates the workload, on Env.Node when it is set, and waits for
// its pods to be ready; it returns the first.
func (e *Env) Deploy(ctx context.Context, w Workload) (*corev1.Pod, error) {
	w, err := e.place(ctx, w)
	if err != nil {
		return nil, err
	}
	where := ""
	if w.Node != "" {
		where = " on node " + w.Node
	}
	e.Say("deploying %s%s (requests cpu %s memory %s, limits cpu %s memory %s)", w.Name, where, w.CPURequest, w.MemoryRequest, w.CPULimit, w.MemoryLimit)
	if err := e.Client.Create(ctx, w.Deployment(e.Namespace)); err != nil {
		return nil, fmt.Errorf("create Deployment %s/%s: %w", e.Namespace, w.Name, err)
	}
	timeout := 2 * time.Minute
	if w.TolerateVMNode {
		timeout += VMNodeGrace
	}
	return e.WaitPod(ctx, w, timeout)
}

// place pins the workload to Env.Node, tolerating the VM node's taint
// when that node is the VM node.
func (e *Env) place(ctx context.Context, w Workload) (Workload, error) {
	if e.Node == "" {
		return w, nil
	}
	vm, err := e.onVMNode(ctx, e.Node)
	if err != nil {
		return w, fmt.Errorf("pin the workloads to Env.Node: %w", err)
	}
	w.Node = e.Node
	w.TolerateVMNode = w.TolerateVMNode || vm
	return w, nil
}

// WaitPod waits for the workload's replicas (one unless it says more) to be
// ready and returns the first.
func (e *Env) WaitPod(ctx context.Context, w Workload, timeout time.Duration) (*corev1.Pod, error) {
	var pod corev1.Pod
	n := w.replicas()
	what := "a ready pod of " + w.Name
	if n > 1 {
		what = fmt.Sprintf("%d ready pods of %s", n, w.Name)
	}
	err := Poll(ctx, timeout, 100*time.Millisecond, what, func(ctx context.Context) (bool, error) {
		pods, err := e.RunningPods(ctx, w.Selector())
		if err != nil || len(pods) != int(n) {
			return false, err
		}
		pod = pods[0]
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	return &pod, nil
}

// Policy is the namespaced policy the scenarios run under: the design's
// thresholds, with a watch long enough for the throttling rule's two
// minutes and 300 periods.
func Policy(ns string, watchFor time.Duration) *v1alpha1.RightsizingPolicy {
	return &v1alpha1.RightsizingPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scenario"},
		Spec: v1alpha1.PolicySpec{
			Weight: 100,
			Guardrails: v1alpha1.Guardrails{Rollback: v1alpha1.RollbackGuardrails{
				WatchDuration: &metav1.Duration{Duration: watchFor},
				OOMKills:      ptr.To[int32](1),
				Restarts:      ptr.To[int32](3),
				// 0.25 and Previous are the defaults, spelled out for the
				// reader of the demo.
				ThrottlingRatio: "0.25",
				RestoreTo:       v1alpha1.RestorePrevious,
				Cooldown:        &metav1.Duration{Duration: time.Hour},
			}},
		},
	}
}

// EnsurePolicy creates the scenarios' policy in the namespace once.
func (e *Env) EnsurePolicy(ctx context.Context, watchFor time.Duration) error {
	err := e.Client.Create(ctx, Policy(e.Namespace, watchFor))
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// Recommend creates a RightsizingRecommendation named after the workload.
func (e *Env) Recommend(ctx context.Context, w Workload, strategy v1alpha1.Strategy, res v1alpha1.ContainerResources, hpa *v1alpha1.HPACoordination) (*v1alpha1.RightsizingRecommendation, error) {
	res.Name = Container
	rsr := &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: w.Name},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef:  v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: w.Name},
			Strategy:   strategy,
			Containers: []v1alpha1.ContainerResources{res},
			HPA:        hpa,
		},
	}
	if err := e.Client.Create(ctx, rsr); err != nil {
		return nil, fmt.Errorf("create RightsizingRecommendation %s/%s: %w", e.Namespace, w.Name, err)
	}
	return rsr, nil
}

// RSR reads the workload's recommendation.
func (e *Env) RSR(ctx context.Context, name string) (*v1alpha1.RightsizingRecommendation, error) {
	var rsr v1alpha1.RightsizingRecommendation
	err := e.Client.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: name}, &rsr)
	return &rsr, err
}

// WaitPhase waits until the recommendation reaches phase (and, when reason
// is set, that reason) and returns it with the time it was seen.
func (e *Env) WaitPhase(ctx context.Context, name string, phase v1alpha1.Phase, reason string, timeout time.Duration) (*v1alpha1.RightsizingRecommendation, time.Time, error) {
	var rsr *v1alpha1.RightsizingRecommendation
	var seen time.Time
	last := ""
	err := Poll(ctx, timeout, 50*time.Millisecond, fmt.Sprintf("recommendation %s/%s to reach %s %s", e.Namespace, name, phase, reason), func(ctx context.Context) (bool, error) {
		r, err := e.RSR(ctx, name)
		if err != nil {
			return false, err
		}
		rsr = r
		if now := string(r.Status.Phase) + " " + r.Status.Reason; now != last {
			last = now
		}
		if r.Status.Phase == phase && (reason == "" || r.Status.Reason == reason || healthReason(r) == reason) {
			seen = time.Now()
			return true, nil
		}
		if r.Status.Phase == v1alpha1.PhaseFailed || r.Status.Phase == v1alpha1.PhaseBlocked {
			return false, fmt.Errorf("recommendation is %s (%s): %s", r.Status.Phase, r.Status.Reason, r.Status.Message)
		}
		return false, nil
	})
	if err != nil && rsr != nil {
		err = fmt.Errorf("%w; it is %s", err, last)
	}
	return rsr, seen, err
}

// healthReason is the HealthWatch condition's reason.
func healthReason(r *v1alpha1.RightsizingRecommendation) string {
	for _, c := range r.Status.Conditions {
		if c.Type == v1alpha1.ConditionHealthWatch {
			return c.Reason
		}
	}
	return ""
}

// History returns the recommendation's actions of type t.
func History(r *v1alpha1.RightsizingRecommendation, t v1alpha1.ActionType) []v1alpha1.Action {
	var out []v1alpha1.Action
	for _, a := range r.Status.History {
		if a.Type == t {
			out = append(out, a)
		}
	}
	return out
}

// leaderMarks returns what the leader said about the recommendation, from
// its Events (events.k8s.io/v1 eventTime has microseconds; the history's
// times are whole seconds).
func (e *Env) leaderMarks(ctx context.Context, name string) Timeline {
	var list eventsv1.EventList
	if err := e.Client.List(ctx, &list, client.InNamespace(e.Namespace)); err != nil {
		return Timeline{{At: time.Now(), Who: "scenario", What: "cannot list the leader's events: " + err.Error()}}
	}
	var t Timeline
	for _, ev := range list.Items {
		if ev.Regarding.Kind != "RightsizingRecommendation" || ev.Regarding.Name != name || ev.ReportingController == "" {
			continue
		}
		note := ev.Note
		if len(note) > 160 {
			note = note[:157] + "..."
		}
		t = append(t, Mark{At: ev.EventTime.Time, Who: "leader", What: ev.Reason + ": " + note})
	}
	return t
}

func intstrPort(p int32) intstr.IntOrString { return intstr.FromInt32(p) }
