package manifests_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/hub"
	"github.com/kerf-dev/kerf/hub/store"
	"github.com/kerf-dev/kerf/internal/images"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kustomizetest"
)

const hubNamespace = "kerf-hub"

func kindsOf(objs []*unstructured.Unstructured) map[string]int {
	kinds := map[string]int{}
	for _, u := range objs {
		kinds[u.GetKind()]++
	}
	return kinds
}

func has(objs []*unstructured.Unstructured, kind, name string) bool {
	return slices.ContainsFunc(objs, func(u *unstructured.Unstructured) bool { return u.GetKind() == kind && u.GetName() == name })
}

// servedWithoutToken answers GET path on a real hub over a SQLite store,
// with no token, as the kubelet's probe asks.
func servedWithoutToken(t *testing.T, path string) int {
	t.Helper()
	st, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "hub.db"), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	defer st.Close()
	rec := httptest.NewRecorder()
	hub.New(st, slog.New(slog.DiscardHandler)).Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code
}

// mountOf is the mount path of the volume in the container; "" if none.
func mountOf(c corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

func TestKerfInstallsWithoutAHub(t *testing.T) {
	for _, u := range kustomizetest.Objects(t, kustomizetest.Manifests(t)) {
		assert.NotEqual(t, hubNamespace, u.GetNamespace(), "%s %s", u.GetKind(), u.GetName())
		assert.NotEqual(t, "kerf-hub", u.GetName(), "%s %s", u.GetKind(), u.GetName())
	}
	var dep appsv1.Deployment
	kustomizetest.Object(t, kustomizetest.Objects(t, kustomizetest.Manifests(t)), "Deployment", "kerf-leader", &dep)
	for _, a := range dep.Spec.Template.Spec.Containers[0].Args {
		assert.False(t, strings.HasPrefix(a, "--hub-"), "the default leader has no hub: %s", a)
	}
}

// checkHubDeployment checks what every variant of the hub's Deployment
// must be: its selectors match, its probes reach paths the hub serves
// without a token, it runs as the image's nonroot user on a read-only
// root, and every file its flags name is in a mounted volume.
func checkHubDeployment(t *testing.T, objs []*unstructured.Unstructured) (appsv1.Deployment, corev1.Container) {
	t.Helper()
	var dep appsv1.Deployment
	kustomizetest.Object(t, objs, "Deployment", "kerf-hub", &dep)
	assert.Equal(t, hubNamespace, dep.Namespace)
	spec := dep.Spec.Template.Spec
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	require.NoError(t, err)
	assert.True(t, sel.Matches(labels.Set(dep.Spec.Template.Labels)), "the Deployment's selector matches its pods")
	var svc corev1.Service
	kustomizetest.Object(t, objs, "Service", "kerf-hub", &svc)
	assert.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(dep.Spec.Template.Labels)), "the Service selects the hub's pods")

	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	var hubImage images.Image
	for _, img := range images.Kerf {
		if img.Command == "kerf-hub" {
			hubImage = img
		}
	}
	assert.Equal(t, hubImage.Ref, c.Image, "the image internal/images builds")
	assert.Equal(t, "serve", c.Args[0])
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	assert.Equal(t, ports["https"], int32(9443))
	assert.Contains(t, c.Args, "--listen=:9443")
	for _, p := range svc.Spec.Ports {
		assert.Contains(t, ports, p.TargetPort.String(), "the Service's port %s targets a container port", p.Name)
	}
	for name, probe := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		require.NotNil(t, probe, name)
		require.NotNil(t, probe.HTTPGet, name)
		assert.Equal(t, corev1.URISchemeHTTPS, probe.HTTPGet.Scheme, "%s: the hub serves HTTPS only", name)
		assert.Contains(t, ports, probe.HTTPGet.Port.String(), name)
		assert.Equal(t, http.StatusOK, servedWithoutToken(t, probe.HTTPGet.Path), "%s probe %s: served, with no token", name, probe.HTTPGet.Path)
	}
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path, "ready when the database answers")
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path, "alive without the database")

	uid, gid, _ := strings.Cut(images.NonRoot, ":")
	assert.True(t, *spec.SecurityContext.RunAsNonRoot)
	assert.Equal(t, uid, strconv.FormatInt(*spec.SecurityContext.RunAsUser, 10), "the image's user")
	assert.Equal(t, gid, strconv.FormatInt(*spec.SecurityContext.RunAsGroup, 10))
	assert.False(t, ptr.Deref(spec.AutomountServiceAccountToken, true), "the hub uses no Kubernetes API")
	sc := c.SecurityContext
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.NotNil(t, c.Resources.Requests.Cpu())
	assert.False(t, c.Resources.Limits.Memory().IsZero(), "a memory limit")

	volumes := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		volumes[v.Name] = v
	}
	for _, m := range c.VolumeMounts {
		assert.Contains(t, volumes, m.Name, "mount %s has a volume", m.Name)
	}
	require.NotNil(t, volumes["tls"].Secret)
	assert.Equal(t, "kerf-hub-tls", volumes["tls"].Secret.SecretName)
	tlsDir := mountOf(c, "tls")
	assert.Equal(t, "/tmp", mountOf(c, "tmp"), "SQLite's temporary files on a read-only root")
	assert.Equal(t, tlsDir+"/tls.crt", flagValue(t, c.Args, "--tls-cert-file"), "kubernetes.io/tls's tls.crt")
	assert.Equal(t, tlsDir+"/tls.key", flagValue(t, c.Args, "--tls-key-file"))
	return dep, c
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func TestTheHubManifestsOnSQLite(t *testing.T) {
	y := kustomizetest.Overlay(t, []string{"hub"})
	objs := kustomizetest.Objects(t, y)
	assert.Equal(t, map[string]int{"Namespace": 1, "ServiceAccount": 1, "Deployment": 1, "Service": 1, "PersistentVolumeClaim": 1}, kindsOf(objs))
	dep, c := checkHubDeployment(t, objs)
	assert.Equal(t, int32(1), *dep.Spec.Replicas, "SQLite: one writer")
	assert.Equal(t, appsv1.RecreateDeploymentStrategyType, dep.Spec.Strategy.Type, "never two pods on the file")
	db := env(c, "KERF_HUB_DATABASE")
	require.NotNil(t, db, "the database in the environment, for kubectl exec's admin commands")
	path, ok := strings.CutPrefix(db.Value, "sqlite:")
	require.True(t, ok, db.Value)
	dataDir := mountOf(c, "data")
	assert.Equal(t, dataDir, filepath.Dir(path), "the SQLite file is on the data volume")
	var data corev1.Volume
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "data" {
			data = v
		}
	}
	require.NotNil(t, data.PersistentVolumeClaim)
	assert.True(t, has(objs, "PersistentVolumeClaim", data.PersistentVolumeClaim.ClaimName), "the claim is in the manifests")
	assert.Equal(t, int64(65532), *dep.Spec.Template.Spec.SecurityContext.FSGroup, "the claim's files are the hub's")

	out := apply(t, controlplane.Get(t), y)
	assert.Contains(t, out, "deployment.apps/kerf-hub")
}

// dryRun has the apiserver accept y (kubectl apply --dry-run=server),
// with the hub's namespace and Kerf's installed for it to go in.
func dryRun(t *testing.T, y []byte) {
	t.Helper()
	cp, _ := installed(t)
	apply(t, cp, kustomizetest.Overlay(t, []string{"hub"}))
	cmd := exec.Command(kustomizetest.Kubectl(t), "--kubeconfig", cp.Kubeconfig, "apply", "--dry-run=server", "-f", "-")
	cmd.Stdin = bytes.NewReader(y)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "kubectl apply --dry-run=server:\n%s", out)
}

func TestTheHubManifestsOnPostgreSQL(t *testing.T) {
	y := kustomizetest.Overlay(t, []string{"hub"}, "hub/postgres")
	objs := kustomizetest.Objects(t, y)
	assert.Equal(t, map[string]int{"Namespace": 1, "ServiceAccount": 1, "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1}, kindsOf(objs), "no claim")
	dep, c := checkHubDeployment(t, objs)
	assert.GreaterOrEqual(t, *dep.Spec.Replicas, int32(2), "several replicas on one database")
	assert.Equal(t, appsv1.RollingUpdateDeploymentStrategyType, dep.Spec.Strategy.Type)
	db := env(c, "KERF_HUB_DATABASE")
	require.NotNil(t, db)
	assert.Empty(t, db.Value)
	require.NotNil(t, db.ValueFrom)
	require.NotNil(t, db.ValueFrom.SecretKeyRef)
	assert.Equal(t, "kerf-hub-database", db.ValueFrom.SecretKeyRef.Name)
	assert.Equal(t, "url", db.ValueFrom.SecretKeyRef.Key)
	assert.Empty(t, mountOf(c, "data"))
	var pdb policyv1.PodDisruptionBudget
	kustomizetest.Object(t, objs, "PodDisruptionBudget", "kerf-hub", &pdb)
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	require.NoError(t, err)
	assert.True(t, sel.Matches(labels.Set(dep.Spec.Template.Labels)))
	dryRun(t, y)
}

func TestTheHubManifestsOnAnEmptyDir(t *testing.T) {
	y := kustomizetest.Overlay(t, []string{"hub"}, "hub/ephemeral")
	objs := kustomizetest.Objects(t, y)
	assert.False(t, has(objs, "PersistentVolumeClaim", "kerf-hub-data"))
	dep, c := checkHubDeployment(t, objs)
	assert.Equal(t, int32(1), *dep.Spec.Replicas)
	assert.NotEmpty(t, mountOf(c, "data"))
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "data" {
			assert.NotNil(t, v.EmptyDir)
			assert.Nil(t, v.PersistentVolumeClaim)
		}
	}
	dryRun(t, y)
}

// TestTheLeaderPatchGivesTheLeaderTheHub renders Kerf with the
// leader-patch component: the leader gets the four hub flags, valid for
// the forwarder, its files in the mounted Secret kerf-hub-client, its
// cluster's name from that Secret, and the URL of the hub's Service.
func TestTheLeaderPatchGivesTheLeaderTheHub(t *testing.T) {
	y := kustomizetest.Overlay(t, []string{"."}, "hub/leader-patch")
	objs := kustomizetest.Objects(t, y)
	var dep appsv1.Deployment
	kustomizetest.Object(t, objs, "Deployment", "kerf-leader", &dep)
	c := dep.Spec.Template.Spec.Containers[0]
	assert.Equal(t, "--metrics-addr=:9401", c.Args[0], "the leader's own flags stay")
	hubURL := flagValue(t, c.Args, "--hub-url")
	assert.Equal(t, "https://kerf-hub."+hubNamespace+".svc:9443", hubURL, "the Service kerf-hub's port")
	mount := mountOf(c, "hub-client")
	require.NotEmpty(t, mount)
	assert.Equal(t, mount+"/token", flagValue(t, c.Args, "--hub-token-file"))
	assert.Equal(t, mount+"/ca.crt", flagValue(t, c.Args, "--hub-ca-file"))
	assert.Equal(t, "$(KERF_CLUSTER_NAME)", flagValue(t, c.Args, "--cluster-name"))
	name := env(c, "KERF_CLUSTER_NAME")
	require.NotNil(t, name)
	require.NotNil(t, name.ValueFrom.SecretKeyRef)
	assert.Equal(t, corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "kerf-hub-client"}, Key: "cluster"}, *name.ValueFrom.SecretKeyRef)
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "hub-client" {
			require.NotNil(t, v.Secret)
			assert.Equal(t, "kerf-hub-client", v.Secret.SecretName)
		}
	}
	cfg := forward.Config{URL: hubURL, TokenFile: mount + "/token", Cluster: "east"}
	assert.NoError(t, cfg.Validate(), "the forwarder takes the flags")
	dryRun(t, y)
}
