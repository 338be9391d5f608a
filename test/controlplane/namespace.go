package controlplane

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Namespace creates a fresh namespace for one test, named after prefix
// ("kerf-test-" when empty), and fails the test when it cannot.
func Namespace(t testing.TB, c client.Client, prefix string) string {
	t.Helper()
	if prefix == "" {
		prefix = "kerf-test-"
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("create a namespace: %v", err)
	}
	return ns.Name
}
