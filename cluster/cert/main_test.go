package cert

import (
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// shared is the package's one control plane: a start costs seconds.
var shared = controlplane.Shared{}

func TestMain(m *testing.M) { shared.Main(m) }

// controlPlane returns the package's control plane, starting it on first
// use; where the binaries are missing the test is skipped, unless
// controlplane.Required says it must run.
func controlPlane(t testing.TB) *controlplane.ControlPlane {
	t.Helper()
	return shared.Get(t)
}

var nameSeq atomic.Int64

// uniqueName returns a fresh object name starting with prefix.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, nameSeq.Add(1))
}

// testLogger logs into the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// webhookConfiguration is a MutatingWebhookConfiguration with one webhook
// and no caBundle, as the manifests install it.
func webhookConfiguration(name string) *admissionregistrationv1.MutatingWebhookConfiguration {
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "pods.webhook.kerf.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: "kerf-system", Name: "kerf-webhook", Path: ptr.To("/mutate-pods")},
			},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}
