package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks"
)

// cli runs one bgjobs command against url and returns its output.
func cli(t *testing.T, url string, args ...string) (string, error) {
	t.Helper()
	out := &lockedBuffer{}
	env := map[string]string{"REDIS_URL": url}
	err := run(context.Background(), args, func(k string) string { return env[k] }, out, out)
	return out.String(), err
}

func TestRetryAndPurgeFromTheCLI(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	m := privateManager(t, srv)
	w := m.NewWorker()
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Shutdown)
	ctx := context.Background()
	spawn := func(args string) string {
		j, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: "default", OriginSession: "chat-o", Kind: bgjobs.KindWork,
			Description: "d", Work: &bgjobs.WorkSpec{Type: "echo", Args: json.RawMessage(args)}})
		require.NoError(t, err)
		return j.ID
	}
	waitFor := func(id string, st bgjobs.Status) *bgjobs.Job {
		var j *bgjobs.Job
		testenv.Eventually(t, 10*time.Second, id+" "+string(st), func() bool {
			var err error
			j, err = m.Get(ctx, "default", id)
			require.NoError(t, err)
			return j.Status == st
		})
		return j
	}
	failed := spawn(`{"text":"boom","fail":true}`)
	done := spawn(`{"text":"fine"}`)
	waitFor(failed, bgjobs.StatusFailed)
	waitFor(done, bgjobs.StatusCompleted)
	ns, err := m.Drain(ctx, "default", "chat-o", "")
	require.NoError(t, err)
	require.Len(t, ns, 2)

	out, err := cli(t, srv.URL(), "retry", done)
	require.Error(t, err, "a completed job is refused without --force: %s", out)
	require.Contains(t, err.Error(), "force")

	out, err = cli(t, srv.URL(), "retry", failed)
	require.NoError(t, err, out)
	require.Contains(t, out, failed)
	j := waitFor(failed, bgjobs.StatusFailed)
	require.Equal(t, 2, j.Attempts, "it ran exactly once more")
	require.Equal(t, 1, j.Generation)
	ns, err = m.Drain(ctx, "default", "chat-o", "")
	require.NoError(t, err)
	require.Len(t, ns, 1, "exactly one new notification")
	require.Equal(t, failed, ns[0].JobID)
	ns, err = m.Drain(ctx, "default", "chat-o", "")
	require.NoError(t, err)
	require.Empty(t, ns)

	// An undrained job is never purged; a dry run changes nothing.
	undrained := spawn(`{"text":"unread"}`)
	waitFor(undrained, bgjobs.StatusCompleted)
	out, err = cli(t, srv.URL(), "purge", "--dry-run")
	require.NoError(t, err, out)
	require.Contains(t, out, "would purge 2 job(s)")
	require.NotContains(t, out, undrained)
	for _, id := range []string{failed, done, undrained} {
		_, err := m.Get(ctx, "default", id)
		require.NoError(t, err, "the dry run removed nothing")
	}
	out, err = cli(t, srv.URL(), "purge", "--status", "completed")
	require.NoError(t, err, out)
	require.Contains(t, out, "purged 1 job(s)")
	_, err = m.Get(ctx, "default", done)
	require.Error(t, err)
	_, err = m.Get(ctx, "default", failed)
	require.NoError(t, err, "a failed job survives a purge of completed ones")
	_, err = m.Get(ctx, "default", undrained)
	require.NoError(t, err, "never an undrained job")

	out, err = cli(t, srv.URL(), "jobs", "ls", "--json")
	require.NoError(t, err)
	var listed []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed, 2)
	out, err = cli(t, srv.URL(), "jobs", "show", undrained)
	require.NoError(t, err)
	require.Contains(t, out, `"result": "unread"`)
}

func TestStoredKeys(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	key, err := cli(t, srv.URL(), "keys", "create", "gamma")
	require.NoError(t, err)
	key = strings.TrimSpace(key)
	require.True(t, strings.HasPrefix(key, "bgj_"))
	base, _ := serveOn(t, srv.URL(), nil)
	code, _ := client{t: t, base: base}.do("GET", "/v1/jobs", nil)
	require.Equal(t, 401, code, "a stored key turns open mode off")
	code, _ = client{t: t, base: base, key: key}.do("GET", "/v1/jobs", nil)
	require.Equal(t, 200, code)
	out, err := cli(t, srv.URL(), "keys", "revoke", "gamma")
	require.NoError(t, err)
	require.Contains(t, out, "revoked 1")
	testenv.Eventually(t, 10*time.Second, "revocation to take effect", func() bool {
		code, _ := client{t: t, base: base, key: key}.do("GET", "/v1/jobs", nil)
		return code == 401
	})
}

// The CLI with asynq's manners: every agent's jobs by default, a friendly
// empty answer, cancel, stats per queue and state, and keys revoke that
// says when a key cannot be revoked from here.
func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	m := privateManager(t, srv)
	ctx := context.Background()
	out, err := cli(t, srv.URL(), "jobs", "ls")
	require.NoError(t, err, out)
	require.Equal(t, "no jobs\n", out)

	var ids []string
	for _, agent := range []string{"alpha", "beta"} {
		j, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: agent, OriginSession: "s", Kind: bgjobs.KindWork,
			Description: "slow " + agent, Work: &bgjobs.WorkSpec{Type: "echo", Args: json.RawMessage(`{"text":"x","delay_ms":60000}`)}})
		require.NoError(t, err)
		ids = append(ids, j.ID)
	}
	out, err = cli(t, srv.URL(), "jobs", "ls")
	require.NoError(t, err, out)
	require.Contains(t, out, "slow alpha")
	require.Contains(t, out, "slow beta", "the operator sees every agent's jobs")
	out, err = cli(t, srv.URL(), "jobs", "ls", "--agent", "beta")
	require.NoError(t, err, out)
	require.NotContains(t, out, "slow alpha")

	out, err = cli(t, srv.URL(), "stats")
	require.NoError(t, err, out)
	require.Regexp(t, `(?m)^work\s+2\s+0\s`, out, "two pending work tasks")
	out, err = cli(t, srv.URL(), "stats", "--json")
	require.NoError(t, err, out)
	var stats []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &stats))
	require.Len(t, stats, 4)

	out, err = cli(t, srv.URL(), "cancel", ids[1])
	require.NoError(t, err, out)
	require.Contains(t, out, "cancelled")
	j, err := m.Get(ctx, "beta", ids[1])
	require.NoError(t, err)
	require.Equal(t, bgjobs.StatusCancelled, j.Status)
	_, err = cli(t, srv.URL(), "cancel", ids[1])
	require.ErrorContains(t, err, "already ended")

	_, err = cli(t, srv.URL(), "keys", "revoke", "gamma")
	require.ErrorContains(t, err, "no stored key")
	envOut := &lockedBuffer{}
	env := map[string]string{"REDIS_URL": srv.URL(), "BGJOBS_API_KEYS": "alpha:from-env"}
	err = run(ctx, []string{"keys", "revoke", "alpha"}, func(k string) string { return env[k] }, envOut, envOut)
	require.ErrorContains(t, err, "BGJOBS_API_KEYS", "a key from the environment cannot be revoked here")
}
