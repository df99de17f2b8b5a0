package workshare

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/parking"
)

// An agent past its share is sent back (as ErrLater, not a failure) while
// others take the free slots; a release frees its count and brings back
// what the agent parked; a lone agent, or a share as large as the slots,
// is never held back.
func TestSlots(t *testing.T) {
	ctx := context.Background()
	lone, asked := false, 0
	var ran []string
	lot := parking.New("work", func(id string) error { ran = append(ran, id); return nil })
	s := New(4, 2, func(context.Context) bool { asked++; return lone }, lot)
	require.NoError(t, s.Take(ctx, "a", "a1"))
	require.NoError(t, s.Take(ctx, "a", "a2"))
	require.Zero(t, asked, "under its share nobody asks Redis")
	err := s.Take(ctx, "a", "a3")
	require.ErrorIs(t, err, ErrShareFull)
	require.True(t, errors.Is(err, engine.ErrLater), "sent back, not failed")
	require.NoError(t, s.Take(ctx, "ab", "b1"), "another agent takes a free slot")
	s.Release("ab")
	require.Empty(t, ran, "another agent's slot brings back none of a's")
	s.Release("a")
	require.Equal(t, []string{"a3"}, ran, "a's freed slot brings a3 back at once")
	require.NoError(t, s.Take(ctx, "a", "a3"), "a released slot counts no more")
	require.Zero(t, lot.Parked())
	require.False(t, s.Room("a"), "a holds its share")
	require.True(t, s.Room("c"), "two slots free, c under its share")
	require.NoError(t, s.Take(ctx, "c", "c1"))
	require.NoError(t, s.Take(ctx, "d", "d1"))
	require.False(t, s.Room("e"), "every slot taken")
	s.Release("c")
	s.Release("d")

	require.ErrorIs(t, s.Take(ctx, "a", "a4"), ErrShareFull)
	require.ErrorIs(t, s.Take(ctx, "a", "a5"), ErrShareFull)
	lone = true
	require.NoError(t, s.Take(ctx, "a", "a4"), "a lone agent may pass its share")
	require.Equal(t, []string{"a3", "a5"}, ran, "and brings back what it parked, one a start")

	lone, asked = false, 0
	all := New(2, 5, func(context.Context) bool { asked++; return false }, lot)
	for i := range 3 {
		require.NoError(t, all.Take(ctx, "a", fmt.Sprint(i)))
	}
	require.Zero(t, asked, "a share as large as the slots is no share")

	// Taken at once by many workers, the share still holds exactly.
	s = New(50, 5, func(context.Context) bool { return false }, parking.New("work", func(string) error { return nil }))
	var took atomic.Int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if s.Take(ctx, "burst", fmt.Sprint(i)) == nil {
				took.Add(1)
			}
		})
	}
	wg.Wait()
	require.EqualValues(t, 5, took.Load())
}
