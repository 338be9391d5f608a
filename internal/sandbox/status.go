package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ComponentState is one component as Status found it.
type ComponentState struct {
	// Name is the component's name (etcd, kubelet, ...).
	Name string
	// PID is the process in its PID file, 0 when there is none.
	PID int
	// Running says PID is alive and is that component of this sandbox.
	Running bool
	// Log is the component's log file.
	Log string
}

// State is what Status reports about a sandbox.
type State struct {
	// StateDir is the sandbox's state directory.
	StateDir string
	// Exists says the state directory exists.
	Exists bool
	// NodeName is the node's name as Up recorded it.
	NodeName string
	// Components lists every component, in start order.
	Components []ComponentState
	// NodeReady says the node's Ready condition is True.
	NodeReady bool
	// NodeMessage says why the node is not Ready, or why that is unknown.
	NodeMessage string
	// Kubeconfig is the administrator's kubeconfig, empty until Up wrote it.
	Kubeconfig string
	// PodsAPIMounted says the kubelet's Pods API directory is bind-mounted
	// on HostPodsAPIDir.
	PodsAPIMounted bool
	// VMNode is the VM node's name, empty when the sandbox has none; its
	// QEMU is the component "vm".
	VMNode string
	// VMNodeReady says the VM node's Ready condition is True.
	VMNodeReady bool
	// VMNodeMessage says why the VM node is not Ready.
	VMNodeMessage string
}

// Running counts the components that run.
func (s *State) Running() int {
	n := 0
	for _, c := range s.Components {
		if c.Running {
			n++
		}
	}
	return n
}

// Healthy says every component runs, the node is Ready and the admin
// kubeconfig exists: the sandbox can be used as is.
func (s *State) Healthy() bool {
	return s.Running() == len(s.Components) && s.NodeReady && s.Kubeconfig != "" && (s.VMNode == "" || s.VMNodeReady)
}

// String renders the state for people, one line per component.
func (s *State) String() string {
	var b strings.Builder
	if !s.Exists {
		fmt.Fprintf(&b, "no sandbox at %s\n", s.StateDir)
		return b.String()
	}
	fmt.Fprintf(&b, "sandbox at %s (node %s)\n", s.StateDir, s.NodeName)
	for _, c := range s.Components {
		switch {
		case c.Running:
			fmt.Fprintf(&b, "  %-24s running (pid %d)\n", c.Name, c.PID)
		case c.PID != 0:
			fmt.Fprintf(&b, "  %-24s not running (stale pid %d; log %s)\n", c.Name, c.PID, c.Log)
		default:
			fmt.Fprintf(&b, "  %-24s not running\n", c.Name)
		}
	}
	if s.NodeReady {
		fmt.Fprintf(&b, "  %-24s Ready\n", "node "+s.NodeName)
	} else {
		fmt.Fprintf(&b, "  %-24s not Ready: %s\n", "node "+s.NodeName, s.NodeMessage)
	}
	if s.VMNode != "" {
		if s.VMNodeReady {
			fmt.Fprintf(&b, "  %-24s Ready (cgroup v2, in QEMU; console %s)\n", "node "+s.VMNode, filepath.Join(s.StateDir, "logs", vmComponent+".log"))
		} else {
			fmt.Fprintf(&b, "  %-24s not Ready: %s\n", "node "+s.VMNode, s.VMNodeMessage)
		}
	}
	if s.PodsAPIMounted {
		fmt.Fprintf(&b, "  %-24s %s\n", "pods API", filepath.Join(HostPodsAPIDir, podsAPISocketName))
	}
	if s.Kubeconfig != "" {
		fmt.Fprintf(&b, "  %-24s %s\n", "kubeconfig", s.Kubeconfig)
	}
	if s.Healthy() {
		b.WriteString("healthy\n")
	} else {
		b.WriteString("not healthy; 'kerf-sandbox down' removes it\n")
	}
	return b.String()
}

// Status reports each component of the sandbox at stateDir (running and
// its PID, or not), whether the node is Ready, and the kubeconfig path. A
// missing sandbox is not an error: State.Exists is false.
func Status(ctx context.Context, stateDir string) (*State, error) {
	if !filepath.IsAbs(stateDir) {
		return nil, fmt.Errorf("state dir %q is not an absolute path", stateDir)
	}
	l := layout{state: filepath.Clean(stateDir)}
	s := &State{StateDir: l.state, NodeName: recordedNodeName(l)}
	if _, err := os.Stat(l.state); err != nil {
		return s, nil
	}
	s.Exists = true
	names := componentNames
	if raw, err := os.ReadFile(l.marker(markerVMNode)); err == nil {
		s.VMNode = strings.TrimSpace(string(raw))
		names = append(names[:len(names):len(names)], vmComponent)
	}
	for _, name := range names {
		pid := readPID(l, name)
		s.Components = append(s.Components, ComponentState{
			Name: name, PID: pid, Log: l.logFile(name),
			Running: owned(pid, binaryName(name), l.state),
		})
	}
	if _, err := os.Stat(l.adminKubeconfig()); err == nil {
		s.Kubeconfig = l.adminKubeconfig()
	}
	if mps, err := mountsUnder(HostPodsAPIDir); err == nil && len(mps) > 0 {
		s.PodsAPIMounted = true
	}
	s.NodeReady, s.NodeMessage = nodeReady(ctx, l, s.NodeName)
	if s.VMNode != "" {
		s.VMNodeReady, s.VMNodeMessage = nodeReady(ctx, l, s.VMNode)
	}
	return s, nil
}

// binaryName is the executable name a component's process runs.
func binaryName(component string) string {
	if component == vmComponent {
		return qemuBinary
	}
	return component // every other component's binary carries its name
}

// recordedNodeName is the node name Up recorded, or the default.
func recordedNodeName(l layout) string {
	raw, err := os.ReadFile(l.marker("node-name"))
	if err != nil || strings.TrimSpace(string(raw)) == "" {
		return DefaultNodeName
	}
	return strings.TrimSpace(string(raw))
}

// nodeReady asks the apiserver for the node's Ready condition.
func nodeReady(ctx context.Context, l layout, node string) (bool, string) {
	if _, err := os.Stat(l.kubeconfigFor("admin")); err != nil {
		return false, "no admin kubeconfig yet"
	}
	c, err := connect(l, node)
	if err != nil {
		return false, err.Error()
	}
	c.Config.Timeout = 5 * time.Second
	cs, err := clientsetFor(c)
	if err != nil {
		return false, err.Error()
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return true, ""
			}
			return false, cond.Reason + ": " + cond.Message
		}
	}
	return false, "no Ready condition yet"
}
