package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/metadata"
)

// Invalidf is the one invalid-input error type: it matches ErrInvalid,
// wrapped or not, and reads as its sentence alone.
func TestInvalidf(t *testing.T) {
	err := metadata.Invalidf("shard %d does not exist", 7)
	assert.True(t, errors.Is(err, metadata.ErrInvalid))
	assert.True(t, errors.Is(fmt.Errorf("move: %w", err), metadata.ErrInvalid))
	assert.Equal(t, "shard 7 does not exist", err.Error())
	assert.False(t, errors.Is(err, metadata.ErrNotFound))
}

// A refused dial is named by the error's type, not its text.
func TestUnreachableReason(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := metadata.Open(ctx, metadata.Config{Coordinator: "host=127.0.0.1 port=1 user=u dbname=x connect_timeout=5"})
	require.ErrorIs(t, err, metadata.ErrUnreachable)
	assert.Contains(t, err.Error(), "127.0.0.1:1 (connection refused)")
}
