package apply

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHPATargetKeepsUtilizationTimesRequest(t *testing.T) {
	cases := []struct {
		name             string
		old              int32
		oldMilli, newMil int64
		want             int32
	}{
		{"doubling the request halves the target", 60, 500, 1000, 30},
		{"halving the request doubles it past 100", 80, 1000, 500, 160},
		{"rounds half away from zero", 50, 300, 400, 38}, // 37.5
		{"rounds down below half", 70, 500, 600, 58},     // 58.33
		{"never below 1", 1, 100, 1000, 1},
		{"capped at the int32 range", math.MaxInt32, 1000, 1, math.MaxInt32},
		{"an unknown new request keeps the target", 60, 500, 0, 60},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, hpaTarget(tc.old, tc.oldMilli, tc.newMil))
		})
	}
}
