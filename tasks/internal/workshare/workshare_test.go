package workshare

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/tasks/internal/engine"
)

// An agent past its share is sent back (as ErrLater, not a failure) while
// others take the free slots; a release frees its count; a lone agent, or a
// share as large as the slots, is never held back.
func TestSlots(t *testing.T) {
	ctx := context.Background()
	lone, asked := false, 0
	s := New(4, 2, func(context.Context) bool { asked++; return lone })
	require.NoError(t, s.Take(ctx, "a"))
	require.NoError(t, s.Take(ctx, "a"))
	require.Zero(t, asked, "under its share nobody asks Redis")
	err := s.Take(ctx, "a")
	require.ErrorIs(t, err, ErrShareFull)
	require.True(t, errors.Is(err, engine.ErrLater), "sent back, not failed")
	require.NoError(t, s.Take(ctx, "ab"), "another agent takes a free slot")
	s.Release("a")
	require.NoError(t, s.Take(ctx, "a"), "a released slot counts no more")

	lone = true
	require.NoError(t, s.Take(ctx, "a"), "a lone agent may pass its share")

	lone, asked = false, 0
	all := New(2, 5, func(context.Context) bool { asked++; return false })
	for range 3 {
		require.NoError(t, all.Take(ctx, "a"))
	}
	require.Zero(t, asked, "a share as large as the slots is no share")

	// Taken at once by many workers, the share still holds exactly.
	s = New(50, 5, func(context.Context) bool { return false })
	var took atomic.Int64
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			if s.Take(ctx, "burst") == nil {
				took.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 5, took.Load())
}
