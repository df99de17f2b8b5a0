package tasks

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/tasks/internal/maintenance"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// On a 3-master Redis Cluster, settles whose pump never ran (a worker
// killed between the two) leave outbox entries on every master; the sweep
// finds each of them and every session's resume goes, once.
func TestOutboxesOnEveryMasterAreSwept(t *testing.T) {
	rr := &recordingResumer{}
	b, rdb := setupOnACluster(t, withResumer(rr))
	b.registerAgent(t, nil)
	ctx := context.Background()

	// Sessions until every master holds at least two outboxes.
	perMaster := map[string]int{}
	var sessions []string
	for i := 0; len(perMaster) < 3 || minCount(perMaster) < 2; i++ {
		s := fmt.Sprint("chat-", i)
		node, err := rdb.MasterForKey(ctx, b.m.store.Keys().Outbox(bgjobs.Tag("alpha", s)))
		require.NoError(t, err)
		perMaster[node.Options().Addr]++
		sessions = append(sessions, s)
	}
	jobs := map[string]string{} // job id → session
	for _, s := range sessions {
		j := b.spawn(t, echoSpawn(s, "x", 0, false))
		r := "done"
		_, err := b.m.store.Settle(ctx, registry.Settlement{Tag: bgjobs.Tag("alpha", s), ID: j.ID,
			Outcome: bgjobs.Outcome{Status: bgjobs.StatusCompleted, Result: &r}, Now: time.Now(), Announce: true})
		require.NoError(t, err)
		n, err := rdb.ZCard(ctx, b.m.store.Keys().Outbox(bgjobs.Tag("alpha", s))).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "the crash left %s's follow-up in its outbox", s)
		jobs[j.ID] = s
	}
	t.Logf("%d sessions' outboxes on the masters: %v", len(sessions), perMaster)

	b.startWorker(t) // its reconciler sweeps outboxes at start
	testenv.Eventually(t, 30*time.Second, "a resume for every session", func() bool { return len(rr.listed()) == len(jobs) })
	_, err := b.m.Reconcile(ctx)
	require.NoError(t, err)
	time.Sleep(500 * time.Millisecond)
	for id, n := range rr.listed() {
		require.Equal(t, 1, n, "job %s of %s announced once", id, jobs[id])
	}
	for _, s := range sessions {
		n, err := rdb.ZCard(ctx, b.m.store.Keys().Outbox(bgjobs.Tag("alpha", s))).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s's outbox is empty", s)
	}
}

// setupOnACluster starts a 3-master Redis Cluster of its own for a parallel
// test and a manager on it.
func setupOnACluster(t *testing.T, opts ...setupOpt) (*testBundle, *redis.ClusterClient) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	t.Parallel()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.StartRedisCluster(t, 3)})
	t.Cleanup(func() { _ = rdb.Close() })
	return setupOn(t, &testenv.Env{RDB: rdb, Namespace: testenv.NewNamespace()}, opts...), rdb
}

func minCount(m map[string]int) int {
	least := -1
	for _, n := range m {
		if least < 0 || n < least {
			least = n
		}
	}
	return least
}

// On a 3-master Redis Cluster, the reconciler reads rows spread over every
// master and their tasks on the work queue's slot, a page at a time, and
// settles exactly the jobs whose task is gone.
func TestLostJobsOnAClusterAreSettled(t *testing.T) {
	b, rdb := setupOnACluster(t)
	ctx := context.Background()

	var jobs []*bgjobs.Job
	masters := map[string]bool{}
	for i := range 300 {
		s := fmt.Sprint("chat-", i%30)
		jobs = append(jobs, b.spawn(t, echoSpawn(s, "x", 0, false)))
		node, err := rdb.MasterForKey(ctx, b.m.store.Keys().Job(bgjobs.Tag("alpha", s), jobs[i].ID))
		require.NoError(t, err)
		masters[node.Options().Addr] = true
	}
	require.Len(t, masters, 3, "rows on every master")
	lost := map[string]bool{jobs[7].ID: true, jobs[250].ID: true}
	for id := range lost {
		require.NoError(t, b.m.Inspector().DeleteTask(b.m.Queue(QueueWork), id))
	}
	later := time.Now().Add(2 * maintenance.ReconcileGrace)
	b.now.Store(&later)
	n, err := b.m.Reconcile(ctx)
	require.NoError(t, err)
	require.Equal(t, len(lost), n)
	for _, j := range jobs {
		want := bgjobs.StatusQueued
		if lost[j.ID] {
			want = bgjobs.StatusFailed
		}
		require.Equal(t, want, b.statusOf(t, j.ID), j.ID)
	}
}
