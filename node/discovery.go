package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/cgroup"
	"github.com/kerf-dev/kerf/node/report"
)

// The pod discovery sources, the values of kerf-agent --discovery
// (docs/design.md section 5).
const (
	// DiscoveryAuto uses the kubelet's Pods API when its socket answers,
	// else the apiserver informer.
	DiscoveryAuto = "auto"
	// DiscoveryKubelet is the kubelet's local Pods API (WatchPods).
	DiscoveryKubelet = "kubelet"
	// DiscoveryAPIServer is an apiserver informer with a spec.nodeName
	// field selector.
	DiscoveryAPIServer = "apiserver"
)

// DiscoveryModes lists the values of kerf-agent --discovery.
var DiscoveryModes = []string{DiscoveryAuto, DiscoveryKubelet, DiscoveryAPIServer}

// PodSource delivers the pods of the agent's node: the kubelet's Pods API
// (KubeletPods) or an apiserver informer (InformerPods).
type PodSource interface {
	// Name is the source's --discovery value: kubelet or apiserver.
	Name() string
	// Run calls update with every pod of the node, once the source has
	// them all and again after every change, until ctx ends; it returns
	// nil then. update is called from one goroutine and must not keep the
	// slice (the pods themselves are not changed afterwards).
	Run(ctx context.Context, update func(pods []*corev1.Pod)) error
}

// Containers returns the running containers of pods (regular containers
// and running restartable init containers, the sidecars), each with its
// cgroup path under layout (docs/design.md section 5). A container that
// has not started (no containerID) is left out; one whose cgroup cannot be
// named (a runtime or UID the layout refuses) is left out and reported.
//
// A pod that sets pod-level resources (spec.resources) and runs a
// container also gets the entry v1alpha1.PodLevel, its pod cgroup: its
// cpu limit throttles there, in no container's counters.
func Containers(pods []*corev1.Pod, layout cgroup.Layout) ([]Container, error) {
	var out []Container
	var errs []error
	for _, p := range pods {
		if p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodRunning {
			continue
		}
		running := false
		for _, statuses := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
			for _, cs := range statuses {
				if cs.ContainerID == "" || cs.State.Running == nil {
					continue
				}
				running = true
				c := Container{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Name: cs.Name,
					ContainerID: cs.ContainerID, QoS: cgroup.QoSClass(p.Status.QOSClass)}
				if err := c.ResolveCgroup(layout); err != nil {
					errs = append(errs, err)
					continue
				}
				out = append(out, c)
			}
		}
		if running && p.Spec.Resources != nil && len(p.Spec.Resources.Limits)+len(p.Spec.Resources.Requests) > 0 {
			c := Container{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Name: v1alpha1.PodLevel, QoS: cgroup.QoSClass(p.Status.QOSClass)}
			dir, err := layout.PodDir(cgroup.PodCgroup{UID: c.PodUID, QoS: c.QoS})
			if err != nil {
				errs = append(errs, fmt.Errorf("cgroup of pod %s/%s: %w", p.Namespace, p.Name, err))
				continue
			}
			c.CgroupPath = dir
			out = append(out, c)
		}
	}
	return out, errors.Join(errs...)
}

// Discovery keeps the Sampler's containers in step with the pods of one
// node, from a PodSource, and reports container restarts and terminations
// (docs/design.md section 5).
type Discovery struct {
	// Layout names container cgroups (the kubelet's driver and root).
	Layout cgroup.Layout
	// Sampler receives the containers.
	Sampler *Sampler
	// Log reports containers whose cgroup cannot be named.
	Log *slog.Logger
	// Events, when set, receives every container restart and termination
	// seen after the source's first complete set of pods (that first set
	// is the baseline: what it holds happened before the agent looked).
	Events func(report.ContainerEvent)

	seen map[types.UID]map[string]containerSeen // nil until the first update
}

// containerSeen is what Discovery last saw of a container's status.
type containerSeen struct {
	restarts int32
	// terminations are the keys (terminationKey) of the terminations seen
	// in state and lastState.
	terminations [2]string
}

// Run feeds the Sampler from src until ctx ends.
func (d *Discovery) Run(ctx context.Context, src PodSource) error {
	d.Log.Info("pod discovery", "source", src.Name())
	return src.Run(ctx, d.update)
}

// update sets the Sampler's containers to those of pods and reports what
// changed in their statuses.
func (d *Discovery) update(pods []*corev1.Pod) {
	cs, err := Containers(pods, d.Layout)
	if err != nil {
		d.Log.Warn("containers without a cgroup", "err", err)
	}
	if err := d.Sampler.Set(cs); err != nil {
		d.Log.Warn("containers not sampled", "err", err)
	}
	d.diff(pods)
}

// diff reports the restarts and terminations of pods not seen before, and
// remembers pods' statuses; the first call only remembers.
func (d *Discovery) diff(pods []*corev1.Pod) {
	baseline := d.seen == nil
	next := make(map[types.UID]map[string]containerSeen, len(pods))
	for _, p := range pods {
		before := d.seen[p.UID]
		now := make(map[string]containerSeen, len(p.Status.ContainerStatuses)+len(p.Status.InitContainerStatuses))
		for _, statuses := range [][]corev1.ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses} {
			for i := range statuses {
				s := &statuses[i]
				cur := containerSeen{restarts: s.RestartCount,
					terminations: [2]string{terminationKey(s.State.Terminated), terminationKey(s.LastTerminationState.Terminated)}}
				now[s.Name] = cur
				if baseline || d.Events == nil {
					continue
				}
				old := before[s.Name]
				ev := report.ContainerEvent{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Container: s.Name, RestartCount: s.RestartCount}
				for j, t := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
					k := cur.terminations[j]
					if k != "" && k != old.terminations[0] && k != old.terminations[1] {
						ev.Terminated = t
					}
				}
				if ev.Terminated != nil || cur.restarts != old.restarts {
					d.Events(ev)
				}
			}
		}
		next[p.UID] = now
	}
	d.seen = next
}

// terminationKey identifies one termination of a container: the run's
// container id and when it finished; "" for none.
func terminationKey(t *corev1.ContainerStateTerminated) string {
	if t == nil {
		return ""
	}
	return t.ContainerID + "@" + t.FinishedAt.UTC().Format(time.RFC3339Nano)
}

// podScheme knows the core v1 types alone: the pod informer needs no other
// API group.
var podScheme = runtime.NewScheme()

func init() {
	if err := corev1.AddToScheme(podScheme); err != nil {
		panic(fmt.Sprintf("register core v1 types: %v", err))
	}
}

// NewPodClient returns a client of the apiserver's core v1 API (protobuf,
// JSON as a fallback) for InformerPods. Unlike client-go's clientset it
// links no other API group into kerf-agent: with the clientset's typed
// clients, apply configurations and scheme registrations of every group
// the binary was 61.5 MB instead of 24.9 MB, and its RSS on a node of 330
// containers 57 MiB instead of 33 MiB (docs/agent.md, Budget).
func NewPodClient(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(podScheme).WithoutConversion()
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("apiserver client: %w", err)
	}
	return client, nil
}

// trimPod returns the part of p that discovery reads (Containers,
// Discovery's diff, ContainerEvent): its identity, deletion, pod-level
// resources, phase, QoS class and each container's name, id, running and
// terminated states (less the termination message) and restart count. The pod caches hold
// trimmed pods: a whole pod with its managed fields is several KiB.
func trimPod(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name, UID: p.UID,
			ResourceVersion: p.ResourceVersion, DeletionTimestamp: p.DeletionTimestamp},
		Spec: corev1.PodSpec{Resources: p.Spec.Resources},
		Status: corev1.PodStatus{Phase: p.Status.Phase, QOSClass: p.Status.QOSClass,
			ContainerStatuses:     trimStatuses(p.Status.ContainerStatuses),
			InitContainerStatuses: trimStatuses(p.Status.InitContainerStatuses)},
	}
}

func trimStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, s := range in {
		out[i] = corev1.ContainerStatus{Name: s.Name, ContainerID: s.ContainerID, RestartCount: s.RestartCount,
			State:                corev1.ContainerState{Running: s.State.Running, Terminated: trimTerminated(s.State.Terminated)},
			LastTerminationState: corev1.ContainerState{Terminated: trimTerminated(s.LastTerminationState.Terminated)}}
	}
	return out
}

func trimTerminated(t *corev1.ContainerStateTerminated) *corev1.ContainerStateTerminated {
	if t == nil {
		return nil
	}
	c := *t
	c.Message = ""
	return &c
}

// ErrPodsForbidden is wrapped by InformerPods.Run's error when the
// apiserver refuses the agent's list of pods: the shipped RBAC grants it
// only through ClusterRole kerf-agent-pods, bound on request
// (docs/install.md, "The agent").
var ErrPodsForbidden = errors.New("the agent may not list pods: bind ClusterRole kerf-agent-pods to its service account " +
	"(Helm: agent.podsFromAPIServer=true; kustomize: the component manifests/agent-pods), " +
	"or let it reach the kubelet's Pods API (--pods-api-socket)")

// InformerPods is the fallback PodSource of design section 5, for nodes
// without the kubelet's Pods API: an apiserver informer restricted to the
// node's pods with a spec.nodeName field selector. Its cache holds the
// pods trimmed to what discovery reads. Its RBAC cannot be narrowed to the
// node: the field selector bounds what it caches, not what it may read.
type InformerPods struct {
	// Client reaches the apiserver's core v1 API (NewPodClient).
	Client rest.Interface
	// NodeName is the node whose pods are watched.
	NodeName string
	// Log reports failures to list the informer's cache.
	Log *slog.Logger
}

// Name implements PodSource.
func (*InformerPods) Name() string { return DiscoveryAPIServer }

// Run implements PodSource.
func (s *InformerPods) Run(ctx context.Context, update func([]*corev1.Pod)) error {
	if s.NodeName == "" {
		return errors.New("pod discovery: the node name is empty (set --node-name or NODE_NAME)")
	}
	if s.Client == nil {
		return errors.New("pod discovery: no apiserver client (set --kubeconfig or run in a pod)")
	}
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", s.NodeName).String()
	params := runtime.NewParameterCodec(podScheme)
	if err := s.mayList(ctx, selector, params); err != nil {
		return err
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			pods := &corev1.PodList{}
			err := s.Client.Get().Resource("pods").VersionedParams(&o, params).Do(ctx).Into(pods)
			return pods, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			o.Watch = true
			req := s.Client.Get().Resource("pods").VersionedParams(&o, params)
			if o.TimeoutSeconds != nil {
				req = req.Timeout(time.Duration(*o.TimeoutSeconds) * time.Second)
			}
			return req.Watch(ctx)
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(lw, &corev1.Pod{}, cache.SharedIndexInformerOptions{ResyncPeriod: 10 * time.Minute})
	if err := inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok {
			return trimPod(p), nil
		}
		return obj, nil
	}); err != nil {
		return fmt.Errorf("pod discovery: %w", err)
	}
	// update sees the node's pods only once the cache has them all, and
	// one call at a time.
	var mu sync.Mutex
	synced := false
	resync := func(initial bool) {
		mu.Lock()
		defer mu.Unlock()
		if initial {
			synced = true
		} else if !synced {
			return
		}
		objs := inf.GetStore().List()
		pods := make([]*corev1.Pod, 0, len(objs))
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok {
				pods = append(pods, p)
			}
		}
		update(pods)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { resync(false) },
		UpdateFunc: func(any, any) { resync(false) },
		DeleteFunc: func(any) { resync(false) },
	}); err != nil {
		return fmt.Errorf("pod discovery: %w", err)
	}
	log.Info("watching the node's pods", "source", "apiserver informer", "node", s.NodeName)
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		resync(true)
	}
	<-ctx.Done()
	<-done
	return nil
}

// mayList lists one of the node's pods from the apiserver's cache and
// returns an error wrapping ErrPodsForbidden when RBAC refuses it, so the
// agent stops with the fix in its log instead of an informer retrying a
// 403 forever. Other errors are left to the informer's retries.
func (s *InformerPods) mayList(ctx context.Context, selector string, params runtime.ParameterCodec) error {
	o := metav1.ListOptions{FieldSelector: selector, ResourceVersion: "0", Limit: 1}
	err := s.Client.Get().Resource("pods").VersionedParams(&o, params).Do(ctx).Error()
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("node %s: %w: %w", s.NodeName, ErrPodsForbidden, err)
	}
	return nil
}
