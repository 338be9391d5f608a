package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	auditv1 "github.com/kerf-dev/kerf/api/audit/v1"
	hubv1 "github.com/kerf-dev/kerf/api/hub/v1"
	"github.com/kerf-dev/kerf/api/v1alpha1"
	"github.com/kerf-dev/kerf/test/freeport"
)

func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), args, &out, &errOut), errOut.String())
	return out.String()
}

// TestServeWithSQLiteAndTheCommandsToRegister runs what docs/hub.md shows:
// register a cluster and a reader, serve with a self-signed certificate,
// write as the cluster, read as the reader, stop on a signal.
func TestServeWithSQLiteAndTheCommandsToRegister(t *testing.T) {
	dir := t.TempDir()
	db := "--database=sqlite:" + filepath.Join(dir, "hub.db")
	clusterToken := strings.TrimSpace(runOK(t, "clusters", "add", "east", db))
	readToken := strings.TrimSpace(runOK(t, "tokens", "add-reader", "ops", db))
	assert.True(t, strings.HasPrefix(clusterToken, "kerf_"), clusterToken)
	assert.NotEqual(t, clusterToken, readToken)
	var out, errOut bytes.Buffer
	assert.ErrorContains(t, run(context.Background(), []string{"clusters", "add", "east", db}, &out, &errOut), "already exists")
	assert.ErrorContains(t, run(context.Background(), []string{"clusters", "add", "East_1", db}, &out, &errOut), "must be lower-case")
	list := runOK(t, "tokens", "list", db)
	assert.Contains(t, list, "cluster  east")
	assert.Contains(t, list, "reader   ops")
	assert.NotContains(t, list, clusterToken[len("kerf_")+17:], "no secret is listed")

	addr, certPath := freeport.Addr(t), filepath.Join(dir, "hub.crt")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		var serveErr bytes.Buffer
		done <- run(ctx, []string{"serve", db, "--listen", addr, "--self-signed-cert-out", certPath}, &serveErr, &serveErr)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var client *http.Client
	require.Eventually(t, func() bool {
		pemBytes, err := os.ReadFile(certPath)
		if err != nil {
			return false
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pemBytes)
		client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
		resp, err := client.Get("https://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond)

	b := hubv1.Batch{Cluster: "east", Leader: hubv1.LeaderReport{Identity: "kerf-leader-0", AgentsConnected: 2}, Actions: []hubv1.Action{{
		Key: "k1", Seq: 1, Phase: v1alpha1.PhaseRolledBack,
		Entry: auditv1.Entry{Time: metav1.Now(), Type: v1alpha1.ActionRolledBack, Reason: "OOMKills", Namespace: "shop", Recommendation: "web",
			Workload: auditv1.Workload{Kind: v1alpha1.KindDeployment, Name: "web"}, Resources: []v1alpha1.ResourceName{"memory"}},
	}}}
	body, _ := json.Marshal(b)
	req, _ := http.NewRequest("POST", "https://"+addr+"/v1/clusters/east/actions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+clusterToken)
	resp, err := client.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	req, _ = http.NewRequest("GET", "https://"+addr+"/v1/audit?type=rolled_back", nil)
	req.Header.Set("Authorization", "Bearer "+readToken)
	resp, err = client.Do(req)
	require.NoError(t, err)
	var page hubv1.AuditPage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	resp.Body.Close()
	require.Len(t, page.Items, 1)
	assert.Equal(t, "east", page.Items[0].Cluster)

	clusters := runOK(t, "clusters", "list", db)
	assert.Contains(t, clusters, "kerf-leader-0")
	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err, "serve stops cleanly")
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
	done <- nil // for the cleanup
}

func TestServeRefusesToRunWithoutTLS(t *testing.T) {
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"serve", "--database=sqlite:" + filepath.Join(t.TempDir(), "hub.db")}, &out, &errOut)
	assert.ErrorContains(t, err, "TLS is required")
}

func TestRetentionFlagTakesDaysOrDurations(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  bool
	}{
		{"400d", 400 * 24 * time.Hour, false},
		{"36h", 36 * time.Hour, false},
		{"0d", 0, true},
		{"-5h", 0, true},
		{"a year", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseDays(tc.in)
			if tc.err {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestClustersRemoveKeepsOrPurges runs `clusters remove` as docs/hub.md
// shows: an unknown name is an error naming it; by default the cluster is
// listed as removed; --purge deletes it.
func TestClustersRemoveKeepsOrPurges(t *testing.T) {
	db := "--database=sqlite:" + filepath.Join(t.TempDir(), "hub.db")
	runOK(t, "clusters", "add", "east", db)
	var out, errOut bytes.Buffer
	assert.ErrorContains(t, run(context.Background(), []string{"clusters", "remove", "nope", db}, &out, &errOut), `cluster "nope" is not registered`)
	assert.ErrorContains(t, run(context.Background(), []string{"clusters", "remove", db}, &out, &errOut), "takes 1 argument")
	assert.ErrorContains(t, run(context.Background(), []string{"clusters", "list", "--purge", db}, &out, &errOut), "flag provided but not defined: -purge")

	errOut.Reset()
	require.NoError(t, run(context.Background(), []string{"clusters", "remove", "east", db}, &out, &errOut))
	assert.Contains(t, errOut.String(), "revoked 1 token(s)")
	assert.Contains(t, errOut.String(), "its actions are kept")
	list := runOK(t, "clusters", "list", db)
	assert.Contains(t, list, "REMOVED")
	assert.Regexp(t, `east .* \d{4}-\d\d-\d\dT\S+Z\s*$`, strings.Split(strings.TrimSpace(list), "\n")[1], "the removal time is listed")
	assert.NotContains(t, runOK(t, "tokens", "list", db), "east")
	assert.ErrorContains(t, run(context.Background(), []string{"clusters", "add", "east", db}, &out, &errOut), "--purge")

	errOut.Reset()
	require.NoError(t, run(context.Background(), []string{"clusters", "remove", "--purge", "east", db}, &out, &errOut))
	assert.Contains(t, errOut.String(), "purged 0 action(s)")
	assert.NotContains(t, runOK(t, "clusters", "list", db), "east")
	runOK(t, "clusters", "add", "east", db)
}

// TestAdminCommandsOpenTheDatabaseOfTheEnvironment: the bootstrap in
// docs/hub.md runs `kubectl exec deploy/kerf-hub -- kerf-hub clusters add
// NAME` with no flag; the pod's KERF_HUB_DATABASE names the database serve
// uses, and only the token goes to stdout (piped into a Secret).
func TestAdminCommandsOpenTheDatabaseOfTheEnvironment(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", "kerf-hub.db")
	t.Setenv("KERF_HUB_DATABASE", "sqlite:"+path)
	var out, errOut bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"clusters", "add", "east"}, &out, &errOut))
	assert.Regexp(t, `^kerf_[0-9a-f]{16}_\S+\n$`, out.String(), "stdout is the token alone")
	assert.Contains(t, errOut.String(), "shown only once")
	assert.Contains(t, runOK(t, "clusters", "list", "--database=sqlite:"+path), "east")
}

// TestHelpAndFlagErrorsNeverPrintTheDatabasesPassword: -h, and any flag
// error (which prints the usage), printed --database's default, the
// environment's KERF_HUB_DATABASE with its password (issue 30, item 13).
func TestHelpAndFlagErrorsNeverPrintTheDatabasesPassword(t *testing.T) {
	t.Setenv("KERF_HUB_DATABASE", "postgres://kerf:s3cr3t-pw@db.example:5432/kerf")
	for _, args := range [][]string{
		{"serve", "-h"}, {"serve", "--no-such-flag"}, {"serve", "--retention"},
		{"clusters", "list", "-h"}, {"tokens", "list", "--no-such-flag"},
	} {
		var out, errOut bytes.Buffer
		_ = run(context.Background(), args, &out, &errOut)
		printed := out.String() + errOut.String()
		assert.NotContains(t, printed, "s3cr3t-pw", "%v printed the password", args)
		assert.Contains(t, printed, "-database", "%v printed the usage", args)
	}
}
