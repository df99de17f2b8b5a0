package keys

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	var lookups atomic.Int32
	stored := func(_ context.Context, digest string) (string, error) {
		lookups.Add(1)
		if digest == Digest("made-by-cli") {
			return "gamma", nil
		}
		return "", nil
	}
	k := New(bgjobs.Config{APIKeys: map[string]string{"key-a": "alpha", "key-b": "beta"}, AdminKey: "adm"}, stored,
		func(context.Context) (int64, error) { return 1, nil })
	ctx := context.Background()
	for key, want := range map[string]Who{"key-a": {Agent: "alpha"}, "key-b": {Agent: "beta"}, "adm": {Admin: true}, "made-by-cli": {Agent: "gamma"}} {
		who, ok, err := k.Lookup(ctx, key)
		require.NoError(t, err)
		require.True(t, ok, key)
		require.Equal(t, want, who, key)
	}
	for _, key := range []string{"", "key-", "key-ab", "ADM", "nope"} {
		_, ok, err := k.Lookup(ctx, key)
		require.NoError(t, err)
		require.False(t, ok, "%q", key)
	}
	// A stored key's answer, and a wrong key's, are cached: a second ask
	// within the TTL does not reach Redis.
	before := lookups.Load()
	_, _, _ = k.Lookup(ctx, "made-by-cli")
	_, _, _ = k.Lookup(ctx, "nope")
	require.Equal(t, before, lookups.Load())
	require.False(t, k.Open(ctx), "keys are configured")

	// By digest, as a console sign-in asks: the same answers.
	for key, want := range map[string]Who{"key-a": {Agent: "alpha"}, "adm": {Admin: true}, "made-by-cli": {Agent: "gamma"}} {
		who, ok, err := k.LookupDigest(ctx, Digest(key))
		require.NoError(t, err)
		require.True(t, ok, key)
		require.Equal(t, want, who, key)
	}
	for _, digest := range []string{"", "zz", Digest("nope"), Digest("adm")[:40]} {
		_, ok, err := k.LookupDigest(ctx, digest)
		require.NoError(t, err)
		require.False(t, ok, "%q", digest)
	}
}

// Open mode lasts until the first stored key appears, then ends for good.
func TestOpenEndsWithTheFirstStoredKey(t *testing.T) {
	t.Parallel()
	var count atomic.Int64
	k := New(bgjobs.Config{}, nil, func(context.Context) (int64, error) { return count.Load(), nil })
	ctx := context.Background()
	require.True(t, k.Open(ctx))
	count.Store(1)
	deadline := time.Now().Add(30 * time.Second)
	for k.Open(ctx) {
		require.True(t, time.Now().Before(deadline), "open mode outlived a stored key")
		time.Sleep(50 * time.Millisecond)
	}
	count.Store(0)
	require.False(t, k.Open(ctx), "once ended, open mode does not come back")
}
