package chartrun

// What a kubelet would do for the chart's leader pod, done by the test:
// no kubelet runs here. The pod is created from the installed
// Deployment's template, and its one container runs as a child process
// with the template's args and env, its volumes written to a directory,
// its ports on free loopback addresses, and a token bound to the pod.

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"github.com/kerf-dev/kerf/internal/kube"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/freeport"
	"github.com/kerf-dev/kerf/test/kubetest"
)

// buildLeader builds kerf-leader with hack/build.sh, as its image has
// it, into dir and returns its path.
func buildLeader(t *testing.T, dir string) string {
	t.Helper()
	repo, err := kube.RepoRoot()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(repo, "hack", "build.sh"), dir, "kerf-leader")
	cmd.Dir = repo
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "hack/build.sh kerf-leader: %s", out)
	return filepath.Join(dir, "kerf-leader")
}

// podProcess is one pod of a Deployment whose container runs as a child
// process of the test.
type podProcess struct {
	pod     *corev1.Pod
	cmd     *exec.Cmd
	args    []string
	logPath string
	done    chan struct{}
	err     error
}

// runPod creates a pod of the Deployment's template and runs bin as its
// one container, doing what a kubelet would:
//
//   - args and env are the template's, resolved as a kubelet resolves
//     them: $(VAR), fieldRef, resourceFieldRef, secretKeyRef,
//     configMapKeyRef;
//   - each volumeMount is a directory under a temporary one, holding the
//     ConfigMap or Secret its volume names; an arg under a mountPath is
//     moved there;
//   - each containerPort is a free loopback address; an arg ":port" is
//     moved there, since the process shares the test's network;
//   - the in-cluster token path is not the process's to write, so
//     --kubeconfig is added, with a token of the pod's service account
//     bound to the pod, as the kubelet projects it.
func runPod(t *testing.T, cp *controlplane.ControlPlane, dep *appsv1.Deployment, bin string) *podProcess {
	t.Helper()
	ctx := context.Background()
	tmpl := dep.Spec.Template
	require.Len(t, tmpl.Spec.Containers, 1, "the template's containers")
	ctr := tmpl.Spec.Containers[0]
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: dep.Namespace, Name: fmt.Sprintf("%s-g%d", dep.Name, dep.Generation),
			Labels: tmpl.Labels, Annotations: tmpl.Annotations},
		Spec: *tmpl.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = kubetest.Node(t, cp.Client)
	require.NoError(t, cp.Client.Create(ctx, pod), "create the leader's pod")

	dir := t.TempDir()
	vols := map[string]corev1.Volume{}
	for _, v := range tmpl.Spec.Volumes {
		vols[v.Name] = v
	}
	mounts := map[string]string{} // mountPath → its directory here
	for _, m := range ctr.VolumeMounts {
		v, ok := vols[m.Name]
		require.True(t, ok, "volumeMount %s names no volume", m.Name)
		local := filepath.Join(dir, "mounts", m.MountPath)
		writeVolume(t, cp, dep.Namespace, v, local)
		mounts[m.MountPath] = local
	}
	ports := map[string]string{} // ":port" → a free loopback address
	for i, addr := range freeport.Addrs(t, len(ctr.Ports)) {
		ports[fmt.Sprintf(":%d", ctr.Ports[i].ContainerPort)] = addr
	}

	env := resolveEnv(t, cp, pod, &ctr)
	vars := map[string]string{}
	for _, e := range env {
		name, value, _ := strings.Cut(e, "=")
		vars[name] = value
	}
	args := append(append([]string(nil), ctr.Command...), ctr.Args...)
	for i, a := range args {
		a = expand(a, vars)
		flag, value, ok := strings.Cut(a, "=")
		if ok {
			if addr, ok := ports[value]; ok {
				value = addr
			}
			for path, local := range mounts {
				if value == path || strings.HasPrefix(value, path+"/") {
					value = local + strings.TrimPrefix(value, path)
				}
			}
			a = flag + "=" + value
		}
		args[i] = a
	}
	for _, a := range args {
		require.False(t, strings.HasPrefix(a, "--kubeconfig"), "the template sets --kubeconfig: %s", a)
	}
	args = append(args, "--kubeconfig="+podKubeconfig(t, cp, pod, dir))

	logPath := filepath.Join(dir, "container.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	// A container's environment is its env only, PATH aside.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	require.NoError(t, cmd.Start())
	p := &podProcess{pod: pod, cmd: cmd, args: args, logPath: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s %v; its log:\n%s", pod.Name, args, tail(string(b), 6000))
		}
	})
	return p
}

// stop sends SIGTERM, as the kubelet does, and waits (SIGKILL after the
// 30 s the chart gives the pod), then deletes the pod.
func (p *podProcess) stop(t *testing.T) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			t.Logf("%s did not stop in 30s: SIGKILL", p.pod.Name)
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// alive fails t with the log's tail when the process has exited.
func (p *podProcess) alive(t *testing.T) {
	t.Helper()
	select {
	case <-p.done:
		b, _ := os.ReadFile(p.logPath)
		t.Fatalf("%s exited (%v); log tail:\n%s", p.pod.Name, p.err, tail(string(b), 6000))
	default:
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// writeVolume writes the ConfigMap or Secret volume v of namespace ns
// into dir, one file per key (or per item), as the kubelet does.
func writeVolume(t *testing.T, cp *controlplane.ControlPlane, ns string, v corev1.Volume, dir string) {
	t.Helper()
	ctx := context.Background()
	var data map[string][]byte
	var items []corev1.KeyToPath
	switch {
	case v.ConfigMap != nil:
		cm, err := cp.Clientset.CoreV1().ConfigMaps(ns).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
		require.NoError(t, err, "volume %s", v.Name)
		data = map[string][]byte{}
		for k, s := range cm.Data {
			data[k] = []byte(s)
		}
		items = v.ConfigMap.Items
	case v.Secret != nil:
		s, err := cp.Clientset.CoreV1().Secrets(ns).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
		require.NoError(t, err, "volume %s", v.Name)
		data, items = s.Data, v.Secret.Items
	default:
		t.Fatalf("volume %s: only ConfigMap and Secret volumes are written here", v.Name)
	}
	if len(items) == 0 {
		for k := range data {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, it := range items {
		b, ok := data[it.Key]
		require.True(t, ok, "volume %s has no key %s", v.Name, it.Key)
		path := filepath.Join(dir, it.Path)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o700))
		require.NoError(t, os.WriteFile(path, b, 0o600))
	}
}

// resolveEnv is the container's environment as NAME=value, resolved as
// a kubelet resolves it for pod.
func resolveEnv(t *testing.T, cp *controlplane.ControlPlane, pod *corev1.Pod, ctr *corev1.Container) []string {
	t.Helper()
	ctx := context.Background()
	vars := map[string]string{}
	var out []string
	for _, e := range ctr.Env {
		value := expand(e.Value, vars)
		if f := e.ValueFrom; f != nil {
			switch {
			case f.FieldRef != nil:
				switch f.FieldRef.FieldPath {
				case "metadata.name":
					value = pod.Name
				case "metadata.namespace":
					value = pod.Namespace
				default:
					t.Fatalf("env %s: fieldRef %s is not resolved here", e.Name, f.FieldRef.FieldPath)
				}
			case f.ResourceFieldRef != nil:
				value = resourceField(t, ctr, e.Name, f.ResourceFieldRef)
			case f.SecretKeyRef != nil:
				s, err := cp.Clientset.CoreV1().Secrets(pod.Namespace).Get(ctx, f.SecretKeyRef.Name, metav1.GetOptions{})
				require.NoError(t, err, "env %s", e.Name)
				value = string(s.Data[f.SecretKeyRef.Key])
			case f.ConfigMapKeyRef != nil:
				cm, err := cp.Clientset.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, f.ConfigMapKeyRef.Name, metav1.GetOptions{})
				require.NoError(t, err, "env %s", e.Name)
				value = cm.Data[f.ConfigMapKeyRef.Key]
			default:
				t.Fatalf("env %s: its valueFrom is not resolved here", e.Name)
			}
		}
		vars[e.Name] = value
		out = append(out, e.Name+"="+value)
	}
	return out
}

// resourceField is a resourceFieldRef's value: the container's request
// or limit divided by the divisor, rounded up, as the kubelet gives it.
func resourceField(t *testing.T, ctr *corev1.Container, env string, ref *corev1.ResourceFieldSelector) string {
	t.Helper()
	kind, res, ok := strings.Cut(ref.Resource, ".")
	require.True(t, ok, "env %s: resource %s", env, ref.Resource)
	list := ctr.Resources.Requests
	if kind == "limits" {
		list = ctr.Resources.Limits
	}
	q, ok := list[corev1.ResourceName(res)]
	require.True(t, ok, "env %s: the container has no %s (a kubelet would give the node's allocatable)", env, ref.Resource)
	div := 1.0
	if !ref.Divisor.IsZero() {
		div = ref.Divisor.AsApproximateFloat64()
	}
	return fmt.Sprint(int64(math.Ceil(q.AsApproximateFloat64() / div)))
}

// expand replaces $(NAME) with vars[NAME] where NAME is defined, as
// Kubernetes expands env values, commands and args; $$ escapes a $.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch {
		case s[i+1] == '$':
			b.WriteByte('$')
			i++
		case s[i+1] == '(':
			end := strings.IndexByte(s[i:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+end]
			if v, ok := vars[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+end+1])
			}
			i += end
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// podKubeconfig writes a kubeconfig into dir for the pod's service
// account, with a token bound to the pod: what the kubelet projects
// into the container. So the leader's writes are checked by the chart's
// RBAC and ValidatingAdmissionPolicies as in a cluster.
func podKubeconfig(t *testing.T, cp *controlplane.ControlPlane, pod *corev1.Pod, dir string) string {
	t.Helper()
	tr, err := cp.Clientset.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(context.Background(), pod.Spec.ServiceAccountName, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600),
			BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}},
	}, metav1.CreateOptions{})
	require.NoError(t, err, "a token of service account %s bound to pod %s", pod.Spec.ServiceAccountName, pod.Name)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cluster"] = &clientcmdapi.Cluster{Server: cp.Config.Host, CertificateAuthorityData: cp.Config.CAData}
	kc.AuthInfos["pod"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["pod"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "pod"}
	kc.CurrentContext = "pod"
	path := filepath.Join(dir, "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}
