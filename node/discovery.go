package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kerf-dev/kerf/cgroup"
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
func Containers(pods []*corev1.Pod, layout cgroup.Layout) ([]Container, error) {
	var out []Container
	var errs []error
	for _, p := range pods {
		if p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, statuses := range [][]corev1.ContainerStatus{p.Status.ContainerStatuses, p.Status.InitContainerStatuses} {
			for _, cs := range statuses {
				if cs.ContainerID == "" || cs.State.Running == nil {
					continue
				}
				c := Container{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Name: cs.Name,
					ContainerID: cs.ContainerID, QoS: cgroup.QoSClass(p.Status.QOSClass)}
				if err := c.ResolveCgroup(layout); err != nil {
					errs = append(errs, err)
					continue
				}
				out = append(out, c)
			}
		}
	}
	return out, errors.Join(errs...)
}

// ContainerEvent is a container restart or termination that pod discovery
// saw: through the kubelet's Pods API it is seen before the apiserver has
// the status (docs/design.md sections 3 and 5), so the agent forwards it to
// the leader.
type ContainerEvent struct {
	// Namespace and Pod are the pod's metadata.namespace and metadata.name.
	Namespace, Pod string
	// PodUID is the pod's metadata.uid.
	PodUID string
	// Container is the container's name in the pod spec.
	Container string
	// RestartCount is the container status' restartCount.
	RestartCount int32
	// Terminated is the termination first seen with this event (in
	// state.terminated or lastState.terminated); nil when only the restart
	// count changed.
	Terminated *corev1.ContainerStateTerminated
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
	Events func(ContainerEvent)

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

// RunInformer is Run with the apiserver informer on nodeName's pods.
func (d *Discovery) RunInformer(ctx context.Context, cs kubernetes.Interface, nodeName string) error {
	return d.Run(ctx, &InformerPods{Clientset: cs, NodeName: nodeName, Log: d.Log})
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
				ev := ContainerEvent{Namespace: p.Namespace, Pod: p.Name, PodUID: string(p.UID), Container: s.Name, RestartCount: s.RestartCount}
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

// InformerPods is the fallback PodSource of design section 5, for nodes
// without the kubelet's Pods API: an apiserver informer restricted to the
// node's pods with a spec.nodeName field selector.
type InformerPods struct {
	// Clientset reaches the apiserver.
	Clientset kubernetes.Interface
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
	if s.Clientset == nil {
		return errors.New("pod discovery: no apiserver client (set --kubeconfig or run in a pod)")
	}
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	f := informers.NewSharedInformerFactoryWithOptions(s.Clientset, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", s.NodeName).String()
		}))
	inf := f.Core().V1().Pods()
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
		pods, err := inf.Lister().List(labels.Everything())
		if err != nil {
			log.Error("list the node's pods", "err", err)
			return
		}
		update(pods)
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { resync(false) },
		UpdateFunc: func(any, any) { resync(false) },
		DeleteFunc: func(any) { resync(false) },
	}); err != nil {
		return fmt.Errorf("pod discovery: %w", err)
	}
	log.Info("watching the node's pods", "source", "apiserver informer", "node", s.NodeName)
	f.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		resync(true)
	}
	<-ctx.Done()
	f.Shutdown()
	return nil
}
