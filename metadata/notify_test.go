package metadata_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/shardmover/shardmover/internal/sandbox/sandboxtest"
	"github.com/shardmover/shardmover/metadata"
)

// TestWatchNodesHearsCatalogChanges: registering a node and changing its
// flags are announced at once, not at the next poll.
func TestWatchNodesHearsCatalogChanges(t *testing.T) {
	sb, cat := sandboxtest.NewCompat(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	notes := cat.WatchNodes(ctx)
	wait := func(what string) {
		t.Helper()
		select {
		case <-notes:
		case <-time.After(10 * time.Second):
			t.Fatalf("no notification for %s", what)
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case <-notes:
			t.Fatalf("notification without a change (%s)", what)
		case <-time.After(300 * time.Millisecond):
		}
	}
	wait("the start of listening")
	quiet("after the start")

	n, err := sb.AddNode(ctx)
	require.NoError(t, err)
	node, err := cat.AddNode(ctx, n.Host, n.Port, metadata.DefaultAddNodeOptions())
	require.NoError(t, err)
	wait("a registered node")
	// Registering may change the catalog more than once: let it settle.
	time.Sleep(300 * time.Millisecond)
	for len(notes) > 0 {
		<-notes
	}

	require.NoError(t, cat.SetShouldHaveShards(ctx, node.ID, false))
	wait("shouldhaveshards turned off")
}
