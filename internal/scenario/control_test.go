package scenario

import (
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// controlPod is a pod whose IP is a loopback address of its own, so that
// Control's fixed port can be served on this machine without a clash.
func controlPod(ip string) *corev1.Pod {
	return &corev1.Pod{Status: corev1.PodStatus{PodIP: ip}}
}

// listenControl serves h on ip's control port.
func listenControl(t *testing.T, ip string, h http.Handler) {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(controlPort)))
	require.NoError(t, err, "the control port on a loopback address")
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// An alloc sent while the workload does not listen yet reaches it once it
// does. Before, a connection refused was taken for the process dying of
// the allocation, and the scenario waited two minutes for a kill that was
// never asked for (CI, stop 39).
func TestControlSendsACommandThatNeverReachedTheWorkloadAgain(t *testing.T) {
	const ip = "127.0.0.71"
	var got atomic.Int32
	go func() {
		time.Sleep(time.Second)
		listenControl(t, ip, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/alloc" && r.URL.Query().Get("mib") == "160" {
				got.Add(1)
			}
		}))
	}()
	e := &Env{}
	require.NoError(t, e.Control(t.Context(), controlPod(ip), "alloc", "mib=160"))
	assert.EqualValues(t, 1, got.Load(), "the workload received the alloc once")
}

// A command that reached the workload is not sent twice: an alloc the
// process dies of (the connection closes without an answer) is done, and
// any other command that fails so is an error.
func TestControlTakesAnUnansweredAllocAsDoneAndOtherCommandsAsErrors(t *testing.T) {
	const ip = "127.0.0.72"
	var got atomic.Int32
	listenControl(t, ip, http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		got.Add(1)
		conn, _, err := http.NewResponseController(rw).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	e := &Env{}
	require.NoError(t, e.Control(t.Context(), controlPod(ip), "alloc", "mib=160"))
	assert.EqualValues(t, 1, got.Load())
	err := e.Control(t.Context(), controlPod(ip), "free", "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "POST http://"+ip)
	assert.EqualValues(t, 2, got.Load(), "free was sent once")
}
