package scenario

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The ports manifests/ gives Kerf's metrics endpoints.
const (
	AgentMetricsPort  = 9400
	LeaderMetricsPort = 9401
)

// Series is one sample of a scraped metric family.
type Series struct {
	Labels map[string]string
	Value  float64
}

// Scrape reads a /metrics page as the scenarios' reader (ReaderToken)
// and returns its families by name.
func (e *Env) Scrape(ctx context.Context, url string) (map[string][]Series, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// Kerf's /metrics want a token allowed to get /metrics.
	if err := e.Authorize(req); err != nil {
		return nil, err
	}
	resp, err := e.kerfClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	out := make(map[string][]Series, len(families))
	for name, f := range families {
		for _, m := range f.GetMetric() {
			s := Series{Labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			s.Value = value(f.GetType(), m)
			out[name] = append(out[name], s)
		}
	}
	return out, nil
}

func value(t dto.MetricType, m *dto.Metric) float64 {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// Sum adds the values of the family's series whose labels include match.
func Sum(families map[string][]Series, name string, match map[string]string) float64 {
	var sum float64
	for _, s := range families[name] {
		ok := true
		for k, v := range match {
			if s.Labels[k] != v {
				ok = false
				break
			}
		}
		if ok {
			sum += s.Value
		}
	}
	return sum
}

// KerfPods returns the running pods of Kerf's component ("kerf-agent" or
// "kerf-leader"), found by the owner name prefix manifests/ gives them.
func (e *Env) KerfPods(ctx context.Context, component string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := e.Client.List(ctx, &list, client.InNamespace(KerfNamespace)); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if strings.HasPrefix(p.Name, component+"-") && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && p.Status.PodIP != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

// AgentMetrics scrapes the agent of this machine's node: on the one-node
// sandbox, the agent. AgentMetricsOn picks another node's.
func (e *Env) AgentMetrics(ctx context.Context) (map[string][]Series, error) {
	return e.AgentMetricsOn(ctx, "")
}

// AgentMetricsOn scrapes the agent on node, the one that watches the pods
// there (the DaemonSet runs one per node); an empty node means this
// machine's (AgentPod). An agent that does not answer is asked again for
// up to agentScrapeWait: its container may be restarting.
func (e *Env) AgentMetricsOn(ctx context.Context, node string) (map[string][]Series, error) {
	deadline := time.Now().Add(agentScrapeWait)
	for {
		p, err := e.AgentPod(ctx, node)
		if err == nil {
			var out map[string][]Series
			if out, err = e.Scrape(ctx, fmt.Sprintf("https://%s:%d/metrics", p.Status.PodIP, AgentMetricsPort)); err == nil {
				return out, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%w (for %s; %s)", err, agentScrapeWait, agentState(p))
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(time.Second):
		}
	}
}

// agentScrapeWait is how long AgentMetricsOn asks an agent that does not
// answer again: a restarted agent on the emulated VM node took 45 s to
// answer beside a loaded machine's tests.
const agentScrapeWait = 3 * time.Minute

// agentState says, for an error, whether the agent's pod p is ready and
// why its container last stopped.
func agentState(p *corev1.Pod) string {
	if p == nil {
		return "no agent pod"
	}
	s := fmt.Sprintf("pod %s on %s", p.Name, p.Spec.NodeName)
	for _, cs := range p.Status.ContainerStatuses {
		s += fmt.Sprintf(": ready %t, %d restarts", cs.Ready, cs.RestartCount)
		if t := cs.LastTerminationState.Terminated; t != nil {
			s += ", last " + stopped(t)
		}
	}
	return s
}

// stopped says when and how a container instance stopped.
func stopped(t *corev1.ContainerStateTerminated) string {
	return fmt.Sprintf("stopped %s (exit %d, %s)", t.FinishedAt.Format(time.RFC3339), t.ExitCode, t.Reason)
}

// AgentPod returns the running kerf-agent pod on node. An empty node
// means this machine's: the first agent that is not on the VM node.
func (e *Env) AgentPod(ctx context.Context, node string) (*corev1.Pod, error) {
	pods, err := e.KerfPods(ctx, "kerf-agent")
	if err != nil {
		return nil, err
	}
	if len(pods) == 0 {
		return nil, fmt.Errorf("no running kerf-agent pod in %s", KerfNamespace)
	}
	var others []string
	for i := range pods {
		p := &pods[i]
		if node != "" && p.Spec.NodeName == node {
			return p, nil
		}
		if node == "" {
			vm, err := e.onVMNode(ctx, p.Spec.NodeName)
			if err != nil {
				return nil, err
			}
			if !vm {
				return p, nil
			}
		}
		others = append(others, p.Name+" on "+p.Spec.NodeName)
	}
	where := "node " + node
	if node == "" {
		where = "a node other than the VM node"
	}
	return nil, fmt.Errorf("no running kerf-agent pod on %s in %s (running: %s)", where, KerfNamespace, strings.Join(others, ", "))
}

// LeaderPod returns the replica that holds the Lease: the one whose pod
// carries the label kerf.dev/leader=true (cluster.LeaderPodLabel), as the
// kerf-leader Service selects it.
func (e *Env) LeaderPod(ctx context.Context) (*corev1.Pod, error) {
	pods, err := e.KerfPods(ctx, "kerf-leader")
	if err != nil {
		return nil, err
	}
	for i := range pods {
		if pods[i].Labels[leaderLabel] == "true" && podReady(pods[i].Status.Conditions) {
			return &pods[i], nil
		}
	}
	return nil, fmt.Errorf("no ready kerf-leader pod labeled %s=true in %s (%d running)", leaderLabel, KerfNamespace, len(pods))
}

// leaderLabel is cluster.LeaderPodLabel (not imported: the scenarios see
// Kerf from outside, as a user does).
const leaderLabel = "kerf.dev/leader"

// LeaderURL is the base URL of the leading replica's metrics and audit API, waiting up to a minute for one during a handover.
func (e *Env) LeaderURL(ctx context.Context) (string, error) {
	// A handover (a test kills the leader while others run) leaves no
	// ready leader for a few seconds: wait for the next one.
	var p *corev1.Pod
	err := Poll(ctx, time.Minute, 250*time.Millisecond, "a ready elected kerf-leader", func(ctx context.Context) (bool, error) {
		var err error
		p, err = e.LeaderPod(ctx)
		return err == nil, nil
	})
	if err != nil {
		if _, lerr := e.LeaderPod(ctx); lerr != nil {
			err = fmt.Errorf("%w: %w", err, lerr)
		}
		return "", err
	}
	return fmt.Sprintf("https://%s:%d", p.Status.PodIP, LeaderMetricsPort), nil
}
