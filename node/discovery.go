package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kerf-dev/kerf/cgroup"
)

// Containers returns the running containers of pods, each with its cgroup
// path under layout (docs/design.md section 5). A container that has not
// started (no containerID) is left out; one whose cgroup cannot be named
// (a runtime or UID the layout refuses) is left out and reported.
func Containers(pods []*corev1.Pod, layout cgroup.Layout) ([]Container, error) {
	var out []Container
	var errs []error
	for _, p := range pods {
		if p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, cs := range p.Status.ContainerStatuses {
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
	return out, errors.Join(errs...)
}

// Discovery keeps the Sampler's containers in step with the pods of one
// node. RunInformer is the fallback of design section 5, for nodes
// without the kubelet's Pods API: an apiserver informer restricted to the
// node's pods with a spec.nodeName field selector.
type Discovery struct {
	// Layout names container cgroups (the kubelet's driver and root).
	Layout cgroup.Layout
	// Sampler receives the containers.
	Sampler *Sampler
	// Log reports containers whose cgroup cannot be named.
	Log *slog.Logger
}

// RunInformer watches the pods bound to nodeName until ctx ends, setting
// the Sampler's containers on every change.
func (d *Discovery) RunInformer(ctx context.Context, cs kubernetes.Interface, nodeName string) error {
	if nodeName == "" {
		return errors.New("pod discovery: the node name is empty (set --node-name or NODE_NAME)")
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		}))
	inf := f.Core().V1().Pods()
	sync := func() {
		pods, err := inf.Lister().List(labels.Everything())
		if err != nil {
			d.Log.Error("list the node's pods", "err", err)
			return
		}
		cs, err := Containers(pods, d.Layout)
		if err != nil {
			d.Log.Warn("containers without a cgroup", "err", err)
		}
		if err := d.Sampler.Set(cs); err != nil {
			d.Log.Warn("containers not sampled", "err", err)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { sync() },
		UpdateFunc: func(any, any) { sync() },
		DeleteFunc: func(any) { sync() },
	}); err != nil {
		return fmt.Errorf("pod discovery: %w", err)
	}
	d.Log.Info("pod discovery", "source", "apiserver informer", "node", nodeName)
	f.Start(ctx.Done())
	<-ctx.Done()
	f.Shutdown()
	return nil
}
