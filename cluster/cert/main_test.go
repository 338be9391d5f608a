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

// shared is the control plane the package's tests share (a start costs
// seconds); shared.Get(t) starts it on first use, and skips the test where
// the binaries are missing unless controlplane.Required.
var shared = controlplane.Shared{}

func TestMain(m *testing.M) { shared.Main(m) }

// names numbers the objects the tests create, so none reuses another's.
var names atomic.Int64

func uniqueName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, names.Add(1)) }

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
