package helm_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/cli"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// releaseNamespace holds the release's records (Secrets
// sh.helm.release.v1.kerf.vN); the chart's objects go to kerf-system,
// which the chart itself creates.
const releaseNamespace = "default"

// helmConfig is what `helm --kubeconfig K --namespace default` works with:
// the release records in Secrets, Helm's own kube client.
func helmConfig(t *testing.T, cp *controlplane.ControlPlane) *action.Configuration {
	t.Helper()
	settings := cli.New()
	settings.KubeConfig = cp.Kubeconfig
	settings.SetNamespace(releaseNamespace)
	cfg := new(action.Configuration)
	require.NoError(t, cfg.Init(settings.RESTClientGetter(), releaseNamespace, "secret", t.Logf))
	return cfg
}

// live fetches o's counterpart from the apiserver; found is false when it
// is gone.
func live(ctx context.Context, t *testing.T, c client.Client, o *unstructured.Unstructured) (*unstructured.Unstructured, bool) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(o.GroupVersionKind())
	err := c.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: o.GetName()}, u)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	require.NoError(t, err, "get %s", key(o))
	return u, true
}

// TestInstallUpgradeUninstall installs the chart with Helm into a real
// kube-apiserver with no Kerf CRDs (Helm installs them from crds/),
// finds every object it renders there, upgrades leader.replicas and the
// hub (its Deployment, and the leader's forwarding), keeping the caBundle
// the leader wrote and the hub's self-signed certificate, and uninstalls: no object
// of the chart is left but the CRDs, which Helm never deletes. The control
// plane has no kubelet and no controllers: the pods never run, and the
// deleted Namespace stays Terminating (its finalizer is the namespace
// controller's), which is what a deletion is without one.
func TestInstallUpgradeUninstall(t *testing.T) {
	cp := controlplane.StartForTest(t, func(o *controlplane.Options) { o.CRDDirs = []string{} })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	chrt := loadChart(t)
	cfg := helmConfig(t, cp)
	objs := renderChart(t, nil)

	inst := action.NewInstall(cfg)
	inst.ReleaseName = "kerf"
	inst.Namespace = releaseNamespace
	inst.Timeout = 2 * time.Minute
	rel, err := inst.Run(chrt, nil)
	require.NoError(t, err, "helm install")
	assert.Equal(t, "deployed", rel.Info.Status.String())
	assert.Contains(t, rel.Info.Notes, "Helm does not upgrade or delete CRDs", "NOTES.txt")

	// A client made now, so that its REST mapper knows the CRDs Helm made.
	c, err := client.New(cp.Config, client.Options{Scheme: kube.Scheme})
	require.NoError(t, err)
	var crds, templated int
	for _, o := range objs {
		got, found := live(ctx, t, c, o)
		require.True(t, found, "after install: %s missing", key(o))
		if o.GetKind() == "CustomResourceDefinition" {
			crds++
			continue
		}
		templated++
		assert.Equal(t, "Helm", got.GetLabels()["app.kubernetes.io/managed-by"], key(o))
		assert.Equal(t, "kerf", got.GetAnnotations()["meta.helm.sh/release-name"], key(o))
	}
	assert.Equal(t, 6, crds, "CRDs")
	t.Logf("installed %d CRDs and %d objects", crds, templated)

	// The leader fills the webhook's caBundle in (cluster/cert.PatchCABundle):
	// an upgrade must keep it.
	hook := &unstructured.Unstructured{}
	hook.SetGroupVersionKind(schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "MutatingWebhookConfiguration"})
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "kerf"}, hook))
	webhooks, _, _ := unstructured.NestedSlice(hook.Object, "webhooks")
	require.Len(t, webhooks, 1)
	// Any bytes do: the apiserver does not parse a caBundle.
	const caBundle = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1BPT0KLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
	require.NoError(t, unstructured.SetNestedField(webhooks[0].(map[string]any), caBundle, "clientConfig", "caBundle"))
	require.NoError(t, unstructured.SetNestedSlice(hook.Object, webhooks, "webhooks"))
	require.NoError(t, c.Update(ctx, hook), "set caBundle as the leader does")

	up := action.NewUpgrade(cfg)
	up.Namespace = releaseNamespace
	up.Timeout = 2 * time.Minute
	upVals := map[string]any{
		"leader": map[string]any{"replicas": 3},
		"hub": map[string]any{"enabled": true, "tls": map[string]any{"selfSigned": true},
			"forward": map[string]any{"enabled": true}},
	}
	rel, err = up.Run("kerf", chrt, upVals)
	require.NoError(t, err, "helm upgrade")
	assert.Equal(t, 2, rel.Version)
	leader := &unstructured.Unstructured{}
	leader.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: "kerf-system", Name: "kerf-leader"}, leader))
	replicas, _, _ := unstructured.NestedInt64(leader.Object, "spec", "replicas")
	assert.EqualValues(t, 3, replicas, "leader.replicas after upgrade")
	containers, _, _ := unstructured.NestedSlice(leader.Object, "spec", "template", "spec", "containers")
	require.Len(t, containers, 1)
	args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
	assert.Contains(t, args, "--hub-url=https://kerf-hub.kerf-hub.svc:9443", "hub.enabled after upgrade")
	require.NoError(t, c.Get(ctx, client.ObjectKey{Name: "kerf"}, hook))
	webhooks, _, _ = unstructured.NestedSlice(hook.Object, "webhooks")
	kept, _, _ := unstructured.NestedString(webhooks[0].(map[string]any), "clientConfig", "caBundle")
	assert.Equal(t, caBundle, kept, "the upgrade dropped the caBundle the leader wrote")

	// The hub's self-signed certificate is made once: a later upgrade
	// reads it back (lookup) rather than making another, which would leave
	// every leader's ca.crt stale.
	hubTLS, err := cp.Clientset.CoreV1().Secrets("kerf-hub").Get(ctx, "kerf-hub-tls", metav1.GetOptions{})
	require.NoError(t, err, "hub.tls.selfSigned makes the Secret")
	require.NotEmpty(t, hubTLS.Data["tls.crt"])
	rel, err = up.Run("kerf", chrt, upVals)
	require.NoError(t, err, "helm upgrade, again")
	assert.Equal(t, 3, rel.Version)
	again, err := cp.Clientset.CoreV1().Secrets("kerf-hub").Get(ctx, "kerf-hub-tls", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, hubTLS.Data, again.Data, "an upgrade made the hub's certificate again")
	objs = append(objs, renderChart(t, upVals)...)

	un := action.NewUninstall(cfg)
	un.Timeout = 2 * time.Minute
	_, err = un.Run("kerf")
	require.NoError(t, err, "helm uninstall")
	var left []string
	for _, o := range objs {
		got, found := live(ctx, t, c, o)
		switch {
		case o.GetKind() == "CustomResourceDefinition":
			assert.True(t, found, "Helm keeps CRDs: %s", key(o))
		case !found:
		case (o.GetKind() == "Namespace" || o.GetKind() == "PersistentVolumeClaim") && got.GetDeletionTimestamp() != nil:
			// Terminating: only the namespace controller, and for a claim
			// the PVC-protection controller, would finish it.
		default:
			left = append(left, key(o))
		}
	}
	assert.Empty(t, left, "objects left after helm uninstall")
	// Nor any release record (Helm's storage labels them owner=helm).
	secrets, err := cp.Clientset.CoreV1().Secrets(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm,name=kerf"})
	require.NoError(t, err)
	assert.Empty(t, secrets.Items, "release records left after helm uninstall")
}
