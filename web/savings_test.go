package web

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSavingsFiguresReadInHumanUnits(t *testing.T) {
	for _, tc := range []struct {
		millis int64
		cores  string
		bytes  int64
		mem    string
	}{
		{0, "0m", 0, "0"},
		{250, "250m", 384 << 20, "384Mi"},
		{1250, "1.25", 3 << 29, "1.5Gi"},
		{-100, "−100m", -(128 << 20), "−128Mi"},
		{2000, "2", 1536, "1.5Ki"},
	} {
		assert.Equal(t, tc.cores, Cores(tc.millis), "%d millicores", tc.millis)
		assert.Equal(t, tc.mem, Bytes(tc.bytes), "%d bytes", tc.bytes)
	}
}
