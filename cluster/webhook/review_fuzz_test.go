package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/controlplane"
)

// fuzzReviewUID is the UID of the seeds' admission requests.
const fuzzReviewUID = "3c4b7f7e-0000-4000-8000-00000000f022"

// fuzzNamespace holds the fuzzed webhook's workload and recommendation.
const fuzzNamespace = "kerf-fuzz"

// fuzzInjector is an Injector reading what the real apiserver holds: a
// Deployment's ReplicaSet and an applied InPlace recommendation of the
// Deployment; and the owner reference of that ReplicaSet a pod of the
// Deployment carries.
func fuzzInjector(f *testing.F) (*Injector, string, metav1.OwnerReference) {
	cp := controlplane.Get(f)
	c := cp.Client
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	// A fixed namespace and owner references without UID (the webhook
	// checks a UID only when given), so that an input the fuzzer saved
	// reaches the same objects in another run.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fuzzNamespace}}
	labels := map[string]string{"app": "web", "pod-template-hash": "5d8f7c9b6"}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "web-5d8f7c9b6"}}
	rsr := &v1alpha1.RightsizingRecommendation{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "web"}}
	if err := c.Create(ctx, ns); err == nil {
		template := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{appContainer()}}}
		dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "web"},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}}
		require.NoError(f, c.Create(ctx, dep))
		rs.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}
		rs.Spec = appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: template}
		require.NoError(f, c.Create(ctx, rs))
		rsr.Spec = v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{Kind: v1alpha1.KindDeployment, Name: "web"},
			Strategy:  v1alpha1.StrategyInPlace,
			Containers: []v1alpha1.ContainerResources{{Name: "app",
				Requests: &v1alpha1.ResourceValues{CPU: q("300m"), Memory: q("96Mi")}, Limits: &v1alpha1.ResourceValues{Memory: q("192Mi")}}},
		}
		require.NoError(f, c.Create(ctx, rsr))
		rsr.Status = v1alpha1.RightsizingRecommendationStatus{Phase: v1alpha1.PhaseApplied, Change: changedBoth()}
		require.NoError(f, c.Status().Update(ctx, rsr))
	} else {
		require.True(f, apierrors.IsAlreadyExists(err), "create namespace: %v", err)
		require.NoError(f, c.Get(ctx, client.ObjectKeyFromObject(rsr), rsr))
	}

	// What the injector reads, read once from the apiserver: a reader
	// with goroutines of its own (an informer cache) changes the coverage
	// between runs of one input, which the fuzzer takes for new inputs.
	snap := &snapshotReader{rs: &appsv1.ReplicaSet{}}
	require.NoError(f, c.Get(ctx, client.ObjectKeyFromObject(rs), snap.rs))
	require.NoError(f, c.List(ctx, &snap.rsrs, client.InNamespace(ns.Name)))
	require.Len(f, snap.rsrs.Items, 1)
	require.Equal(f, v1alpha1.PhaseApplied, snap.rsrs.Items[0].Status.Phase)
	in := NewInjector(snap, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	owner := *metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))
	owner.UID = ""
	return in, ns.Name, owner
}

// snapshotReader serves the ReplicaSet and the namespace's
// recommendations as the apiserver gave them at the fuzzer's start.
type snapshotReader struct {
	rs   *appsv1.ReplicaSet
	rsrs v1alpha1.RightsizingRecommendationList
}

func (r *snapshotReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	m, ok := obj.(*appsv1.ReplicaSet)
	if !ok || key != client.ObjectKeyFromObject(r.rs) {
		return apierrors.NewNotFound(appsv1.Resource("replicasets"), key.Name)
	}
	r.rs.DeepCopyInto(m)
	return nil
}

func (r *snapshotReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	l, ok := list.(*v1alpha1.RightsizingRecommendationList)
	if !ok {
		return fmt.Errorf("list %T: not held", list)
	}
	var o client.ListOptions
	o.ApplyOptions(opts)
	*l = v1alpha1.RightsizingRecommendationList{}
	if o.Namespace == r.rs.Namespace {
		r.rsrs.DeepCopyInto(l)
	}
	return nil
}

// reviewBody is an AdmissionReview v1 of a pod CREATE, as the apiserver
// POSTs it.
func reviewBody(ns string, pod any) []byte {
	raw, err := json.Marshal(pod)
	if err != nil {
		panic(err)
	}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:       fuzzReviewUID,
			Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
			Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
			Namespace: ns,
			Operation: admissionv1.Create,
			Object:    runtime.RawExtension{Raw: raw},
		},
	})
	if err != nil {
		panic(err)
	}
	return body
}

// FuzzReview posts raw bodies to the webhook's handler: it never panics;
// a body that is not an AdmissionReview gets 400; every other answer is an
// AdmissionReview v1 allowing the request it answers (same UID); and a
// patch comes only for a pod that decodes as the apiserver reads it (JSON
// field names are case-sensitive there), applies to that object, and
// changes no container's name.
func FuzzReview(f *testing.F) {
	in, ns, owner := fuzzInjector(f)
	pod := newPod(ns, owner, appContainer(), corev1.Container{Name: "sidecar", Image: "x"})
	f.Add(reviewBody(ns, pod))
	f.Add(reviewBody("", pod))
	f.Add(reviewBody(ns, newPod(ns, metav1.OwnerReference{}, appContainer())))
	f.Add(reviewBody(ns, map[string]any{"metadata": map[string]any{"generateName": "web-", "ownerReferences": pod.OwnerReferences},
		"spec": map[string]any{"containers": []map[string]any{{"name": "app", "resources": map[string]any{}}}}}))
	f.Add([]byte("{not json"))
	f.Add([]byte(`{"kind":"AdmissionReview"}`))
	f.Add([]byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","operation":"CREATE","resource":{"version":"v1","resource":"pods"},"object":null}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		in.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body)))
		var sent admissionv1.AdmissionReview
		readable := json.Unmarshal(body, &sent) == nil && sent.Request != nil
		if rec.Code == http.StatusBadRequest {
			if readable {
				t.Fatalf("a readable review got 400: %s", rec.Body)
			}
			return
		}
		if rec.Code != http.StatusOK || !readable {
			t.Fatalf("answered %d (review readable: %v): %s", rec.Code, readable, rec.Body)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("answer is not an AdmissionReview (%v): %s", err, rec.Body)
		}
		if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" {
			t.Fatalf("answer is %s %s", out.APIVersion, out.Kind)
		}
		if out.Response.UID != sent.Request.UID || !out.Response.Allowed {
			t.Fatalf("answer %+v for request %q", out.Response, sent.Request.UID)
		}
		if len(out.Response.Patch) == 0 {
			if out.Response.PatchType != nil {
				t.Fatalf("a patch type without a patch")
			}
			return
		}
		// The object as the apiserver reads it.
		var obj map[string]any
		var before corev1.Pod
		if err := utiljson.Unmarshal(sent.Request.Object.Raw, &obj); err != nil {
			t.Fatalf("patch %s for an object that does not decode: %v", out.Response.Patch, err)
		}
		if err := utiljson.Unmarshal(sent.Request.Object.Raw, &before); err != nil {
			t.Fatalf("patch %s for an object that is not a pod: %v", out.Response.Patch, err)
		}
		var ops []struct {
			Op    string `json:"op"`
			Path  string `json:"path"`
			Value any    `json:"value"`
		}
		if err := json.Unmarshal(out.Response.Patch, &ops); err != nil {
			t.Fatalf("patch %s: %v", out.Response.Patch, err)
		}
		for _, op := range ops {
			if err := applyOp(obj, op.Op, op.Path, op.Value); err != nil {
				t.Fatalf("patch %s does not apply to the object the apiserver reads (%s): %v", out.Response.Patch, sent.Request.Object.Raw, err)
			}
		}
		patched, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var after corev1.Pod
		if err := utiljson.Unmarshal(patched, &after); err != nil {
			t.Fatalf("patched pod does not decode: %v", err)
		}
		if !slices.Equal(containerNames(before), containerNames(after)) || after.Annotations[InjectedAnnotation] == "" {
			t.Fatalf("patch %s changed containers %v to %v, or did not annotate", out.Response.Patch, containerNames(before), containerNames(after))
		}
	})
}

func containerNames(p corev1.Pod) []string {
	var names []string
	for _, c := range p.Spec.Containers {
		names = append(names, c.Name)
	}
	return names
}

// applyOp applies one JSONPatch add or replace to doc, as RFC 6902 does:
// the parent must exist, and a replaced member too.
func applyOp(doc map[string]any, op, path string, value any) error {
	if op != "add" && op != "replace" {
		return fmt.Errorf("op %q", op)
	}
	if !strings.HasPrefix(path, "/") {
		return fmt.Errorf("path %q", path)
	}
	parts := strings.Split(path[1:], "/")
	for i, p := range parts {
		parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(p)
	}
	var cur any = doc
	for _, p := range parts[:len(parts)-1] {
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[p]
			if !ok {
				return fmt.Errorf("path %q: no member %q", path, p)
			}
			cur = next
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(c) {
				return fmt.Errorf("path %q: no element %q", path, p)
			}
			cur = c[i]
		default:
			return fmt.Errorf("path %q: %q is not an object or array", path, p)
		}
	}
	last := parts[len(parts)-1]
	m, ok := cur.(map[string]any)
	if !ok {
		return fmt.Errorf("path %q: parent is not an object", path)
	}
	if _, exists := m[last]; op == "replace" && !exists {
		return fmt.Errorf("path %q: nothing to replace", path)
	}
	m[last] = value
	return nil
}
