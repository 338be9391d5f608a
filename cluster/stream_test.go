package cluster_test

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	streamv1 "github.com/kerf-dev/kerf/api/stream/v1"
	"github.com/kerf-dev/kerf/cluster"
	"github.com/kerf-dev/kerf/test/controlplane"
	"github.com/kerf-dev/kerf/test/kubetest"
	"github.com/kerf-dev/kerf/test/leadertest"
)

// TestOnlyTheLeaderServesTheStream runs two replicas with the stream on:
// the leader answers an agent (here one without a token, which it refuses
// as unauthenticated) and the other replica tells it to go elsewhere.
func TestOnlyTheLeaderServesTheStream(t *testing.T) {
	c := controlplane.Get(t).Client
	ns := kubetest.Namespace(t, c)
	ctx := context.Background()
	serverCert, pool := kubetest.StreamCert(t, c, ns)

	replicas := map[string]*leadertest.Replica{}
	addrs := map[string]string{}
	for _, id := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addrs[id] = ln.Addr().String()
		replicas[id] = leadertest.StartReplica(t, ns, id, cluster.Config{Stream: cluster.StreamConfig{Listener: ln, Cert: serverCert,
			Audience: "kerf-leader", ServiceAccountNamespace: ns, ServiceAccountName: "kerf-agent"}})
		if id == "a" {
			require.Eventually(t, replicas[id].Leading, 15*time.Second, 50*time.Millisecond)
		}
	}

	connect := func(addr string) codes.Code {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})))
		require.NoError(t, err)
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, err := streamv1.NewStreamClient(conn).Connect(cctx)
		require.NoError(t, err)
		_ = st.Send(&streamv1.AgentMessage{Body: &streamv1.AgentMessage_Hello{Hello: &streamv1.Hello{NodeName: "node-a"}}})
		_, err = st.Recv()
		require.Error(t, err)
		return status.Code(err)
	}
	assert.Equal(t, codes.Unauthenticated, connect(addrs["a"]), "the leader serves, and refuses an agent without a token")
	assert.Equal(t, codes.Unavailable, connect(addrs["b"]), "a replica that does not lead sends agents elsewhere")
}
