package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/workload"
)

// Path is the URL path of the pod-mutating AdmissionReview v1 endpoint.
const Path = "/mutate-pods"

// InjectedAnnotation marks a pod the webhook changed. Its value is
// "<recommendation name>/<value fingerprint>", or
// "<recommendation name>/generation-<n>" when the recommendation's status
// records no fingerprint.
const InjectedAnnotation = "kerf.dev/injected"

// Results of an admission review, the values of
// kerf_webhook_injections_total{result}.
const (
	// ResultInjected: the pod got the applied values of at least one
	// container.
	ResultInjected = "injected"
	// ResultUnchanged: an active recommendation matched, but the pod already
	// has its values or has none of its containers.
	ResultUnchanged = "unchanged"
	// ResultGuarded: every container that would change was left as it was,
	// because the values would have made the pod invalid.
	ResultGuarded = "guarded"
	// ResultNoWorkload: the pod has no controller of a kind Kerf manages.
	ResultNoWorkload = "no_workload"
	// ResultNoRecommendation: no recommendation targets the pod's workload.
	ResultNoRecommendation = "no_recommendation"
	// ResultInactive: the recommendation is not in a phase or strategy whose
	// values new pods get (wholly rolled back, pending, blocked, failed,
	// Rollout). After a partial rollback new pods get the values that stay
	// applied.
	ResultInactive = "inactive"
	// ResultIgnored: the review was not a pod CREATE.
	ResultIgnored = "ignored"
	// ResultNotSynced: the replica's caches are not synced yet; the pod is
	// allowed unchanged, as when the webhook is down. What the caches say
	// of a recommendation may be stale, such as values since rolled back.
	ResultNotSynced = "not_synced"
	// ResultError: an internal error; the pod was allowed unchanged.
	ResultError = "error"
)

// Reasons a container is left as it was, the values of
// kerf_webhook_skipped_containers_total{reason}.
const (
	// SkipLimitBelowRequest: a limit would be below its request.
	SkipLimitBelowRequest = "limit_below_request"
	// SkipPodResources: the pod-level resources (spec.resources) would be
	// exceeded by the containers.
	SkipPodResources = "pod_resources_exceeded"
)

// DefaultTimeout bounds the work of one review, below the configuration's
// timeoutSeconds so that the webhook answers before the apiserver gives up.
const DefaultTimeout = 3 * time.Second

// maxReviewBytes bounds a review's body; the apiserver refuses objects
// larger than 3 MiB, and a review carries one object.
const maxReviewBytes = 8 << 20

// Injector is the admission logic: an http.Handler for the AdmissionReview
// v1 endpoint (Path) that gives a new pod the values its workload's
// recommendation applied.
type Injector struct {
	// Reader reads ReplicaSets (only their metadata is used) and
	// RightsizingRecommendations; in the leader, the manager's cache.
	Reader client.Reader
	// LiveReader, when set, is asked when Reader does not find a pod's
	// ReplicaSet: a cache may not yet have seen one just created.
	LiveReader client.Reader
	// Timeout bounds the work of one review; zero means DefaultTimeout.
	Timeout time.Duration
	// Synced, when set, says whether Reader's caches are synced; until
	// they are, every pod is allowed unchanged (ResultNotSynced).
	Synced func() bool

	log        *slog.Logger
	errors     prometheus.Counter
	injections *prometheus.CounterVec
	skipped    *prometheus.CounterVec
}

// NewInjector returns an Injector reading through r, with its metrics
// registered with reg (when not nil) and logging to log (slog.Default when
// nil).
func NewInjector(r client.Reader, reg prometheus.Registerer, log *slog.Logger) *Injector {
	if log == nil {
		log = slog.Default()
	}
	in := &Injector{
		Reader: r,
		log:    log.With("component", "webhook"),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kerf_webhook_errors_total",
			Help: "Pod admission reviews the webhook could not complete; each pod was allowed unchanged (fail open).",
		}),
		injections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_webhook_injections_total",
			Help: "Pod admission reviews by result: injected, unchanged, guarded, no_workload, no_recommendation, inactive, ignored, error.",
		}, []string{"result"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kerf_webhook_skipped_containers_total",
			Help: "Containers left unchanged because the applied values would make the pod invalid, by reason.",
		}, []string{"reason"}),
	}
	if reg != nil {
		reg.MustRegister(in.errors, in.injections, in.skipped)
	}
	return in
}

// ServeHTTP answers one AdmissionReview v1. A review it cannot read gets
// HTTP 400, which the apiserver treats as a failed call and, with
// failurePolicy Ignore, admits the pod unchanged.
func (in *Injector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "admission reviews are POSTed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err == nil && len(body) > maxReviewBytes {
		err = fmt.Errorf("body larger than %d bytes", maxReviewBytes)
	}
	var review admissionv1.AdmissionReview
	if err == nil {
		if err = json.Unmarshal(body, &review); err == nil && review.Request == nil {
			err = errors.New("no request in the AdmissionReview")
		}
	}
	if err != nil {
		in.errors.Inc()
		in.injections.WithLabelValues(ResultError).Inc()
		in.log.Error("unreadable admission review", "err", err)
		http.Error(w, "read AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}

	resp := in.Review(r.Context(), review.Request)
	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: resp,
	})
	if err != nil {
		// Not expected: the response is plain data. The apiserver admits
		// the pod unchanged on a 500.
		in.errors.Inc()
		in.log.Error("encode admission response", "err", err)
		http.Error(w, "encode AdmissionReview", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(out); err != nil {
		in.log.Warn("write admission response", "err", err)
	}
}

// Review decides one admission request. It always allows the pod; the
// response carries a JSONPatch when the pod gets values. Any internal error
// (a failed read, a timeout, a panic) is logged and counted, and the pod is
// allowed unchanged.
func (in *Injector) Review(ctx context.Context, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse) {
	resp = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	log := in.log.With("namespace", req.Namespace, "pod", podName(req), "uid", string(req.UID))
	defer func() {
		if p := recover(); p != nil {
			in.errors.Inc()
			in.injections.WithLabelValues(ResultError).Inc()
			log.Error("panic in pod admission; allowing the pod unchanged", "panic", fmt.Sprint(p))
			resp = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
		}
	}()

	podsGVR := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	if req.Operation != admissionv1.Create || req.Resource != podsGVR || req.SubResource != "" {
		in.injections.WithLabelValues(ResultIgnored).Inc()
		return resp
	}
	if in.Synced != nil && !in.Synced() {
		in.injections.WithLabelValues(ResultNotSynced).Inc()
		return resp
	}
	timeout := in.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	d, err := in.decide(ctx, req)
	if err != nil {
		in.errors.Inc()
		in.injections.WithLabelValues(ResultError).Inc()
		log.Error("pod admission failed; allowing the pod unchanged", "err", err)
		return resp
	}
	in.injections.WithLabelValues(d.result).Inc()
	for _, s := range d.skips {
		in.skipped.WithLabelValues(s.reason).Inc()
		log.Warn("container left unchanged: the applied values would make the pod invalid",
			"recommendation", d.recommendation, "container", s.container, "reason", s.reason, "detail", s.detail)
	}
	if d.result != ResultInjected {
		return resp
	}
	resp.Patch = d.patch
	pt := admissionv1.PatchTypeJSONPatch
	resp.PatchType = &pt
	log.Info("injected applied values", "recommendation", d.recommendation, "workload", d.workload,
		"containers", d.containers, "annotation", d.annotation)
	return resp
}

// podName is the pod's name for logs; a pod created with generateName has
// none yet at admission.
func podName(req *admissionv1.AdmissionRequest) string {
	if req.Name != "" {
		return req.Name
	}
	var meta struct {
		Metadata struct {
			Name         string `json:"name"`
			GenerateName string `json:"generateName"`
		} `json:"metadata"`
	}
	if json.Unmarshal(req.Object.Raw, &meta) != nil {
		return ""
	}
	if meta.Metadata.Name != "" {
		return meta.Metadata.Name
	}
	return meta.Metadata.GenerateName + "*"
}

// decision is what Review does with a pod.
type decision struct {
	result         string
	recommendation string
	workload       string
	annotation     string
	containers     []string
	skips          []skip
	patch          []byte
}

// skip is a container left as it was.
type skip struct {
	container, reason, detail string
}

func (in *Injector) decide(ctx context.Context, req *admissionv1.AdmissionRequest) (decision, error) {
	// Decoded as the apiserver decodes (case-sensitive field names): the
	// patch's paths must exist in the object the apiserver applies it to,
	// and encoding/json would also read "Spec" or "SPEC" as spec.
	var pod corev1.Pod
	if err := utiljson.Unmarshal(req.Object.Raw, &pod); err != nil {
		return decision{}, fmt.Errorf("decode pod: %w", err)
	}
	ns := req.Namespace
	if ns == "" {
		ns = pod.Namespace
	}
	pod.Namespace = ns // a pod created with generateName may carry none yet
	wl, ok, err := in.workload(ctx, &pod)
	if err != nil {
		return decision{}, err
	}
	if !ok {
		return decision{result: ResultNoWorkload}, nil
	}
	d := decision{workload: wl.String()}
	rsr, found, err := in.recommendation(ctx, ns, wl)
	if err != nil {
		return decision{}, err
	}
	if !found {
		d.result = ResultNoRecommendation
		return d, nil
	}
	d.recommendation = rsr.Name
	values, touched, ok := newPodValues(rsr)
	if !ok {
		d.result = ResultInactive
		return d, nil
	}
	changes, skips := inject(&pod, values, touched)
	d.skips = skips
	switch {
	case len(changes) > 0:
		d.result = ResultInjected
	case len(skips) > 0:
		d.result = ResultGuarded
		return d, nil
	default:
		d.result = ResultUnchanged
		return d, nil
	}
	d.annotation = rsr.Name + "/" + fingerprint(rsr)
	d.patch, err = jsonPatch(&pod, changes, d.annotation)
	if err != nil {
		return decision{}, err
	}
	for _, c := range changes {
		d.containers = append(d.containers, c.name(&pod))
	}
	return d, nil
}

// workload returns the workload that owns the pod, by workload.Of. It
// asks LiveReader when Reader does not have the pod's ReplicaSet, or has
// an older one of the same name: a cache may not yet have seen one just
// created.
func (in *Injector) workload(ctx context.Context, pod *corev1.Pod) (workload.Ref, bool, error) {
	ref, ok, err := workload.Of(ctx, in.Reader, pod)
	if !errors.Is(err, workload.ErrReplicaSetNotFound) || in.LiveReader == nil {
		// Without LiveReader only a cache was asked: the ReplicaSet may
		// exist and be unseen yet, so this is a possible missed injection,
		// counted as an error.
		return ref, ok, err
	}
	ref, ok, err = workload.Of(ctx, in.LiveReader, pod)
	if errors.Is(err, workload.ErrReplicaSetNotFound) {
		// The apiserver itself does not have it: the pod's owner is gone.
		return workload.Ref{}, false, nil
	}
	return ref, ok, err
}

// recommendation finds the recommendation in ns whose targetRef is wl. When
// several do, an active one wins, and among active ones the most recently
// applied (then the first by name), which is the one whose values the
// leader wrote last.
func (in *Injector) recommendation(ctx context.Context, ns string, wl workload.Ref) (*v1alpha1.RightsizingRecommendation, bool, error) {
	var list v1alpha1.RightsizingRecommendationList
	if err := in.Reader.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, false, fmt.Errorf("list RightsizingRecommendations in %s: %w", ns, err)
	}
	var matches []*v1alpha1.RightsizingRecommendation
	for i := range list.Items {
		r := &list.Items[i]
		if !wl.Targets(r.Namespace, r.Spec.TargetRef) || r.DeletionTimestamp != nil {
			continue
		}
		matches = append(matches, r)
	}
	if len(matches) == 0 {
		return nil, false, nil
	}
	sort.SliceStable(matches, func(i, j int) bool {
		a, b := matches[i], matches[j]
		if aa, ba := Active(a), Active(b); aa != ba {
			return aa
		}
		if ta, tb := appliedAt(a), appliedAt(b); !ta.Equal(tb) {
			return ta.After(tb)
		}
		return a.Name < b.Name
	})
	if len(matches) > 1 {
		names := make([]string, len(matches))
		for i, m := range matches {
			names[i] = m.Name
		}
		in.log.Warn("several recommendations target one workload; using the most recently applied",
			"namespace", ns, "workload", wl.String(), "recommendations", names, "chosen", matches[0].Name)
	}
	return matches[0], true, nil
}

func appliedAt(r *v1alpha1.RightsizingRecommendation) time.Time {
	if r.Status.Change == nil {
		return time.Time{}
	}
	return r.Status.Change.AppliedAt.Time
}

// Active reports whether new pods of r's workload get r's values. They do
// when its phase is Applied, Watching or Healthy and its strategy InPlace
// or Deferred (docs/design.md section 2).
//   - A rolled-back, pending, blocked or failed recommendation is never
//     active. After a rollback the webhook stops giving its values to new
//     pods (section 4).
//   - Nor is one applied by Rollout, whose values reach pods through the
//     template.
//   - Nor is a change whose canary is not promoted yet: until then only
//     the canary pods run the values (docs/health.md, "Canary").
func Active(r *v1alpha1.RightsizingRecommendation) bool {
	switch r.Status.Phase {
	case v1alpha1.PhaseApplied, v1alpha1.PhaseWatching, v1alpha1.PhaseHealthy:
	default:
		return false
	}
	if !r.Status.Change.Promoted() {
		return false
	}
	// The change's strategy, when status records one: a newer spec
	// waits for the change's watch to end (docs/health.md), and until
	// then new pods get what the change applied.
	if c := r.Status.Change; c != nil && c.Strategy != "" {
		return webhookStrategy(c.Strategy)
	}
	return webhookStrategy(r.Spec.Strategy)
}

func webhookStrategy(s v1alpha1.Strategy) bool {
	return s == v1alpha1.StrategyInPlace || s == v1alpha1.StrategyDeferred
}

// newPodValues returns, by container name, the values new pods of an
// active recommendation's workload get from the webhook. touched is the
// resources they may touch, nil for any. ok is false when r is not Active
// or no values can be trusted.
//
// The values are status.change.containers[].applied, what the leader
// applied, when the status records them. Else they are spec.containers,
// unless the status describes an older generation of the spec.
//
// A partial rollback (docs/design.md section 4) is the exception to
// Active. Once only some resources of an InPlace or Deferred change were
// rolled back, such as memory after OOM kills, the others stay applied on
// the running pods. New pods get them too (keptAfterRollback), so that a
// new pod runs what its siblings run rather than the manifest.
func newPodValues(r *v1alpha1.RightsizingRecommendation) (values map[string]v1alpha1.Resources, touched map[corev1.ResourceName]bool, ok bool) {
	if !Active(r) {
		kept, ok := keptAfterRollback(r)
		if !ok {
			return nil, nil, false
		}
		values = make(map[string]v1alpha1.Resources, len(r.Status.Change.Containers))
		for _, cc := range r.Status.Change.Containers {
			values[cc.Name] = cc.Applied
		}
		return values, kept, true
	}
	if c := r.Status.Change; c != nil && len(c.Containers) > 0 {
		values = make(map[string]v1alpha1.Resources, len(c.Containers))
		for _, cc := range c.Containers {
			values[cc.Name] = cc.Applied
		}
		if len(c.Resources) > 0 {
			touched = make(map[corev1.ResourceName]bool, len(c.Resources))
			for _, res := range c.Resources {
				touched[corev1.ResourceName(res)] = true
			}
		}
		return values, touched, true
	}
	if g := r.Status.ObservedGeneration; g != 0 && g != r.Generation {
		return nil, nil, false
	}
	values = make(map[string]v1alpha1.Resources, len(r.Spec.Containers))
	for _, c := range r.Spec.Containers {
		values[c.Name] = v1alpha1.Resources{Requests: c.Requests, Limits: c.Limits}
	}
	return values, nil, true
}

// keptAfterRollback returns the resources of a rolled-back (or
// Degraded) recommendation's change that its rollback did not touch. ok
// is false when there are none: the rollback restored everything, r is
// not rolled back, or its change's canary was not promoted.
//
// They are status.change.resources, all of cpu and memory when it names
// none, less status.breach.resources. There are some only when the change
// was applied with a strategy whose values reach new pods through the
// webhook.
func keptAfterRollback(r *v1alpha1.RightsizingRecommendation) (map[corev1.ResourceName]bool, bool) {
	c, b := r.Status.Change, r.Status.Breach
	// A rollback that marked the workload Degraded leaves the same
	// resources applied as any other.
	rolledBack := r.Status.Phase == v1alpha1.PhaseRolledBack || r.Status.Phase == v1alpha1.PhaseDegraded
	if !rolledBack || c == nil || b == nil || len(c.Containers) == 0 || !webhookStrategy(r.Spec.Strategy) {
		return nil, false
	}
	if c.Strategy != "" && !webhookStrategy(c.Strategy) {
		return nil, false
	}
	if !c.Promoted() {
		return nil, false // only the canary pods had the values
	}
	changed := c.Resources
	if len(changed) == 0 {
		changed = []v1alpha1.ResourceName{v1alpha1.ResourceCPU, v1alpha1.ResourceMemory}
	}
	kept := map[corev1.ResourceName]bool{}
	for _, res := range changed {
		if !slices.Contains(b.Resources, res) {
			kept[corev1.ResourceName(res)] = true
		}
	}
	return kept, len(kept) > 0
}

// fingerprint names the injected values in InjectedAnnotation.
func fingerprint(r *v1alpha1.RightsizingRecommendation) string {
	if c := r.Status.Change; c != nil && c.ValueFingerprint != "" {
		return c.ValueFingerprint
	}
	return fmt.Sprintf("generation-%d", r.Generation)
}
