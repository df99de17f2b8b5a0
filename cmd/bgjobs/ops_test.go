package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
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
	require.Contains(t, out, "\nunread\n", "the result, whole")

	// A selection retries every job it names, past a page of the list: a
	// batch with 250 failed members (one page holds 200).
	var specs []tasks.SpawnRequest
	for range 250 {
		specs = append(specs, tasks.SpawnRequest{Kind: bgjobs.KindWork, Description: "member",
			Work: &bgjobs.WorkSpec{Type: "echo", Args: json.RawMessage(`{"text":"no","fail":true}`)}})
	}
	res, err := m.SpawnBatch(ctx, "default", "chat-b", specs)
	require.NoError(t, err)
	testenv.Eventually(t, 60*time.Second, "every member failed", func() bool {
		b, err := m.GetBatch(ctx, "default", res.BatchID)
		require.NoError(t, err)
		return b.Settled == 250
	})
	out, err = cli(t, srv.URL(), "retry", "--batch", res.BatchID, "--dry-run")
	require.NoError(t, err, out)
	require.Equal(t, 250, strings.Count(out, "\n")-1, "every failed member, once: %s", out)
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
	sess := signIn(t, base, key)
	resp, _ := getPage(t, "GET", base+"/", sess, "")
	require.Equal(t, 200, resp.StatusCode, "signed in to the console with it")
	out, err := cli(t, srv.URL(), "keys", "revoke", "gamma")
	require.NoError(t, err)
	require.Contains(t, out, "revoked 1")
	testenv.Eventually(t, 10*time.Second, "revocation to take effect", func() bool {
		code, _ := client{t: t, base: base, key: key}.do("GET", "/v1/jobs", nil)
		return code == 401
	})
	// A console sign-in made with the key ends with it.
	resp, _ = getPage(t, "GET", base+"/", sess, "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = getPage(t, "GET", base+"/v1/jobs", sess, "")
	require.Equal(t, 401, resp.StatusCode)
}

// A key made while a server runs in open mode ends open mode on that
// server within seconds, without a restart.
func TestKeysTakeEffectOnARunningServer(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	base, _ := serveOn(t, srv.URL(), nil)
	code, _ := client{t: t, base: base}.do("GET", "/v1/jobs", nil)
	require.Equal(t, 200, code, "open mode")
	start := time.Now()
	key, err := cli(t, srv.URL(), "keys", "create", "delta")
	require.NoError(t, err)
	key = strings.TrimSpace(key)
	testenv.Eventually(t, 10*time.Second, "open mode to end", func() bool {
		code, _ := client{t: t, base: base}.do("GET", "/v1/jobs", nil)
		return code == 401
	})
	t.Logf("open mode ended %v after the key was made", time.Since(start).Round(10*time.Millisecond))
	code, _ = client{t: t, base: base, key: key}.do("GET", "/v1/jobs", nil)
	require.Equal(t, 200, code)
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

// binCLI runs the built bgjobs binary with env and returns its stdout,
// stderr and exit code.
func binCLI(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	bin, err := buildBinary()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errOut.String(), code
}

// The operator's CLI, run as the real binary: an all-agents view, friendly
// empty results, usage on a bad flag, dry runs that say so, purge per
// agent, show as text or JSON, worker help without a listen address, a
// revoke that cannot, and a reindex that refuses beside a running serve.
func TestCLIWithTheRealBinary(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedisServer(t)
	m := privateManager(t, srv)
	ctx := context.Background()
	env := []string{"REDIS_URL=" + srv.URL(), "BGJOBS_API_KEYS=", "BGJOBS_ADMIN_KEY="}

	out, _, code := binCLI(t, env, "jobs", "ls")
	require.Equal(t, 0, code)
	require.Equal(t, "no jobs\n", out)

	ids := map[string]string{}
	for _, agent := range []string{"alpha", "beta"} {
		j, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: agent, OriginSession: "s", Kind: bgjobs.KindWork,
			Description: "echo for " + agent, Work: &bgjobs.WorkSpec{Type: "echo", Args: json.RawMessage(`{"text":"done by ` + agent + `"}`)}})
		require.NoError(t, err)
		_, err = m.Cancel(ctx, agent, j.ID) // no worker runs here
		require.NoError(t, err)
		ids[agent] = j.ID
		_, err = m.Ack(ctx, agent, j.ID)
		require.NoError(t, err)
	}
	out, _, code = binCLI(t, env, "jobs", "ls")
	require.Equal(t, 0, code)
	require.Contains(t, out, "echo for alpha")
	require.Contains(t, out, "echo for beta")

	// A Redis that does not answer is said once, in the command's own
	// error, without go-redis's line per failed dial before it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	require.NoError(t, l.Close())
	_, stderr, code := binCLI(t, []string{"REDIS_URL=redis://" + closed + "/0"}, "jobs", "ls")
	require.NotEqual(t, 0, code)
	require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	require.Contains(t, stderr, "bgjobs: redis at REDIS_URL does not answer")

	_, stderr, code = binCLI(t, env, "jobs", "ls", "--bogus")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "unknown flag: --bogus")
	require.Contains(t, stderr, "Usage:", "a bad flag prints the usage")

	out, _, code = binCLI(t, env, "purge", "--dry-run", "--agent", "alpha")
	require.Equal(t, 0, code)
	require.Contains(t, out, "would purge 1 job(s)", "a dry run says so")
	require.Contains(t, out, ids["alpha"])
	require.NotContains(t, out, ids["beta"], "--agent purges one agent's jobs")
	// The operator scripts wrap the same commands.
	bin, err := buildBinary()
	require.NoError(t, err)
	script := func(name string, args ...string) string {
		cmd := exec.Command("../../scripts/"+name, args...)
		cmd.Env = append(os.Environ(), append(env, "BGJOBS="+bin)...)
		got, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", got)
		return string(got)
	}
	require.Contains(t, script("purge", "--help"), "usage: scripts/purge")
	require.Contains(t, script("retry", "--help"), "usage: scripts/retry")
	require.Contains(t, script("purge", "--dry-run", "--agent", "beta"), "would purge 1 job(s)")
	require.Contains(t, script("retry", "--dry-run", ids["beta"]), ids["beta"])

	out, _, code = binCLI(t, env, "purge", "--agent", "beta")
	require.Equal(t, 0, code)
	require.Contains(t, out, "purged 1 job(s)")
	_, err = m.Get(ctx, "beta", ids["beta"])
	require.Equal(t, bgjobs.ENotFound, bgjobs.ErrorCode(err))
	_, err = m.Get(ctx, "alpha", ids["alpha"])
	require.NoError(t, err, "alpha's job stays")

	text, _, code := binCLI(t, env, "jobs", "show", ids["alpha"])
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^Status:\s+cancelled$`, text)
	js, _, code := binCLI(t, env, "jobs", "show", "--json", ids["alpha"])
	require.Equal(t, 0, code)
	var row map[string]any
	require.NoError(t, json.Unmarshal([]byte(js), &row))
	require.Equal(t, "cancelled", row["status"])
	require.NotEqual(t, text, js)

	slow, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: "alpha", OriginSession: "s", Kind: bgjobs.KindWork,
		Description: "slow", Work: &bgjobs.WorkSpec{Type: "echo", Args: json.RawMessage(`{"text":"x","delay_ms":60000}`)}})
	require.NoError(t, err)
	out, _, code = binCLI(t, env, "stats")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^work\s+1\s`, out, "one pending work task, like asynq stats")
	out, _, code = binCLI(t, env, "cancel", slow.ID)
	require.Equal(t, 0, code)
	require.Contains(t, out, "cancelled")

	help, _, code := binCLI(t, env, "worker", "--help")
	require.Equal(t, 0, code)
	require.NotContains(t, help, "--addr", "a worker listens nowhere")
	serveHelp, _, _ := binCLI(t, env, "serve", "--help")
	require.Contains(t, serveHelp, "--addr")

	_, stderr, code = binCLI(t, append(env, "BGJOBS_API_KEYS=alpha:from-env"), "keys", "revoke", "alpha")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "BGJOBS_API_KEYS")

	// reindex beside a running serve of the same index: refused, the serve
	// keeps its index.
	dataDir := t.TempDir()
	_, base := startServeProcess(t, srv.URL(), dataDir, &lockedBuffer{})
	_, stderr, code = binCLI(t, append(env, "BGJOBS_DATA_DIR="+dataDir), "reindex")
	require.NotEqual(t, 0, code)
	require.Contains(t, stderr, "in use by a running bgjobs serve")
	resp, err := http.Get(base + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
