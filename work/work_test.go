package work

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
)

// A registry starts with echo, lists its kinds sorted, and a kind
// registered under a taken name replaces the one before.
func TestKindsRegistry(t *testing.T) {
	k := NewKinds()
	require.Equal(t, []string{"echo"}, k.Names())
	k.Register(Kind{Name: "shout"})
	k.Register(Kind{Name: "archive"})
	require.Equal(t, []string{"archive", "echo", "shout"}, k.Names())
	k.Register(Kind{Name: "shout", Check: func(json.RawMessage) error { return errors.New("replaced") }})
	w, ok := k.Lookup("shout")
	require.True(t, ok)
	require.EqualError(t, w.Check(nil), "replaced")
	_, ok = k.Lookup("nope")
	require.False(t, ok)
}

// Echo checks its args as a spawn would see them: unknown fields and
// wrong types are named by field, a delay is bounded, and no args at all
// are an empty echo.
func TestEchoChecksItsArgs(t *testing.T) {
	check := Echo().Check
	require.NoError(t, check(nil))
	require.NoError(t, check(json.RawMessage(`null`)))
	require.NoError(t, check(json.RawMessage(`{"text":"hi","delay_ms":5,"fail":true}`)))
	for raw, field := range map[string]string{
		`{"text":1}`:           "work.args.text",
		`{"shout":true}`:       "work.args.shout",
		`[1]`:                  "work.args",
		`{"text":"a"} {}`:      "work.args",
		`{"fail":`:             "work.args",
		`{"delay_ms":-1}`:      "work.args.delay_ms",
		`{"delay_ms":3600001}`: "work.args.delay_ms",
	} {
		var be *bgjobs.Error
		require.ErrorAs(t, check(json.RawMessage(raw)), &be, raw)
		require.Equal(t, field, be.Field, raw)
	}
}

// Echo returns its text, fails with it on request, and gives up its delay
// when its job is cancelled.
func TestEchoRuns(t *testing.T) {
	run := Echo().Run
	out, err := run(context.Background(), json.RawMessage(`{"text":"hi"}`))
	require.NoError(t, err)
	require.Equal(t, "hi", out)
	_, err = run(context.Background(), json.RawMessage(`{"text":"boom","fail":true}`))
	require.EqualError(t, err, "boom")

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	start := time.Now()
	_, err = run(ctx, json.RawMessage(`{"text":"late","delay_ms":60000}`))
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), 30*time.Second)
}

// What a Func learns from its context: the job it runs for, and the API
// caller behind the spawn; and a failure marked Retryable stays so through
// wrapping.
func TestContextAndRetryable(t *testing.T) {
	_, ok := JobFromContext(context.Background())
	require.False(t, ok)
	j := JobInfo{ID: "bg-0123456789ab", Agent: "alpha", OriginSession: "chat-1", Description: "d"}
	got, ok := JobFromContext(WithJob(context.Background(), j))
	require.True(t, ok)
	require.Equal(t, j, got)

	_, api := CallerFrom(context.Background())
	require.False(t, api)
	c, api := CallerFrom(WithCaller(context.Background(), Caller{Agent: "alpha", Admin: true}))
	require.True(t, api)
	require.Equal(t, Caller{Agent: "alpha", Admin: true}, c)

	base := errors.New("connection refused")
	err := Retryable(base)
	require.True(t, IsRetryable(err))
	require.True(t, IsRetryable(errors.Join(errors.New("fetch"), err)))
	require.ErrorIs(t, err, base)
	require.False(t, IsRetryable(base))
}
