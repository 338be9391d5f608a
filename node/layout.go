package node

import (
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kerf-dev/kerf/cgroup"
)

// The reasons of kerf_agent_layout_problem: each a way the agent can fail
// to read the node's containers, which it says rather than report nothing.
const (
	// ProblemNoCgroups: no cgroup hierarchy with a cpu controller was
	// found (cgroup.Detect failed), so nothing is sampled.
	ProblemNoCgroups = "no_cgroups"
	// ProblemKubepodsNotFound: the pods' cgroup the layout names
	// (--cgroup-driver, --kubelet-cgroup-root) is not there.
	ProblemKubepodsNotFound = "kubepods_not_found"
	// ProblemContainersNotFound: a sampling pass found none of the
	// running containers' cgroups it looked for.
	ProblemContainersNotFound = "containers_not_found"
)

// LayoutProblems are the reasons of kerf_agent_layout_problem, each
// exported (0 or 1) from the start.
var LayoutProblems = []string{ProblemNoCgroups, ProblemKubepodsNotFound, ProblemContainersNotFound}

// newLayoutProblemGauge is kerf_agent_layout_problem, every reason at 0.
func newLayoutProblemGauge() *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kerf_agent_layout_problem",
		Help: "1 when the agent cannot read the node's containers for this reason: no_cgroups (no cgroup hierarchy with a cpu controller), kubepods_not_found (no pods' cgroup where --cgroup-driver and --kubelet-cgroup-root say), containers_not_found (a pass found none of the running containers' cgroups); the log says where it looked.",
	}, []string{"reason"})
	for _, r := range LayoutProblems {
		g.WithLabelValues(r).Set(0)
	}
	return g
}

// CheckLayout looks for the cgroup of the kubelet's pods that l names in
// h's cpu hierarchy, where the sampler reads. It returns nil when the
// directory is there, else an error naming the path it looked at and,
// when the other driver finds the pods, the flag that would.
func CheckLayout(h *cgroup.Hierarchy, l cgroup.Layout) error {
	dir, err := kubepodsPath(h, l)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err == nil {
		return nil
	} else if !os.IsNotExist(err) {
		return fmt.Errorf("the kubelet's pods' cgroup %s (--cgroup-driver=%s, --kubelet-cgroup-root=%s): %w", dir, l.Driver, rootFlag(l), err)
	}
	other := l
	other.Driver = cgroup.DriverSystemd
	if l.Driver == cgroup.DriverSystemd {
		other.Driver = cgroup.DriverCgroupfs
	}
	hint := ""
	if odir, err := kubepodsPath(h, other); err == nil {
		if _, err := os.Stat(odir); err == nil {
			hint = fmt.Sprintf(": the kubelet's pods are at %s, set --cgroup-driver=%s", odir, other.Driver)
		}
	}
	return fmt.Errorf("no cgroup of the kubelet's pods at %s (--cgroup-driver=%s, --kubelet-cgroup-root=%s)%s", dir, l.Driver, rootFlag(l), hint)
}

// kubepodsPath is the directory of the pods' cgroup l names in h's cpu
// hierarchy.
func kubepodsPath(h *cgroup.Hierarchy, l cgroup.Layout) (string, error) {
	kubepods, err := l.KubepodsDir()
	if err != nil {
		return "", err
	}
	return h.Path("cpu", kubepods)
}

func rootFlag(l cgroup.Layout) string {
	if l.Root == "" {
		return "/"
	}
	return l.Root
}
