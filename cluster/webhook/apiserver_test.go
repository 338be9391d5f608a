package webhook

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

const (
	kerfNamespace   = "kerf-system"
	appNamespace    = "shop"
	configName      = "kerf-test"
	fingerprintSeen = "fp-1"
)

// webhookEnv is the webhook served on loopback and registered with the
// real apiserver.
type webhookEnv struct {
	c        client.Client
	cache    cache.Cache
	injector *Injector
	addr     string // the webhook server's host:port
	stop     func() // stops the webhook server and waits for it
	// servingCA is the CA of the webhook's serving certificate.
	servingCA []byte
}

// startWebhook serves the injector over HTTPS on a free loopback port with
// the self-managed certificate, requiring the apiserver's client
// certificate (controlplane.WebhookClientName, signed by the control
// plane's WebhookClientCA), and registers it with the apiserver through
// Configuration, its clientConfig pointed at the loopback URL and its
// caBundle set by cert.PatchCABundle.
func startWebhook(t *testing.T) *webhookEnv {
	t.Helper()
	cp := controlplane.Get(t)
	c := cp.Client
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	for _, ns := range []string{kerfNamespace, appNamespace} {
		require.NoError(t, client.IgnoreAlreadyExists(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})))
	}

	// The injector reads through a cache, as in the leader, and the
	// apiserver when the cache has not seen a ReplicaSet yet.
	informers, err := cache.New(cp.Config, cache.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	go func() { _ = informers.Start(ctx) }()
	require.True(t, informers.WaitForCacheSync(ctx))
	injector := NewInjector(informers, prometheus.NewRegistry(), testLogger(t))
	injector.LiveReader = c

	serving, err := cert.NewSelfManaged(ctx, c, cert.Options{
		Namespace: kerfNamespace, ServiceName: "kerf-webhook", SecretName: "kerf-webhook-serving",
		ExtraHosts: []string{"127.0.0.1"},
	}, testLogger(t))
	require.NoError(t, err)

	auth := ClientAuth{CAFile: cp.WebhookClientCA, Names: []string{controlplane.WebhookClientName}}
	tlsConfig, err := auth.ServerTLS(cert.TLSConfig(serving.GetCertificate), testLogger(t))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srvCtx, stopSrv := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ServeListener(srvCtx, ln, tlsConfig, Mux(injector)) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		stopSrv()
		assert.NoError(t, <-done, "webhook server")
	}
	t.Cleanup(stop)

	cfg := Configuration(configName, kerfNamespace, "kerf-webhook", nil)
	cfg.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{
		URL: ptr.To("https://" + ln.Addr().String() + Path),
	}
	require.NoError(t, c.Create(ctx, cfg), "the apiserver accepts the configuration")
	t.Cleanup(func() { _ = c.Delete(context.Background(), cfg) })
	require.NoError(t, cert.PatchCABundle(ctx, c, configName, serving.CABundle()))
	var got admissionregistrationv1.MutatingWebhookConfiguration
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: configName}, &got))
	require.Equal(t, serving.CABundle(), got.Webhooks[0].ClientConfig.CABundle)

	env := &webhookEnv{c: c, cache: informers, injector: injector, addr: ln.Addr().String(), stop: stop, servingCA: serving.CABundle()}
	env.waitUntilCalled(t)
	return env
}

// waitUntilCalled waits until the apiserver has loaded the configuration
// and calls the webhook: a dry-run pod of an applied workload comes back
// injected.
func (e *webhookEnv) waitUntilCalled(t *testing.T) {
	t.Helper()
	name := controlplane.UniqueName("probe")
	owner := e.workload(t, name, v1alpha1.KindDeployment)
	e.recommendation(t, name, v1alpha1.KindDeployment, v1alpha1.StrategyInPlace,
		[]v1alpha1.ContainerResources{{Name: "app", Requests: &v1alpha1.ResourceValues{CPU: q("150m")}}},
		v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseApplied})
	require.Eventually(t, func() bool {
		pod := newPod(appNamespace, owner, appContainer())
		if err := e.c.Create(context.Background(), pod, client.DryRunAll); err != nil {
			t.Logf("probe pod: %v", err)
			return false
		}
		return pod.Annotations[InjectedAnnotation] != ""
	}, 30*time.Second, 100*time.Millisecond, "the apiserver never called the webhook")
}

// workload creates a workload of kind named name and returns the owner
// reference its pods carry: for a Deployment, that of a ReplicaSet it
// controls, as the deployment controller would create it.
func (e *webhookEnv) workload(t *testing.T, name string, kind v1alpha1.WorkloadKind) metav1.OwnerReference {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{"app": name}
	selector := &metav1.LabelSelector{MatchLabels: labels}
	template := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{appContainer()}},
	}
	var obj client.Object
	switch kind {
	case v1alpha1.KindDeployment:
		obj = &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Selector: selector, Template: template}}
	case v1alpha1.KindStatefulSet:
		obj = &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Selector: selector, Template: template, ServiceName: name}}
	case v1alpha1.KindDaemonSet:
		obj = &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Selector: selector, Template: template}}
	}
	obj.SetNamespace(appNamespace)
	obj.SetName(name)
	require.NoError(t, e.c.Create(ctx, obj))
	ref := *metav1.NewControllerRef(obj, appsv1.SchemeGroupVersion.WithKind(string(kind)))
	if kind != v1alpha1.KindDeployment {
		return ref
	}
	rsLabels := map[string]string{"app": name, "pod-template-hash": "5d8f7c9b6"}
	rsTemplate := *template.DeepCopy()
	rsTemplate.Labels = rsLabels
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: name + "-5d8f7c9b6", OwnerReferences: []metav1.OwnerReference{ref}},
		Spec:       appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: rsLabels}, Template: rsTemplate},
	}
	require.NoError(t, e.c.Create(ctx, rs))
	return *metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
}

// recommendation creates a recommendation for the workload, writes its
// status as the leader would, and waits until the injector's cache sees it.
func (e *webhookEnv) recommendation(t *testing.T, workload string, kind v1alpha1.WorkloadKind, strategy v1alpha1.Strategy,
	containers []v1alpha1.ContainerResources, status v1alpha1.RightsizingRecommendationStatus) *v1alpha1.RightsizingRecommendation {
	t.Helper()
	ctx := context.Background()
	r := &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: controlplane.UniqueName(workload)},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef:  v1alpha1.TargetRef{Kind: kind, Name: workload},
			Strategy:   strategy,
			Containers: containers,
		},
	}
	require.NoError(t, e.c.Create(ctx, r))
	r.Status = status
	require.NoError(t, e.c.Status().Update(ctx, r))
	require.Eventually(t, func() bool {
		var seen v1alpha1.RightsizingRecommendation
		return e.cache.Get(ctx, client.ObjectKeyFromObject(r), &seen) == nil && seen.ResourceVersion == r.ResourceVersion
	}, 10*time.Second, 20*time.Millisecond, "the cache never saw the recommendation's status")
	return r
}

func appContainer() corev1.Container {
	return corev1.Container{
		Name:  "app",
		Image: "kerf.local/kerf-workload:dev",
		Resources: corev1.ResourceRequirements{
			Requests: rl("cpu", "100m", "memory", "64Mi"),
			Limits:   rl("memory", "128Mi"),
		},
	}
}

func newPod(ns string, owner metav1.OwnerReference, containers ...corev1.Container) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "pod-"},
		Spec:       corev1.PodSpec{Containers: containers},
	}
	if owner.Name != "" {
		pod.OwnerReferences = []metav1.OwnerReference{owner}
	}
	return pod
}

// createPod creates pod through the apiserver and reads it back.
func (e *webhookEnv) createPod(t *testing.T, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, e.c.Create(ctx, pod), "the apiserver admits the pod")
	var got corev1.Pod
	require.NoError(t, e.c.Get(ctx, client.ObjectKeyFromObject(pod), &got))
	return &got
}

func applied(containers ...v1alpha1.ContainerChange) *v1alpha1.Change {
	return &v1alpha1.Change{
		AppliedAt:        metav1.Now(),
		Strategy:         v1alpha1.StrategyInPlace,
		Containers:       containers,
		ValueFingerprint: fingerprintSeen,
	}
}

// changedBoth is an InPlace change of the CPU and memory requests of
// container app, 100m/64Mi → 300m/96Mi.
func changedBoth() *v1alpha1.Change {
	c := applied(v1alpha1.ContainerChange{
		Name:     "app",
		Previous: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("100m"), Memory: q("64Mi")}},
		Applied:  v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("300m"), Memory: q("96Mi")}},
	})
	c.Resources = []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory}
	return c
}

// TestAPIServerCallsWebhook runs the webhook against the real
// kube-apiserver: pods created through the apiserver come back with the
// applied values when, and only when, the recommendation's phase and
// strategy say new pods get them (docs/design.md sections 2 and 4); pods
// without a workload, in Kerf's namespace, or that the values would make
// invalid are left alone; and with the webhook down pods are still created.
func TestAPIServerCallsWebhook(t *testing.T) {
	e := startWebhook(t)
	appCPU := []v1alpha1.ContainerResources{{Name: "app", Requests: &v1alpha1.ResourceValues{CPU: q("250m")}}}

	type want struct {
		cpu, memory, memoryLimit string
		annotation               string // "" = not injected; else the part after "<rsr>/"
	}
	untouched := want{cpu: "100m", memory: "64Mi", memoryLimit: "128Mi"}
	for _, tc := range []struct {
		name       string
		kind       v1alpha1.WorkloadKind
		strategy   v1alpha1.Strategy
		containers []v1alpha1.ContainerResources
		status     v1alpha1.RightsizingRecommendationStatus
		want       want
		result     string // counted for the pod: proves the apiserver asked
	}{
		{
			name: "Applied InPlace gets the values the leader applied", kind: v1alpha1.KindDeployment, strategy: v1alpha1.StrategyInPlace,
			containers: appCPU,
			status: v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseApplied, Change: applied(v1alpha1.ContainerChange{
				Name:     "app",
				Previous: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("100m"), Memory: q("64Mi")}},
				Applied:  v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("300m"), Memory: q("96Mi")}},
			})},
			want:   want{cpu: "300m", memory: "96Mi", memoryLimit: "128Mi", annotation: fingerprintSeen},
			result: ResultInjected,
		},
		{
			name: "Deferred Watching gets the spec's values", kind: v1alpha1.KindStatefulSet, strategy: v1alpha1.StrategyDeferred,
			containers: []v1alpha1.ContainerResources{{Name: "app",
				Requests: &v1alpha1.ResourceValues{Memory: q("100Mi")}, Limits: &v1alpha1.ResourceValues{Memory: q("200Mi")}}},
			status: v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseWatching},
			want:   want{cpu: "100m", memory: "100Mi", memoryLimit: "200Mi", annotation: "generation-1"},
			result: ResultInjected,
		},
		{
			name: "Healthy InPlace DaemonSet", kind: v1alpha1.KindDaemonSet, strategy: v1alpha1.StrategyInPlace,
			containers: appCPU,
			status:     v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseHealthy},
			want:       want{cpu: "250m", memory: "64Mi", memoryLimit: "128Mi", annotation: "generation-1"},
			result:     ResultInjected,
		},
		{
			name: "RolledBack is never injected", kind: v1alpha1.KindDeployment, strategy: v1alpha1.StrategyInPlace,
			containers: appCPU,
			status: v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseRolledBack, Change: applied(v1alpha1.ContainerChange{
				Name: "app", Applied: v1alpha1.Resources{Requests: &v1alpha1.ResourceValues{CPU: q("300m")}},
			})},
			want:   untouched,
			result: ResultInactive,
		},
		{
			// Item 7 of issue 12: before, nothing was injected once
			// RolledBack, so new pods fell back to the manifest's CPU.
			name: "after a memory-only rollback new pods get the CPU that stays applied", kind: v1alpha1.KindDeployment, strategy: v1alpha1.StrategyInPlace,
			containers: appCPU,
			status: v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseRolledBack, Reason: v1alpha1.HealthWatchOOMKills,
				Change: changedBoth(),
				Breach: &v1alpha1.Breach{Reason: v1alpha1.HealthWatchOOMKills, At: metav1.Now(), Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, Restored: true}},
			want:   want{cpu: "300m", memory: "64Mi", memoryLimit: "128Mi", annotation: fingerprintSeen},
			result: ResultInjected,
		},
		{
			name: "after a memory-only rollback that marked the workload Degraded new pods still get the CPU", kind: v1alpha1.KindDeployment, strategy: v1alpha1.StrategyInPlace,
			containers: appCPU,
			status: v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseDegraded, Reason: v1alpha1.ReasonDegraded,
				Change: changedBoth(),
				Breach: &v1alpha1.Breach{Reason: v1alpha1.HealthWatchOOMKills, At: metav1.Now(), Resources: []v1alpha1.ResourceName{v1alpha1.ResourceMemory}, Restored: true}},
			want:   want{cpu: "300m", memory: "64Mi", memoryLimit: "128Mi", annotation: fingerprintSeen},
			result: ResultInjected,
		},
		{
			name: "after a rollback of every resource nothing is injected", kind: v1alpha1.KindDeployment, strategy: v1alpha1.StrategyInPlace,
			containers: appCPU,
			status: v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseRolledBack, Reason: v1alpha1.HealthWatchRestarts,
				Change: changedBoth(),
				Breach: &v1alpha1.Breach{Reason: v1alpha1.HealthWatchRestarts, At: metav1.Now(), Resources: []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory}}},
			want:   untouched,
			result: ResultInactive,
		},
		{
			name: "Rollout strategy is not injected", kind: v1alpha1.KindDeployment, strategy: v1alpha1.StrategyRollout,
			containers: appCPU,
			status:     v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseApplied},
			want:       untouched,
			result:     ResultInactive,
		},
		{
			name: "Pending is not injected", kind: v1alpha1.KindDeployment, strategy: v1alpha1.StrategyInPlace,
			containers: appCPU,
			status:     v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhasePending},
			want:       untouched,
			result:     ResultInactive,
		},
		{
			name: "Blocked is not injected", kind: v1alpha1.KindDeployment, strategy: v1alpha1.StrategyDeferred,
			containers: appCPU,
			status:     v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseBlocked, Reason: v1alpha1.ReasonFreezeWindow},
			want:       untouched,
			result:     ResultInactive,
		},
		{
			name: "Failed is not injected", kind: v1alpha1.KindStatefulSet, strategy: v1alpha1.StrategyInPlace,
			containers: appCPU,
			status:     v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseFailed},
			want:       untouched,
			result:     ResultInactive,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := controlplane.UniqueName("web")
			owner := e.workload(t, name, tc.kind)
			r := e.recommendation(t, name, tc.kind, tc.strategy, tc.containers, tc.status)
			pod := newPod(appNamespace, owner, appContainer())
			pod.Annotations = map[string]string{"team": "shop"}
			before := counterValue(t, e.injector.injections.WithLabelValues(tc.result))
			got := e.createPod(t, pod)
			assert.Equal(t, before+1, counterValue(t, e.injector.injections.WithLabelValues(tc.result)), "result %s", tc.result)

			res := got.Spec.Containers[0].Resources
			assert.Equal(t, tc.want.cpu, ptr.To(res.Requests[corev1.ResourceCPU]).String(), "cpu request")
			assert.Equal(t, tc.want.memory, ptr.To(res.Requests[corev1.ResourceMemory]).String(), "memory request")
			assert.Equal(t, tc.want.memoryLimit, ptr.To(res.Limits[corev1.ResourceMemory]).String(), "memory limit")
			_, hasCPULimit := res.Limits[corev1.ResourceCPU]
			assert.False(t, hasCPULimit, "no cpu limit appears")
			assert.Equal(t, "shop", got.Annotations["team"], "the pod's annotations stay")
			if tc.want.annotation == "" {
				assert.NotContains(t, got.Annotations, InjectedAnnotation)
			} else {
				assert.Equal(t, r.Name+"/"+tc.want.annotation, got.Annotations[InjectedAnnotation])
			}
		})
	}

	t.Run("pod without an owner is untouched", func(t *testing.T) {
		got := e.createPod(t, newPod(appNamespace, metav1.OwnerReference{}, appContainer()))
		assert.Equal(t, "100m", ptr.To(got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]).String())
		assert.NotContains(t, got.Annotations, InjectedAnnotation)
	})

	t.Run("workload without a recommendation is untouched", func(t *testing.T) {
		before := counterValue(t, e.injector.injections.WithLabelValues(ResultNoRecommendation))
		got := e.createPod(t, newPod(appNamespace, e.workload(t, controlplane.UniqueName("bare"), v1alpha1.KindDeployment), appContainer()))
		assert.Equal(t, "100m", ptr.To(got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]).String())
		assert.NotContains(t, got.Annotations, InjectedAnnotation)
		assert.Equal(t, before+1, counterValue(t, e.injector.injections.WithLabelValues(ResultNoRecommendation)), "the apiserver called the webhook")
	})

	t.Run("limit below the new request skips the container", func(t *testing.T) {
		name := controlplane.UniqueName("guard")
		owner := e.workload(t, name, v1alpha1.KindDeployment)
		r := e.recommendation(t, name, v1alpha1.KindDeployment, v1alpha1.StrategyInPlace,
			[]v1alpha1.ContainerResources{
				{Name: "app", Requests: &v1alpha1.ResourceValues{Memory: q("256Mi")}}, // above app's 128Mi limit
				{Name: "sidecar", Requests: &v1alpha1.ResourceValues{CPU: q("50m")}},
			},
			v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseWatching})
		skippedBefore := counterValue(t, e.injector.skipped.WithLabelValues(SkipLimitBelowRequest))
		sidecar := corev1.Container{Name: "sidecar", Image: "kerf.local/kerf-workload:dev",
			Resources: corev1.ResourceRequirements{Requests: rl("cpu", "10m")}}
		got := e.createPod(t, newPod(appNamespace, owner, appContainer(), sidecar))

		app := got.Spec.Containers[0].Resources
		assert.Equal(t, "64Mi", ptr.To(app.Requests[corev1.ResourceMemory]).String(), "app is left as it was")
		assert.Equal(t, "128Mi", ptr.To(app.Limits[corev1.ResourceMemory]).String())
		assert.Equal(t, "50m", ptr.To(got.Spec.Containers[1].Resources.Requests[corev1.ResourceCPU]).String(), "the sidecar is injected")
		assert.Equal(t, r.Name+"/generation-1", got.Annotations[InjectedAnnotation])
		assert.Equal(t, skippedBefore+1, counterValue(t, e.injector.skipped.WithLabelValues(SkipLimitBelowRequest)))

		// With only the invalid container, the pod is left whole.
		guardedBefore := counterValue(t, e.injector.injections.WithLabelValues(ResultGuarded))
		got = e.createPod(t, newPod(appNamespace, owner, appContainer()))
		assert.Equal(t, "64Mi", ptr.To(got.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory]).String())
		assert.NotContains(t, got.Annotations, InjectedAnnotation)
		assert.Equal(t, guardedBefore+1, counterValue(t, e.injector.injections.WithLabelValues(ResultGuarded)))
	})

	t.Run("Kerf's own namespace is left alone", func(t *testing.T) {
		// The same owner reference, in kerf-system: the namespaceSelector
		// keeps the apiserver from calling the webhook at all.
		owner := e.workload(t, controlplane.UniqueName("self"), v1alpha1.KindDaemonSet)
		calls := func() float64 {
			var n float64
			for _, r := range []string{ResultInjected, ResultUnchanged, ResultGuarded, ResultNoWorkload, ResultNoRecommendation, ResultInactive, ResultIgnored, ResultNotSynced, ResultError} {
				n += counterValue(t, e.injector.injections.WithLabelValues(r))
			}
			return n
		}
		before := calls()
		got := e.createPod(t, newPod(kerfNamespace, owner, appContainer()))
		assert.NotContains(t, got.Annotations, InjectedAnnotation)
		assert.Equal(t, before, calls(), "the webhook was not called")
	})

	// Last: it stops the server.
	t.Run("webhook down: pods are still created (fail open)", func(t *testing.T) {
		name := controlplane.UniqueName("down")
		owner := e.workload(t, name, v1alpha1.KindDeployment)
		e.recommendation(t, name, v1alpha1.KindDeployment, v1alpha1.StrategyInPlace, appCPU,
			v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseApplied})
		e.stop()
		_, err := net.DialTimeout("tcp", e.addr, time.Second)
		require.Error(t, err, "the webhook server is down")
		got := e.createPod(t, newPod(appNamespace, owner, appContainer()))
		assert.Equal(t, "100m", ptr.To(got.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU]).String())
		assert.NotContains(t, got.Annotations, InjectedAnnotation)
	})

	assert.Zero(t, counterValue(t, e.injector.errors), "no internal errors")
}

// TestConfigurationFailsOpen pins the properties of the shipped
// configuration that keep the cluster safe when the webhook is down.
func TestConfigurationFailsOpen(t *testing.T) {
	cfg := Configuration("kerf", "kerf-system", "kerf-webhook", []byte("ca"))
	require.Len(t, cfg.Webhooks, 1)
	w := cfg.Webhooks[0]
	assert.Equal(t, admissionregistrationv1.Ignore, *w.FailurePolicy)
	assert.Equal(t, int32(5), *w.TimeoutSeconds)
	assert.Equal(t, admissionregistrationv1.SideEffectClassNone, *w.SideEffects)
	assert.Equal(t, admissionregistrationv1.NeverReinvocationPolicy, *w.ReinvocationPolicy)
	assert.Equal(t, []string{"v1"}, w.AdmissionReviewVersions)
	assert.Equal(t, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, w.Rules[0].Operations)
	assert.Equal(t, []string{"pods"}, w.Rules[0].Resources)
	assert.Equal(t, Path, *w.ClientConfig.Service.Path)
	assert.Equal(t, []byte("ca"), w.ClientConfig.CABundle)
	assert.Contains(t, w.NamespaceSelector.MatchExpressions, metav1.LabelSelectorRequirement{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kube-system", "kerf-system"}})
}
