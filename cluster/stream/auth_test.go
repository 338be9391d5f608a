package stream

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	authnv1 "k8s.io/api/authentication/v1"
)

func TestReviewCacheForgetsAfterTTL(t *testing.T) {
	var c reviewCache
	now := time.Unix(1000, 0)
	key := sha256.Sum256([]byte("token"))
	c.put(key, authnv1.UserInfo{Username: "agent"}, now.Add(time.Minute), now)

	tests := []struct {
		name string
		at   time.Time
		want bool
	}{
		{"Fresh", now, true},
		{"JustBeforeExpiry", now.Add(time.Minute - time.Nanosecond), true},
		{"Expired", now.Add(time.Minute), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user, ok := c.get(key, tt.at)
			assert.Equal(t, tt.want, ok)
			if tt.want {
				assert.Equal(t, "agent", user.Username)
			}
		})
	}
	_, ok := c.get(sha256.Sum256([]byte("other")), now)
	assert.False(t, ok, "another token is not cached")
}
