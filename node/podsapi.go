package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podsv1alpha1 "k8s.io/kubelet/pkg/apis/pods/v1alpha1"
)

// DefaultPodsAPISocket is where the kubelet serves its local Pods API with
// the default --root-dir (<root-dir>/pods-api/pods-api.sock; feature gate
// PodsAPI, beta and on by default in Kubernetes 1.37).
const DefaultPodsAPISocket = "/var/lib/kubelet/pods-api/pods-api.sock"

// Defaults of KubeletPods.
const (
	// DefaultPodsAPIProbeTimeout bounds ProbePodsAPI.
	DefaultPodsAPIProbeTimeout = 2 * time.Second
	// DefaultPodsAPIMinBackoff is the first wait before watching again.
	DefaultPodsAPIMinBackoff = 200 * time.Millisecond
	// DefaultPodsAPIMaxBackoff is the longest wait before watching again.
	DefaultPodsAPIMaxBackoff = 10 * time.Second
)

// stableWatch is how long a watch must last for the backoff to start again
// from its minimum.
const stableWatch = 10 * time.Second

// maxPodsAPIMessage bounds one message from the kubelet: one serialized pod
// (WatchPods) or all of them (ListPods); gRPC's default of 4 MiB is too
// small for ListPods on a full node.
const maxPodsAPIMessage = 64 << 20

// dialPodsAPI returns a client of the Pods API on the unix socket. No
// connection is made until the first call.
func dialPodsAPI(socket string) (*grpc.ClientConn, error) {
	if socket == "" {
		return nil, errors.New("--pods-api-socket: empty path")
	}
	cc, err := grpc.NewClient("unix://"+socket,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxPodsAPIMessage)))
	if err != nil {
		return nil, fmt.Errorf("--pods-api-socket %s: %w", socket, err)
	}
	return cc, nil
}

// ProbePodsAPI says whether the kubelet's Pods API answers on socket within
// timeout (DefaultPodsAPIProbeTimeout when zero): a GetPod of no pod must
// come back NotFound, or FailedPrecondition while the kubelet starts. The
// error says why not.
func ProbePodsAPI(ctx context.Context, socket string, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultPodsAPIProbeTimeout
	}
	if _, err := os.Stat(socket); err != nil {
		return fmt.Errorf("kubelet Pods API: %w", err)
	}
	cc, err := dialPodsAPI(socket)
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err = podsv1alpha1.NewPodsClient(cc).GetPod(ctx, &podsv1alpha1.GetPodRequest{PodUID: "kerf-probe"}, grpc.WaitForReady(true))
	switch status.Code(err) {
	case codes.OK, codes.NotFound, codes.FailedPrecondition, codes.ResourceExhausted:
		return nil
	}
	return fmt.Errorf("kubelet Pods API on %s: %w", socket, err)
}

// KubeletPods is the PodSource of design section 5: the kubelet's local
// Pods API (k8s.io/kubelet/pkg/apis/pods/v1alpha1) on a unix socket. It
// puts no load on the apiserver and sees status changes before the
// apiserver does. WatchPods sends every pod the kubelet manages, then
// INITIAL_SYNC_COMPLETE, then changes; that initial burst is the list, so
// a reconnect (the kubelet restarted, or dropped a slow watcher) starts
// from a full set again and pods gone meanwhile are dropped.
type KubeletPods struct {
	// Socket is the Pods API's unix socket, DefaultPodsAPISocket.
	Socket string
	// Log reports watches that end.
	Log *slog.Logger
	// MinBackoff and MaxBackoff bound the jittered wait between watches;
	// zero means DefaultPodsAPIMinBackoff and DefaultPodsAPIMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
}

// Name implements PodSource.
func (*KubeletPods) Name() string { return DiscoveryKubelet }

// Run implements PodSource: it watches until ctx ends, watching again with
// a jittered exponential backoff whenever a watch fails.
func (k *KubeletPods) Run(ctx context.Context, update func([]*corev1.Pod)) error {
	log := k.Log
	if log == nil {
		log = slog.Default()
	}
	minB, maxB := cmpOrDuration(k.MinBackoff, DefaultPodsAPIMinBackoff), cmpOrDuration(k.MaxBackoff, DefaultPodsAPIMaxBackoff)
	if maxB < minB {
		return fmt.Errorf("kubelet Pods API: MaxBackoff %v is less than MinBackoff %v", maxB, minB)
	}
	cc, err := dialPodsAPI(k.Socket)
	if err != nil {
		return err
	}
	defer func() { _ = cc.Close() }()
	client := podsv1alpha1.NewPodsClient(cc)
	log.Info("watching the node's pods", "source", "kubelet Pods API", "socket", k.Socket)
	backoff := minB
	for {
		start := time.Now()
		err := k.watch(ctx, client, update)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) >= stableWatch {
			backoff = minB
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		log.Warn("kubelet Pods API watch ended", "socket", k.Socket, "err", err, "retryIn", wait)
		backoff = min(2*backoff, maxB)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// watch runs one WatchPods call until it fails or ctx ends.
func (k *KubeletPods) watch(ctx context.Context, client podsv1alpha1.PodsClient, update func([]*corev1.Pod)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WaitForReady: a kubelet restarting has no socket for a moment; the
	// call waits for it rather than failing at once.
	st, err := client.WatchPods(ctx, &podsv1alpha1.WatchPodsRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return fmt.Errorf("watch pods: %w", err)
	}
	pods := map[types.UID]*corev1.Pod{}
	synced := false
	for {
		ev, err := st.Recv()
		if err != nil {
			return fmt.Errorf("watch pods: %w", err)
		}
		switch ev.GetType() {
		case podsv1alpha1.EventType_ADDED, podsv1alpha1.EventType_MODIFIED:
			p, err := decodePod(ev.GetPod())
			if err != nil {
				return fmt.Errorf("watch pods: %s event: %w", ev.GetType(), err)
			}
			pods[p.UID] = trimPod(p)
		case podsv1alpha1.EventType_DELETED:
			p, err := decodePod(ev.GetPod())
			if err != nil {
				return fmt.Errorf("watch pods: DELETED event: %w", err)
			}
			delete(pods, p.UID)
		case podsv1alpha1.EventType_INITIAL_SYNC_COMPLETE:
			synced = true
		default:
			continue
		}
		if synced {
			update(podList(pods))
		}
	}
}

// decodePod decodes a pod as the kubelet sends it: v1.Pod's protobuf
// encoding (v1.Pod#Marshal).
func decodePod(data []byte) (*corev1.Pod, error) {
	if len(data) == 0 {
		return nil, errors.New("no pod in the event")
	}
	p := &corev1.Pod{}
	if err := p.Unmarshal(data); err != nil {
		return nil, fmt.Errorf("decode pod: %w", err)
	}
	if p.UID == "" {
		return nil, fmt.Errorf("pod %s/%s: no metadata.uid", p.Namespace, p.Name)
	}
	return p, nil
}

// podList returns the pods ordered by UID.
func podList(pods map[types.UID]*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(pods))
	for _, p := range pods {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *corev1.Pod) int { return strings.Compare(string(a.UID), string(b.UID)) })
	return out
}

func cmpOrDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}
