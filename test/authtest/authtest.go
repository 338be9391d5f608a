// Package authtest gives tests the callers of Kerf's authenticated
// endpoints on a real apiserver: service accounts bound to the reader
// ClusterRoles of manifests/rbac-readers.yaml (installed from that file),
// their tokens, and the apiserver's count of the TokenReviews it answered.
package authtest

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// The reader ClusterRoles of manifests/rbac-readers.yaml.
const (
	MetricsReader = "kerf-metrics-reader"
	AuditReader   = "kerf-audit-reader"
)

// InstallReaderRoles creates (or updates) the ClusterRoles of
// manifests/rbac-readers.yaml on cp, as `kubectl apply -k manifests/` would.
func InstallReaderRoles(t testing.TB, cp *controlplane.ControlPlane) {
	t.Helper()
	root, err := kube.RepoRoot()
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join(root, "manifests", "rbac-readers.yaml"))
	require.NoError(t, err)
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	n := 0
	for {
		var role rbacv1.ClusterRole
		if err := dec.Decode(&role); err == io.EOF {
			break
		} else {
			require.NoError(t, err, "decode manifests/rbac-readers.yaml")
		}
		if role.Name == "" {
			continue
		}
		n++
		err := cp.Client.Create(context.Background(), &role)
		if apierrors.IsAlreadyExists(err) {
			var live rbacv1.ClusterRole
			require.NoError(t, cp.Client.Get(context.Background(), client.ObjectKey{Name: role.Name}, &live))
			live.Rules = role.Rules
			err = cp.Client.Update(context.Background(), &live)
		}
		require.NoError(t, err, "install ClusterRole %s", role.Name)
	}
	require.Equal(t, 2, n, "manifests/rbac-readers.yaml has the two reader roles")
}

// Caller is a service account made for a test, with a token for the
// apiserver's own audiences.
type Caller struct {
	Namespace, Name string
	// User is its username, system:serviceaccount:<namespace>:<name>.
	User string
	// Token is a bearer token of it, valid for an hour.
	Token string
}

// NewCaller creates a service account in namespace (created if missing)
// and a token of it. It is bound to nothing: see BindCluster and
// BindNamespace.
func NewCaller(t testing.TB, cp *controlplane.ControlPlane, namespace, name string) *Caller {
	t.Helper()
	ctx := context.Background()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := cp.Client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	tr, err := cp.Clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	require.NoError(t, err, "token of %s/%s", namespace, name)
	return &Caller{Namespace: namespace, Name: name, User: "system:serviceaccount:" + namespace + ":" + name, Token: tr.Status.Token}
}

func (c *Caller) subject() rbacv1.Subject {
	return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: c.Namespace, Name: c.Name}
}

// BindCluster binds the caller to clusterRole in every namespace.
func (c *Caller) BindCluster(t testing.TB, cp *controlplane.ControlPlane, clusterRole string) {
	t.Helper()
	err := cp.Client.Create(context.Background(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: controlplane.UniqueName(c.Name + "-" + clusterRole)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{c.subject()},
	})
	require.NoError(t, err)
}

// BindNamespace binds the caller to clusterRole in namespace only (a
// RoleBinding), creating the namespace if missing.
func (c *Caller) BindNamespace(t testing.TB, cp *controlplane.ControlPlane, clusterRole, namespace string) {
	t.Helper()
	ctx := context.Background()
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	err := cp.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: controlplane.UniqueName(c.Name + "-" + clusterRole)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{c.subject()},
	})
	require.NoError(t, err)
}

// TokenReviews returns how many TokenReviews the apiserver has answered
// (its apiserver_request_total for tokenreviews): what a cache in front of
// it saved is the difference.
func TokenReviews(t testing.TB, cp *controlplane.ControlPlane) int {
	t.Helper()
	hc, err := rest.HTTPClientFor(cp.Config)
	require.NoError(t, err)
	resp, err := hc.Get(strings.TrimSuffix(cp.Config.Host, "/") + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "the apiserver's /metrics")
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="tokenreviews"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, "sample %q", line)
		total += v
	}
	require.NoError(t, sc.Err())
	return int(total)
}

// Get sends GET url with the bearer token (none when token is "") and
// returns the status and body.
func Get(t testing.TB, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "GET %s", url)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// ReaderToken is a token bound to both reader ClusterRoles in every
// namespace: what the leader's /metrics, audit API and pages want since
// they authenticate (docs/security.md).
func ReaderToken(t *testing.T) string {
	t.Helper()
	cp := controlplane.Get(t)
	InstallReaderRoles(t, cp)
	c := NewCaller(t, cp, controlplane.UniqueName("readers"), "reader")
	c.BindCluster(t, cp, MetricsReader)
	c.BindCluster(t, cp, AuditReader)
	return c.Token
}

// GetAs sends GET url with token as its bearer token.
func GetAs(url, token string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return http.DefaultClient.Do(req)
}

// BrowseAs makes the browser of bctx send token on every request, as an
// authenticating proxy in front of the leader would (docs/web.md).
func BrowseAs(t *testing.T, bctx context.Context, token string) {
	t.Helper()
	_, err := chromedp.Call(bctx, network.Enable, network.EnableParams{})
	require.NoError(t, err)
	_, err = chromedp.Call(bctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Bearer " + token}})
	require.NoError(t, err)
}
