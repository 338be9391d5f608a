package scenario

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReaderServiceAccount is the service account in KerfNamespace whose
// token the scenarios send to Kerf's /metrics and audit API: bound to the
// kerf-metrics-reader and kerf-audit-reader ClusterRoles
// (manifests/rbac-readers.yaml), as docs/install.md tells users to bind them.
const ReaderServiceAccount = "kerf-scenario-reader"

// ReaderToken returns a token of ReaderServiceAccount, creating the
// account and its bindings on first use, and a new token when the one
// held is within 10 minutes of expiring.
func (e *Env) ReaderToken(ctx context.Context) (string, error) {
	e.tokenMu.Lock()
	defer e.tokenMu.Unlock()
	if e.token != "" && time.Until(e.tokenExpires) > 10*time.Minute {
		return e.token, nil
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: KerfNamespace, Name: ReaderServiceAccount}}
	objs := []client.Object{sa}
	for _, role := range []string{"kerf-metrics-reader", "kerf-audit-reader"} {
		objs = append(objs, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: ReaderServiceAccount + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: KerfNamespace, Name: ReaderServiceAccount}},
		})
	}
	for _, o := range objs {
		if err := e.Client.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("create %T %s for the scenarios' reader: %w", o, o.GetName(), err)
		}
	}
	// A token of Kerf's audience ("kerf", authn.Audience, not imported: the
	// scenarios see Kerf from outside): Kerf's endpoints take it, the
	// apiserver does not.
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{"kerf"}, ExpirationSeconds: ptr.To[int64](3600)}}
	if err := e.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return "", fmt.Errorf("token of %s/%s: %w", KerfNamespace, ReaderServiceAccount, err)
	}
	e.token, e.tokenExpires = tr.Status.Token, tr.Status.ExpirationTimestamp.Time
	return e.token, nil
}

// Authorize sets req's bearer token to the scenarios' reader's.
func (e *Env) Authorize(req *http.Request) error {
	token, err := e.ReaderToken(req.Context())
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return nil
}

// Get reads url (the leader's audit API) as the scenarios' reader and
// returns the body of a 200 answer, at most 1 MiB.
func (e *Env) Get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if err := e.Authorize(req); err != nil {
		return "", err
	}
	resp, err := e.kerfClient().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return string(body), nil
}
