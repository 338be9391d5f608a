package workload

import (
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// equalIgnoringHash is the deployment controller's EqualIgnoreHash: the
// comparison TemplateDigest stands for.
func equalIgnoringHash(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	delete(b.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	return apiequality.Semantic.DeepEqual(a, b)
}

// TestTemplateDigestIsEqualIgnoringHash: two templates have the same
// digest exactly when the deployment controller's comparison holds, on
// pairs that differ in each way the comparison ignores (the
// pod-template-hash label, a quantity's format, nil against empty) and in
// ways it does not (any field, a quantity's value, nil against a zero
// pointer).
func TestTemplateDigestIsEqualIgnoringHash(t *testing.T) {
	base := func() *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "1"}},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{Name: "app", Image: "img:1",
					Env: []corev1.EnvVar{{Name: "MODE", Value: "serve"}},
					Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
						Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
					}}},
				NodeSelector: map[string]string{"zone": "a"},
			},
		}
	}
	cases := []struct {
		name   string
		change func(*corev1.PodTemplateSpec)
		equal  bool
	}{
		{"the same", func(*corev1.PodTemplateSpec) {}, true},
		{"pod-template-hash added", func(p *corev1.PodTemplateSpec) { p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "abc" }, true},
		{"1Gi written 1073741824", func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1073741824")
		}, true},
		{"500m written 0.5", func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("0.5")
		}, true},
		{"no tolerations against empty ones", func(p *corev1.PodTemplateSpec) { p.Spec.Tolerations = []corev1.Toleration{} }, true},
		{"no args against empty ones", func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Args = []string{} }, true},
		{"no annotations", func(p *corev1.PodTemplateSpec) { p.Annotations = nil }, false},
		{"map keys in another order", func(p *corev1.PodTemplateSpec) {
			p.Spec.NodeSelector = map[string]string{"zone": "a"}
			p.Labels = map[string]string{"app": "web"}
		}, true},
		{"an image", func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Image = "img:2" }, false},
		{"an env value", func(p *corev1.PodTemplateSpec) { p.Spec.Containers[0].Env[0].Value = "debug" }, false},
		{"a label", func(p *corev1.PodTemplateSpec) { p.Labels["app"] = "api" }, false},
		{"an annotation", func(p *corev1.PodTemplateSpec) { p.Annotations["kubectl.kubernetes.io/restartedAt"] = "now" }, false},
		{"a cpu request", func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("501m")
		}, false},
		{"a nil pointer against a zero one", func(p *corev1.PodTemplateSpec) { p.Spec.Priority = ptr.To[int32](0) }, false},
		{"a node selector", func(p *corev1.PodTemplateSpec) { p.Spec.NodeSelector["zone"] = "b" }, false},
		{"a key moved between maps", func(p *corev1.PodTemplateSpec) {
			delete(p.Annotations, "a")
			p.Labels["a"] = "1"
		}, false},
		{"a second container", func(p *corev1.PodTemplateSpec) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side"})
		}, false},
		{"a creation timestamp", func(p *corev1.PodTemplateSpec) { p.CreationTimestamp = metav1.Unix(1, 0) }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := base(), base()
			tc.change(b)
			assert.Equal(t, tc.equal, equalIgnoringHash(a, b), "the deployment controller's comparison (else the case is wrong)")
			assert.Equal(t, tc.equal, TemplateDigest(a) == TemplateDigest(b), "the digests")
			assert.Equal(t, base(), a, "the digest changes nothing")
		})
	}

	// A template carrying the annotation (a cached, stripped one) is its
	// digest; the digest of the whole one is the same.
	whole := base()
	whole.Labels[appsv1.DefaultDeploymentUniqueLabelKey] = "abc"
	stripped := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{TemplateDigestAnnotation: TemplateDigest(whole)}}}
	assert.Equal(t, TemplateDigest(base()), TemplateDigest(stripped))
}

// TestTemplateSumIsTheDigestsBytes: TemplateDigest is the hex of
// TemplateSum, and a template that carries the digest's annotation has
// that annotation's bytes as its sum; an annotation that is not such a
// digest is ignored by TemplateSum.
func TestTemplateSumIsTheDigestsBytes(t *testing.T) {
	tpl := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	sum := TemplateSum(tpl)
	assert.Equal(t, hex.EncodeToString(sum[:]), TemplateDigest(tpl))
	carried := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{TemplateDigestAnnotation: TemplateDigest(tpl)}}}
	assert.Equal(t, sum, TemplateSum(carried), "the annotation's bytes")
	carried.Annotations[TemplateDigestAnnotation] = "not-a-digest"
	assert.NotEqual(t, sum, TemplateSum(carried))
	assert.Equal(t, "not-a-digest", TemplateDigest(carried), "TemplateDigest returns the annotation as it is")
}
