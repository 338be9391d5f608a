package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/release"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/images"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/internal/sandbox"
	"github.com/kerf-dev/kerf/internal/scenario"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// The Helm release of the test: its records (Secrets
// sh.helm.release.v1.kerf.vN) are in helmNamespace; the chart's objects
// go to kerf-system, which the chart creates.
const (
	helmRelease   = "kerf"
	helmNamespace = "default"
)

var (
	bareOnce    sync.Once
	bareCluster *sandbox.Cluster
	bareImages  map[string]string // image name → tag, as imported
)

// bare returns the sandbox with Kerf's images imported and Kerf not
// installed: the state before scenario.Install applies manifests/. Only a
// test that runs before every other one may use it (TestHelm, not
// parallel: the others are, so they wait for it), and it must leave the
// cluster without Kerf.
func bare(t *testing.T) *sandbox.Cluster {
	t.Helper()
	prepareOnce.Do(prepare)
	if skipWhy == "" && setupErr == nil {
		bareOnce.Do(func() { bareCluster, bareImages, setupErr = upBare() })
	}
	switch {
	case skipWhy != "" && controlplane.Required():
		t.Fatal(skipWhy)
	case skipWhy != "":
		t.Skip(skipWhy)
	case setupErr != nil:
		t.Fatalf("bringing the sandbox up: %v", setupErr)
	case installed != nil:
		t.Fatal("Kerf from manifests/ is installed already: the Helm test must run first")
	}
	return bareCluster
}

// upBare is what scenario.Install does before it installs Kerf: build the
// images, bring the sandbox up, import them. scenario.Install, later,
// finds the images built (their stamps) and the sandbox running (reused).
func upBare() (*sandbox.Cluster, map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	log := warnLog()
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	say("building images from this checkout")
	archives, err := images.Build(ctx, images.Options{RepoRoot: repoRoot, OutDir: filepath.Join(repoRoot, "bin", "images"), Log: log})
	if err != nil {
		return nil, nil, fmt.Errorf("build images: %w", err)
	}
	var pause string
	for _, a := range archives {
		if a.Ref == sandbox.PauseImageRef {
			pause = a.Path
		}
	}
	tags := map[string]string{}
	var others []string
	for _, a := range archives {
		if a.Ref == sandbox.PauseImageRef {
			continue
		}
		others = append(others, a.Path)
		i := strings.LastIndex(a.Ref, ":")
		tags[a.Ref[:i]] = a.Ref[i+1:]
	}
	say("bringing up the cluster in %s (VM node: %v)", stateDir, withVMNode)
	c, err := sandbox.Up(ctx, sandbox.Options{StateDir: stateDir, PauseImage: pause, Log: log, VMNode: withVMNode, Images: others})
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox up (logs in %s/logs): %w", stateDir, err)
	}
	return c, tags, nil
}

// nodes are the sandbox's nodes: the host's, and the VM node if it has one.
func nodes(c *sandbox.Cluster) []string {
	if c.VMNode != "" {
		return []string{c.NodeName, c.VMNode}
	}
	return []string{c.NodeName}
}

// helmValues are the install's values: the images imported into the
// sandbox's containerd, never pulled (pullPolicy Never: a missing image
// fails the pod, rather than a pull from a registry that has none), and
// the hub on: SQLite on an emptyDir (the sandbox has no storage
// provisioner) with the chart's self-signed certificate.
func helmValues(t *testing.T) map[string]any {
	t.Helper()
	img := func(repo string) map[string]any {
		tag, ok := bareImages[repo]
		require.True(t, ok, "image %s was not built (%v)", repo, bareImages)
		return map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"}
	}
	return map[string]any{
		"agent":  map[string]any{"image": img("kerf.local/kerf-agent")},
		"leader": map[string]any{"image": img("kerf.local/kerf-leader")},
		"hub": map[string]any{"enabled": true, "image": img("kerf.local/kerf-hub"),
			"tls": map[string]any{"selfSigned": true}, "storage": map[string]any{"type": "EmptyDir", "size": "1Gi"}},
	}
}

// helmConfig is what `helm --kubeconfig <sandbox> --namespace default`
// works with: Helm's own kube client, the release records in Secrets.
func helmConfig(t *testing.T, c *sandbox.Cluster) *action.Configuration {
	t.Helper()
	settings := cli.New()
	settings.KubeConfig = c.Kubeconfig
	settings.SetNamespace(helmNamespace)
	cfg := new(action.Configuration)
	require.NoError(t, cfg.Init(settings.RESTClientGetter(), helmNamespace, "secret", t.Logf), "helm's kube client for the sandbox")
	return cfg
}

// manifestObjects parses a release's manifest (what Helm applied) into
// objects.
func manifestObjects(t *testing.T, rel *release.Release) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(rel.Manifest), 4096)
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "parse the manifest of release %s v%d", rel.Name, rel.Version)
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	require.NotEmpty(t, objs, "release %s v%d has no objects", rel.Name, rel.Version)
	return objs
}

// crdObjects are the chart's crds/, which Helm creates before the
// templates on the first install.
func crdObjects(t *testing.T, chrt *chart.Chart) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, f := range chrt.CRDObjects() {
		m := map[string]any{}
		require.NoError(t, utilyaml.Unmarshal(f.File.Data, &m), "parse %s", f.Filename)
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	require.Len(t, objs, 6, "charts/kerf/crds: the four policy kinds, the recommendations and the checkpoints")
	return objs
}

func objKey(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
}

// liveObject reads o's counterpart in the cluster; found is false when it
// is gone.
func liveObject(ctx context.Context, c client.Client, o *unstructured.Unstructured) (u *unstructured.Unstructured, found bool, err error) {
	u = &unstructured.Unstructured{}
	u.SetGroupVersionKind(o.GroupVersionKind())
	err = c.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, u)
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("get %s: %w", objKey(o), err)
	}
	return u, true, nil
}

// snapshot is every object's live content but what the cluster changes by
// itself (resourceVersion, managedFields, generation, status), by key.
func snapshot(ctx context.Context, t *testing.T, c client.Client, objs []*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	out := make(map[string]map[string]any, len(objs))
	for _, o := range objs {
		u, found, err := liveObject(ctx, c, o)
		require.NoError(t, err)
		require.True(t, found, "%s is not in the cluster", objKey(o))
		m := u.DeepCopy().Object
		unstructured.RemoveNestedField(m, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(m, "metadata", "managedFields")
		unstructured.RemoveNestedField(m, "metadata", "generation")
		delete(m, "status")
		out[objKey(o)] = m
	}
	return out
}

// kerfPodUIDs are the UIDs of the running leader, agent and hub pods,
// sorted.
func kerfPodUIDs(ctx context.Context, t *testing.T, e *scenario.Env) []string {
	t.Helper()
	var uids []string
	hubs, err := hubPods(ctx, e.Client)
	require.NoError(t, err)
	for _, p := range hubs {
		uids = append(uids, p.Name+"="+string(p.UID))
	}
	for _, component := range []string{"kerf-leader", "kerf-agent"} {
		pods, err := e.KerfPods(ctx, component)
		require.NoError(t, err)
		for _, p := range pods {
			uids = append(uids, p.Name+"="+string(p.UID))
		}
	}
	slices.Sort(uids)
	return uids
}

// TestHelmInstallUpgradeUninstall installs charts/kerf with Helm's Go
// library (helm.sh/helm/v3 from the module proxy, the code of `helm
// install`) into the sandbox, a real kubelet and containerd running the
// images this checkout built, the hub on. Kerf works (both leader
// replicas and the agent Ready, the Lease held, the agent streaming to the
// leader, a recommendation applied under the chart's default policy), and
// the hub is Ready and answers /healthz over TLS with the chart's
// certificate. An upgrade that changes one guardrail of the default
// policy changes that field and nothing else (no pod restarted, the hub's
// certificate kept). The uninstall leaves none of the release's objects,
// no kerf-system, no kerf-hub and no release record. The CRDs stay: Helm
// never deletes crds/ (nor upgrades them), so that an uninstall cannot
// take every RightsizingRecommendation and policy with it
// (docs/install.md, "Helm").
//
// It is not parallel, so it runs before every other test of the package
// (they are, and wait), on the sandbox without Kerf; the cluster it
// leaves is the one scenario.Install expects, which then installs Kerf
// from manifests/ on the same sandbox for the others.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	sb := bare(t)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	began := time.Now()
	chrt, err := loader.Load(filepath.Join(repoRoot, "charts", "kerf"))
	require.NoError(t, err, "load charts/kerf")
	cfg := helmConfig(t, sb)
	crds := crdObjects(t, chrt)

	admin, err := client.New(sb.Config, client.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	var ns corev1.Namespace
	err = admin.Get(ctx, client.ObjectKey{Name: scenario.KerfNamespace}, &ns)
	require.True(t, apierrors.IsNotFound(err), "%s exists before the install (err %v): the sandbox is not bare", scenario.KerfNamespace, err)

	// Whatever happens, leave no release behind: the tests after this one
	// install Kerf from manifests/ on this sandbox.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		t.Logf("pods in kerf-system:\n%s", describePods(ctx, admin))
		t.Logf("their logs:\n%s", kerfLogs(ctx, sb))
		un := action.NewUninstall(cfg)
		un.Wait, un.Timeout = true, 2*time.Minute
		if _, err := un.Run(helmRelease); err != nil {
			t.Logf("cleanup: helm uninstall: %v", err)
		}
		for _, ns := range []string{scenario.KerfNamespace, scenario.HubNamespace} {
			_ = scenario.Poll(ctx, 2*time.Minute, time.Second, ns+" gone", func(ctx context.Context) (bool, error) {
				err := admin.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
				return apierrors.IsNotFound(err), nil
			})
		}
	})

	// helm install kerf charts/kerf --namespace default --wait --set ...image...
	inst := action.NewInstall(cfg)
	inst.ReleaseName = helmRelease
	inst.Namespace = helmNamespace
	inst.Wait = true
	inst.Timeout = 2 * time.Minute
	rel, err := inst.Run(chrt, helmValues(t))
	require.NoError(t, err, "helm install")
	require.Equal(t, release.StatusDeployed, rel.Info.Status)
	t.Logf("helm install: deployed in %.1f s", time.Since(began).Seconds())
	installedObjs := manifestObjects(t, rel)

	// A client made after the install: its REST mapper knows the CRDs.
	c, err := client.New(sb.Config, client.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	e := &scenario.Env{Client: c, Out: testWriter{t}}
	for _, o := range append(slices.Clone(crds), installedObjs...) {
		_, found, err := liveObject(ctx, c, o)
		require.NoError(t, err)
		require.True(t, found, "after helm install: %s missing", objKey(o))
	}

	// Kerf runs: both leader replicas Ready, one of them elected and
	// holding the Lease, the agent Ready and streaming to it.
	var leader *corev1.Pod
	require.NoError(t, scenario.Poll(ctx, 2*time.Minute, 250*time.Millisecond, "two ready kerf-leader pods, one elected, a ready kerf-agent streaming to it", func(ctx context.Context) (bool, error) {
		leaders, err := e.KerfPods(ctx, "kerf-leader")
		if err != nil || len(leaders) != 2 || slices.ContainsFunc(leaders, notReady) {
			return false, err
		}
		agents, err := e.KerfPods(ctx, "kerf-agent")
		if err != nil || len(agents) != len(nodes(sb)) || slices.ContainsFunc(agents, notReady) {
			return false, err
		}
		if leader, err = e.LeaderPod(ctx); err != nil {
			return false, nil
		}
		for _, node := range nodes(sb) {
			m, err := e.AgentMetricsOn(ctx, node)
			if err != nil || scenario.Sum(m, "kerf_agent_stream_state", map[string]string{"state": "connected"}) != 1 {
				return false, nil
			}
		}
		return true, nil
	}), "pods:\n%s", describePods(ctx, c))
	var lease coordinationv1.Lease
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: scenario.KerfNamespace, Name: "kerf-leader"}, &lease))
	require.NotNil(t, lease.Spec.HolderIdentity, "Lease kerf-leader has no holder")
	assert.Equal(t, leader.Name, *lease.Spec.HolderIdentity, "the pod labelled leader holds the Lease")
	t.Logf("Kerf runs: %s holds the Lease (%.1f s after the install began)", leader.Name, time.Since(began).Seconds())

	// The hub (hub.enabled): Ready, and its probe answers over TLS with
	// the certificate the chart made.
	var hubTLS corev1.Secret
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: scenario.HubNamespace, Name: "kerf-hub-tls"}, &hubTLS), "hub.tls.selfSigned")
	require.NoError(t, scenario.Poll(ctx, time.Minute, 250*time.Millisecond, "a ready kerf-hub answering /healthz", func(ctx context.Context) (bool, error) {
		return hubAnswers(ctx, c, hubTLS.Data["tls.crt"])
	}))
	t.Logf("kerf-hub answers (%.1f s after the install began)", time.Since(began).Seconds())

	// The leader fills the webhook's caBundle in; the upgrade must keep it.
	hook := &unstructured.Unstructured{}
	hook.SetAPIVersion("admissionregistration.k8s.io/v1")
	hook.SetKind("MutatingWebhookConfiguration")
	hook.SetName("kerf")
	require.NoError(t, scenario.Poll(ctx, time.Minute, 250*time.Millisecond, "the leader's caBundle in MutatingWebhookConfiguration kerf", func(ctx context.Context) (bool, error) {
		return caBundle(ctx, c, hook) != "", nil
	}))

	// A recommendation is applied, governed by the chart's default policy
	// (no other policy in the namespace).
	wns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-helm-"}}
	require.NoError(t, c.Create(ctx, wns))
	e.Namespace = wns.Name
	w := scenario.Workload{Name: "helm-demo", CPURequest: "50m", CPULimit: "500m", MemoryRequest: "64Mi", MemoryLimit: "256Mi"}
	_, err = e.Deploy(ctx, w)
	require.NoError(t, err)
	_, err = e.Recommend(ctx, w, v1alpha1.StrategyInPlace, v1alpha1.ContainerResources{
		Requests: &v1alpha1.ResourceValues{Memory: resourceQuantity("48Mi")},
		Limits:   &v1alpha1.ResourceValues{Memory: resourceQuantity("96Mi")},
	}, nil)
	require.NoError(t, err)
	rsr, _, err := e.WaitPhase(ctx, w.Name, v1alpha1.PhaseWatching, "", time.Minute)
	require.NoError(t, err, "the recommendation applied")
	require.NotNil(t, rsr.Status.Policy)
	assert.Equal(t, v1alpha1.PolicyKindCluster, rsr.Status.Policy.Kind)
	assert.Equal(t, "default", rsr.Status.Policy.Name, "the chart's default policy governs")
	require.Len(t, scenario.History(rsr, v1alpha1.ActionApplied), 1)
	_, err = e.WaitKernelLimits(ctx, w.Selector(), scenario.Container, 96*scenario.Mi, 0, time.Minute)
	require.NoError(t, err, "the kernel enforces the applied memory limit")
	t.Logf("recommendation %s/%s applied in place (%.1f s after the install began)", e.Namespace, w.Name, time.Since(began).Seconds())

	// helm upgrade kerf charts/kerf --reuse-values --wait
	//   --set defaultPolicy.guardrails.rollback.oomKills=2
	before := snapshot(ctx, t, c, append(slices.Clone(crds), installedObjs...))
	podsBefore := kerfPodUIDs(ctx, t, e)
	bundle := caBundle(ctx, c, hook)
	up := action.NewUpgrade(cfg)
	up.Namespace = helmNamespace
	up.ReuseValues = true
	up.Wait = true
	up.Timeout = 2 * time.Minute
	rel, err = up.Run(helmRelease, chrt, map[string]any{
		"defaultPolicy": map[string]any{"guardrails": map[string]any{"rollback": map[string]any{"oomKills": 2}}},
	})
	require.NoError(t, err, "helm upgrade")
	assert.Equal(t, 2, rel.Version)
	require.Equal(t, release.StatusDeployed, rel.Info.Status)
	upgradedObjs := manifestObjects(t, rel)
	assert.ElementsMatch(t, keys(installedObjs), keys(upgradedObjs), "the upgrade renders the same objects")
	after := snapshot(ctx, t, c, append(slices.Clone(crds), upgradedObjs...))
	policyKey := "ClusterRightsizingPolicy /default"
	for k, was := range before {
		if k == policyKey {
			continue
		}
		assert.True(t, reflect.DeepEqual(was, after[k]), "the upgrade changed %s", k)
	}
	oomKills := func(m map[string]any) any {
		v, _, _ := unstructured.NestedFieldNoCopy(m, "spec", "guardrails", "rollback", "oomKills")
		return v
	}
	require.Contains(t, before, policyKey)
	assert.EqualValues(t, 1, oomKills(before[policyKey]), "oomKills before the upgrade")
	assert.EqualValues(t, 2, oomKills(after[policyKey]), "oomKills after the upgrade")
	// And that field only.
	wasPolicy, nowPolicy := before[policyKey], after[policyKey]
	require.NoError(t, unstructured.SetNestedField(wasPolicy, int64(2), "spec", "guardrails", "rollback", "oomKills"))
	assert.True(t, reflect.DeepEqual(wasPolicy, nowPolicy), "the upgrade changed the default policy beyond oomKills:\nbefore %v\nafter  %v", wasPolicy, nowPolicy)
	assert.Equal(t, podsBefore, kerfPodUIDs(ctx, t, e), "the upgrade restarted a leader, agent or hub pod")
	assert.Equal(t, bundle, caBundle(ctx, c, hook), "the upgrade dropped the caBundle the leader wrote")
	t.Logf("helm upgrade: revision 2 changed the default policy's oomKills only (%.1f s after the install began)", time.Since(began).Seconds())

	// Before the uninstall, remove what this test made that is not the
	// release's: the workload's namespace (its recommendation with it,
	// while the CRD is there) and the reader's bindings scenario.Env made
	// for /metrics (its ServiceAccount is in kerf-system).
	require.NoError(t, c.Delete(ctx, wns))
	for _, role := range []string{"kerf-metrics-reader", "kerf-audit-reader"} {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: scenario.ReaderServiceAccount + "-" + role}}
		require.NoError(t, client.IgnoreNotFound(c.Delete(ctx, crb)))
	}
	require.NoError(t, scenario.Poll(ctx, time.Minute, 250*time.Millisecond, "namespace "+wns.Name+" gone", func(ctx context.Context) (bool, error) {
		err := c.Get(ctx, client.ObjectKey{Name: wns.Name}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
	}))

	// helm uninstall kerf --wait
	un := action.NewUninstall(cfg)
	un.Wait = true
	un.Timeout = 2 * time.Minute
	_, err = un.Run(helmRelease)
	require.NoError(t, err, "helm uninstall")
	for _, ns := range []string{scenario.KerfNamespace, scenario.HubNamespace} {
		require.NoError(t, scenario.Poll(ctx, 2*time.Minute, 250*time.Millisecond, "namespace "+ns+" gone", func(ctx context.Context) (bool, error) {
			err := c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{})
			return apierrors.IsNotFound(err), client.IgnoreNotFound(err)
		}), "pods in kerf-system:\n%s", describePods(ctx, c))
	}
	var left []string
	for _, o := range upgradedObjs {
		_, found, err := liveObject(ctx, c, o)
		require.NoError(t, err)
		if found {
			left = append(left, objKey(o))
		}
	}
	assert.Empty(t, left, "objects of the release left after helm uninstall")
	// Nothing else of the release anywhere: every kind it renders, listed
	// by the instance label the chart puts on each object.
	kinds := map[string]*unstructured.Unstructured{}
	for _, o := range upgradedObjs {
		kinds[o.GetAPIVersion()+" "+o.GetKind()] = o
	}
	for k, o := range kinds {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(o.GetAPIVersion())
		list.SetKind(o.GetKind() + "List")
		require.NoError(t, c.List(ctx, list, client.MatchingLabels{"app.kubernetes.io/instance": helmRelease}), "list %s", k)
		for _, item := range list.Items {
			left = append(left, objKey(&item))
		}
	}
	assert.Empty(t, left, "objects labelled app.kubernetes.io/instance=%s left after helm uninstall", helmRelease)
	// Nor a release record.
	var secrets corev1.SecretList
	require.NoError(t, c.List(ctx, &secrets, client.InNamespace(helmNamespace), client.MatchingLabels{"owner": "helm", "name": helmRelease}))
	assert.Empty(t, secrets.Items, "release records left after helm uninstall")
	// The CRDs stay, by Helm's policy for crds/.
	for _, o := range crds {
		_, found, err := liveObject(ctx, c, o)
		require.NoError(t, err)
		assert.True(t, found, "Helm keeps the CRDs of crds/: %s", objKey(o))
	}
	t.Logf("helm uninstall: nothing of the release left, the %d CRDs kept (%.1f s in all)", len(crds), time.Since(began).Seconds())
}

// hubPods are the chart's kerf-hub pods.
func hubPods(ctx context.Context, c client.Client) ([]corev1.Pod, error) {
	var pods corev1.PodList
	err := c.List(ctx, &pods, client.InNamespace(scenario.HubNamespace), client.MatchingLabels{"app.kubernetes.io/component": "hub"})
	return pods.Items, err
}

// hubAnswers is whether the one hub pod is Ready and answers GET /healthz
// over TLS with the certificate in caPEM, for the Service's name.
func hubAnswers(ctx context.Context, c client.Client, caPEM []byte) (bool, error) {
	pods, err := hubPods(ctx, c)
	if err != nil || len(pods) != 1 || !ready(pods[0]) || pods[0].Status.PodIP == "" {
		return false, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return false, errors.New("no PEM certificate in kerf-hub-tls's tls.crt")
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, ServerName: "kerf-hub.kerf-hub.svc", MinVersion: tls.VersionTLS12}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+net.JoinHostPort(pods[0].Status.PodIP, "9443")+"/healthz", nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, nil
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

func ready(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func notReady(p corev1.Pod) bool { return !ready(p) }

// caBundle is the caBundle of the webhook's one entry ("" when unset).
func caBundle(ctx context.Context, c client.Client, hook *unstructured.Unstructured) string {
	u := hook.DeepCopy()
	if err := c.Get(ctx, client.ObjectKeyFromObject(hook), u); err != nil {
		return ""
	}
	webhooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
	if len(webhooks) != 1 {
		return ""
	}
	m, ok := webhooks[0].(map[string]any)
	if !ok {
		return ""
	}
	b, _, _ := unstructured.NestedString(m, "clientConfig", "caBundle")
	return b
}

func keys(objs []*unstructured.Unstructured) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = objKey(o)
	}
	return out
}

// kerfLogs is the last lines of every container's log in kerf-system,
// for failure messages.
func kerfLogs(ctx context.Context, sb *sandbox.Cluster) string {
	pods, err := sb.Clientset.CoreV1().Pods(scenario.KerfNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		for _, ctr := range p.Spec.Containers {
			raw, err := sb.Clientset.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name, TailLines: ptr.To[int64](40)}).DoRaw(ctx)
			if err != nil {
				raw = []byte(err.Error())
			}
			fmt.Fprintf(&b, "--- %s/%s\n%s\n", p.Name, ctr.Name, raw)
		}
	}
	return b.String()
}

// describePods lists the pods in kerf-system with their phase and
// readiness, for failure messages.
func describePods(ctx context.Context, c client.Client) string {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(scenario.KerfNamespace)); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "  %s %s ready=%t deleting=%t\n", p.Name, p.Status.Phase, ready(p), p.DeletionTimestamp != nil)
		for _, s := range p.Status.ContainerStatuses {
			if s.State.Waiting != nil {
				fmt.Fprintf(&b, "    %s waiting: %s %s\n", s.Name, s.State.Waiting.Reason, s.State.Waiting.Message)
			}
		}
	}
	return b.String()
}
