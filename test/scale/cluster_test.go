package scale

// The simulated cluster: namespaces, policies, nodes, Deployments with
// their ReplicaSets and Running pods (as the controller-manager and a
// kubelet would write them: none runs on test/controlplane), the agents'
// service account, pods and tokens, and the leader's own identity.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/internal/kube"
)

const (
	// kerfNS holds the leader's Lease and the agents' service account.
	kerfNS = "kerf-system"
	// agentSA and leaderSA are the agents' and the leader's service
	// accounts; leaderFlowSchema is the APF FlowSchema that matches only
	// the leader, whose dispatched-requests counter is its request count.
	agentSA          = "kerf-agent"
	leaderSA         = "kerf-leader"
	leaderFlowSchema = "kerf-leader-scale"
	audience         = "kerf-leader"
	// podsPerNamespace sizes the namespaces: the workloads are spread over
	// ⌈N/500⌉ of them, one policy each.
	workloadsPerNamespace = 500
	// Every workload asks for baseCPU/baseMem; the wave's recommendations
	// lower the memory to waveMem.
	baseCPU, baseMem, waveMem = "100m", "256Mi", "192Mi"
	// inPlaceName is the many-replica workload whose recommendation
	// (strategy InPlace) raises its memory to inPlaceMem during the wave:
	// the leader resizes its pods through pods/resize and the harness
	// plays the kubelet's part (kubelet_test.go).
	inPlaceName, inPlaceMem = "inplace", "320Mi"
)

// sim is the simulated cluster's objects the benchmark needs later.
type sim struct {
	n, m       int
	namespaces []string
	// pods holds the UIDs of the pods of workload i, podNode their nodes
	// (index into nodes).
	pods    [][]types.UID
	podNode [][]int
	nodes   []string
	// inPlacePods and inPlaceNodes are the pods of the in-place workload
	// (in namespace ns(0)) and their nodes.
	inPlacePods  []types.UID
	inPlaceNodes []int
}

// pool runs f(i) for i in [0, n) on workers goroutines and returns the
// first error.
func pool(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

func workloadName(i int) string { return fmt.Sprintf("w-%05d", i) }
func (s *sim) ns(i int) string  { return s.namespaces[i%len(s.namespaces)] }
func nodeName(j int) string     { return fmt.Sprintf("node-%04d", j) }

// replicasOf is workload i's replicas: two for two workloads in five, one
// for the rest, 1.4 pods a workload on average (25,000 → 35,000 pods).
func replicasOf(i int) int {
	if i%5 < 2 {
		return 2
	}
	return 1
}

func quantity(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

// deployment is workload i's Deployment, one container app at
// baseCPU/baseMem (requests equal to limits).
func deployment(ns string, i int) *appsv1.Deployment {
	return deploymentNamed(ns, workloadName(i), replicasOf(i))
}

// deploymentNamed is a Deployment of replicas pods of one container app
// at baseCPU/baseMem (requests equal to limits).
func deploymentNamed(ns, name string, replicas int) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(baseCPU), corev1.ResourceMemory: resource.MustParse(baseMem)}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "app", Image: "registry.k8s.io/pause:3.10",
					Resources: corev1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()},
				}}},
			},
		},
	}
}

// recommendation lowers workload i's memory to mem with strategy Rollout.
func recommendation(ns string, i int, mem string) *v1alpha1.RightsizingRecommendation {
	return recommendationFor(ns, workloadName(i), v1alpha1.StrategyRollout, mem)
}

// recommendationFor sets Deployment name's memory to mem (cpu kept at
// baseCPU, requests equal to limits) with the given strategy.
func recommendationFor(ns, name string, strategy v1alpha1.Strategy, mem string) *v1alpha1.RightsizingRecommendation {
	return &v1alpha1.RightsizingRecommendation{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.RightsizingRecommendationSpec{
			TargetRef: v1alpha1.TargetRef{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: name},
			Strategy:  strategy,
			Containers: []v1alpha1.ContainerResources{{
				Name:     "app",
				Requests: &v1alpha1.ResourceValues{CPU: quantity(baseCPU), Memory: quantity(mem)},
				Limits:   &v1alpha1.ResourceValues{CPU: quantity(baseCPU), Memory: quantity(mem)},
			}},
		},
	}
}

// replicaSetAndPods creates dep's ReplicaSet for its current template
// (named after its generation) and pods Running on the given nodes, as
// the controller-manager, the scheduler and a kubelet would, and returns
// the pods' UIDs.
func replicaSetAndPods(ctx context.Context, c client.Client, dep *appsv1.Deployment, nodes []string) ([]types.UID, error) {
	tmpl := *dep.Spec.Template.DeepCopy()
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: fmt.Sprintf("%s-g%d", dep.Name, dep.Generation), Labels: tmpl.Labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(dep, appsv1.SchemeGroupVersion.WithKind("Deployment"))}},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To(int32(len(nodes))), Selector: dep.Spec.Selector, Template: tmpl},
	}
	if err := c.Create(ctx, rs); err != nil {
		return nil, fmt.Errorf("create ReplicaSet %s/%s: %w", rs.Namespace, rs.Name, err)
	}
	uids := make([]types.UID, 0, len(nodes))
	for k, node := range nodes {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: fmt.Sprintf("%s-%d", rs.Name, k), Labels: tmpl.Labels,
				OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(rs, appsv1.SchemeGroupVersion.WithKind("ReplicaSet"))}},
			Spec: *tmpl.Spec.DeepCopy(),
		}
		pod.Spec.NodeName = node
		if err := c.Create(ctx, pod); err != nil {
			return nil, fmt.Errorf("create pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		now := metav1.Now()
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ObservedGeneration: pod.Generation, StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Started: ptr.To(true), Image: pod.Spec.Containers[0].Image,
				ContainerID: fmt.Sprintf("containerd://%s-%d", dep.Name, k), Resources: pod.Spec.Containers[0].Resources.DeepCopy(),
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}}
		if err := c.Status().Update(ctx, pod); err != nil {
			return nil, fmt.Errorf("write the status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		uids = append(uids, pod.UID)
	}
	return uids, nil
}

// fastClient is a client of cp's administrator without client-side rate
// limiting: the harness bounds its load with its worker pools.
func fastClient(tb testing.TB, cfg *rest.Config) (client.WithWatch, kubernetes.Interface) {
	tb.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: kube.Scheme})
	require.NoError(tb, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(tb, err)
	return c, cs
}

// populate creates the simulated cluster: s.n workloads with their pods
// on s.m nodes, one policy per namespace (OOM kills ≥ 1 roll back, a
// one-hour watch), on workers goroutines. It logs the creation rate.
func populate(tb testing.TB, c client.Client, s *sim, workers int) {
	tb.Helper()
	ctx := context.Background()
	start := time.Now()
	nsCount := max(1, (s.n+workloadsPerNamespace-1)/workloadsPerNamespace)
	for k := range nsCount {
		ns := fmt.Sprintf("scale-%03d", k)
		require.NoError(tb, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		p := &v1alpha1.RightsizingPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "guard"}}
		p.Spec.Guardrails.Rollback.WatchDuration = &metav1.Duration{Duration: time.Hour}
		p.Spec.Guardrails.Rollback.OOMKills = ptr.To[int32](1)
		require.NoError(tb, c.Create(ctx, p))
		s.namespaces = append(s.namespaces, ns)
	}
	room := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("250")}
	s.nodes = make([]string, s.m)
	require.NoError(tb, pool(ctx, s.m, workers, func(ctx context.Context, j int) error {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(j)}}
		if err := c.Create(ctx, n); err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		n.Status = corev1.NodeStatus{Capacity: room, Allocatable: room,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}}
		if err := c.Status().Update(ctx, n); err != nil {
			return fmt.Errorf("write the status of node %s: %w", n.Name, err)
		}
		s.nodes[j] = n.Name
		return nil
	}))
	nodesDone := time.Now()
	s.pods, s.podNode = make([][]types.UID, s.n), make([][]int, s.n)
	var made atomic.Int64
	var podCount atomic.Int64
	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-progress.C:
				done := made.Load()
				tb.Logf("created %d/%d workloads (%.0f workloads/s)", done, s.n, float64(done)/time.Since(nodesDone).Seconds())
			case <-stop:
				return
			}
		}
	}()
	require.NoError(tb, pool(ctx, s.n, workers, func(ctx context.Context, i int) error {
		dep := deployment(s.ns(i), i)
		if err := c.Create(ctx, dep); err != nil {
			return fmt.Errorf("create Deployment %s/%s: %w", dep.Namespace, dep.Name, err)
		}
		var names []string
		for k := range replicasOf(i) {
			j := (i*2 + k) % s.m // spread: ~35 pods a node at 25,000 on 1,000
			names = append(names, s.nodes[j])
			s.podNode[i] = append(s.podNode[i], j)
		}
		uids, err := replicaSetAndPods(ctx, c, dep, names)
		if err != nil {
			return err
		}
		s.pods[i] = uids
		podCount.Add(int64(len(uids)))
		made.Add(1)
		return nil
	}))
	el := time.Since(nodesDone)
	// Per workload: Deployment, ReplicaSet, and per pod a create and a
	// status write.
	writes := float64(2*s.n) + 2*float64(podCount.Load())
	tb.Logf("populated %d namespaces, %d nodes (%v), %d workloads, %d pods in %v: %.0f workloads/s, %.0f writes/s (%d workers)",
		nsCount, s.m, nodesDone.Sub(start).Round(time.Millisecond), s.n, podCount.Load(), el.Round(time.Millisecond),
		float64(s.n)/el.Seconds(), writes/el.Seconds(), workers)
}

// populateInPlace creates the in-place workload: a Deployment of
// replicas pods in namespace ns(0), spread over the nodes one a node
// (round robin), Running as populate's are.
func populateInPlace(tb testing.TB, c client.Client, s *sim, replicas int) {
	tb.Helper()
	ctx := context.Background()
	start := time.Now()
	dep := deploymentNamed(s.ns(0), inPlaceName, replicas)
	require.NoError(tb, c.Create(ctx, dep))
	names := make([]string, replicas)
	s.inPlaceNodes = make([]int, replicas)
	for k := range replicas {
		j := (k*7 + 3) % s.m // not the probes' nodes first
		s.inPlaceNodes[k], names[k] = j, s.nodes[j]
	}
	uids, err := replicaSetAndPods(ctx, c, dep, names)
	require.NoError(tb, err)
	s.inPlacePods = uids
	tb.Logf("in-place workload %s/%s: %d pods in %v", dep.Namespace, dep.Name, replicas, time.Since(start).Round(time.Millisecond))
}

// identities creates the agents' and the leader's service accounts in
// kerfNS, binds the leader's to cluster-admin, puts the leader's requests
// in a FlowSchema of their own (so the apiserver counts them apart) and
// writes a kubeconfig with the leader's token into dir.
func identities(tb testing.TB, c client.Client, cs kubernetes.Interface, cfg *rest.Config, dir string) string {
	tb.Helper()
	ctx := context.Background()
	require.NoError(tb, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kerfNS}}))
	for _, sa := range []string{agentSA, leaderSA} {
		require.NoError(tb, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: kerfNS, Name: sa}}))
	}
	require.NoError(tb, c.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "kerf-leader-scale"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: kerfNS, Name: leaderSA}},
	}))
	// The leader's requests go to the priority level service accounts'
	// requests get by default (workload-low), under a FlowSchema that
	// matches only the leader.
	require.NoError(tb, c.Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: leaderFlowSchema},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "workload-low"},
			MatchingPrecedence:         500,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount,
					ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: kerfNS, Name: leaderSA}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
					ClusterScope: true, Namespaces: []string{"*"}}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		},
	}))
	tr, err := cs.CoreV1().ServiceAccounts(kerfNS).CreateToken(ctx, leaderSA, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](4 * 3600)}}, metav1.CreateOptions{})
	require.NoError(tb, err)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["scale"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["kerf-leader"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["scale"] = &clientcmdapi.Context{Cluster: "scale", AuthInfo: "kerf-leader"}
	kc.CurrentContext = "scale"
	path := filepath.Join(dir, "leader.kubeconfig")
	require.NoError(tb, clientcmd.WriteToFile(*kc, path))
	return path
}

// agentTokens creates one agent pod per node in kerfNS (bound to its
// node, service account agentSA) and a bound token for it with the
// leader's audience, written to a file in dir; it returns the files, by
// node.
func agentTokens(tb testing.TB, c client.Client, cs kubernetes.Interface, s *sim, dir string, workers int) []string {
	tb.Helper()
	files := make([]string, s.m)
	require.NoError(tb, pool(context.Background(), s.m, workers, func(ctx context.Context, j int) error {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: kerfNS, Name: "kerf-agent-" + s.nodes[j]},
			Spec: corev1.PodSpec{NodeName: s.nodes[j], ServiceAccountName: agentSA, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "agent", Image: "kerf.local/kerf-agent:dev"}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			return fmt.Errorf("create agent pod %s: %w", pod.Name, err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(kerfNS).CreateToken(ctx, agentSA, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](4 * 3600),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("token for agent pod %s: %w", pod.Name, err)
		}
		files[j] = filepath.Join(dir, "token-"+s.nodes[j])
		return os.WriteFile(files[j], []byte(tr.Status.Token), 0o600)
	}))
	return files
}
