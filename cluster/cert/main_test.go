package cert

import (
	"log/slog"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/test/controlplane"
)

// TestMain shares one control plane among the package's tests
// (controlplane.Get): a start costs seconds.
func TestMain(m *testing.M) { controlplane.Main(m, controlplane.Hooks{}) }

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
