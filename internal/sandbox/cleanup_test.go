package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSplitRuleKeepsQuotedComments(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{`-A INPUT -j KUBE-FIREWALL`, []string{"-A", "INPUT", "-j", "KUBE-FIREWALL"}},
		{`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES`,
			[]string{"-A", "PREROUTING", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"}},
		{`-A X -m comment --comment "say \"hi\"" -j CNI-1`, []string{"-A", "X", "-m", "comment", "--comment", `say "hi"`, "-j", "CNI-1"}},
		{`-A X --comment "" -j Y`, []string{"-A", "X", "--comment", "", "-j", "Y"}},
		{``, nil},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, splitRule(tt.line), tt.line)
	}
}

func TestUnescapeMountinfoDecodesOctal(t *testing.T) {
	assert.Equal(t, "/var/tmp/a b", unescapeMountinfo(`/var/tmp/a\040b`))
	assert.Equal(t, "/plain", unescapeMountinfo("/plain"))
	assert.Equal(t, `/odd\0`, unescapeMountinfo(`/odd\0`))
}

func TestCmdlineMatchesOnlyPathsUnderTheStateDir(t *testing.T) {
	// The test binary's own command line never names /nonexistent.
	assert.False(t, cmdlineMentions(1, "/nonexistent-kerf-state"))
}
