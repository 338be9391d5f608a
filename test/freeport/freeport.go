// Package freeport gives tests loopback addresses whose ports nothing
// listens on, for the servers they start.
package freeport

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// Addr returns a loopback host:port nothing listens on now. Another
// listen may take it before the caller's does: a test that needs several
// at once takes them from Addrs.
func Addr(tb testing.TB) string {
	tb.Helper()
	return Addrs(tb, 1)[0]
}

// Addrs returns n distinct loopback host:ports nothing listens on now.
// Each is held until all are chosen: a port closed at once came back from
// the next listen, and a leader got the same port for its webhook and its
// stream ("address already in use").
func Addrs(tb testing.TB, n int) []string {
	tb.Helper()
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(tb, err)
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs
}
