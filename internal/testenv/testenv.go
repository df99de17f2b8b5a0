// Package testenv gives each test its own Redis space: a namespace on the
// server named by BGJOBS_TEST_REDIS_URL (CI runs the suite against real
// Redis that way), or a private miniredis when the variable is unset.
package testenv

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/internal/redisns"
	"github.com/bgjobs/bgjobs/internal/redisproc"
)

// Env is one test's Redis space.
type Env struct {
	// RDB is a client on the test's database.
	RDB redis.UniversalClient
	// URL is the Redis URL a subprocess or run() should use; "" means the
	// test runs on an in-process miniredis that only RDB reaches.
	URL string
	// Namespace is the test's own key prefix.
	Namespace string
	// Mini is the miniredis in use, or nil on real Redis.
	Mini *miniredis.Miniredis
}

// Real reports whether the suite runs against a real Redis.
func Real() bool { return os.Getenv("BGJOBS_TEST_REDIS_URL") != "" }

// CI reports whether the suite runs in CI, where a missing dependency must
// fail the test instead of skipping it.
func CI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips t locally and fails it in CI.
func SkipOrFail(t testing.TB, why string) {
	t.Helper()
	if CI() {
		t.Fatalf("CI=true and %s", why)
	}
	t.Skip(why)
}

// NewNamespace returns a fresh key prefix.
func NewNamespace() string { return redisns.Fresh("t") }

// New returns a Redis space for t and removes it when t ends.
func New(t testing.TB) *Env {
	t.Helper()
	ns := NewNamespace()
	if url := os.Getenv("BGJOBS_TEST_REDIS_URL"); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			t.Fatalf("BGJOBS_TEST_REDIS_URL: %v", err)
		}
		rdb := redis.NewClient(opt)
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("BGJOBS_TEST_REDIS_URL does not answer: %v", err)
		}
		t.Cleanup(func() {
			Purge(rdb, ns)
			_ = rdb.Close()
		})
		return &Env{RDB: rdb, URL: url, Namespace: ns}
	}
	return NewMini(t)
}

// NewMini returns a private miniredis for t whatever the environment: for
// the tests that move Redis' clock, which a shared server cannot do.
func NewMini(t testing.TB) *Env {
	t.Helper()
	ns := NewNamespace()
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		t.Fatalf("miniredis: %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() {
		_ = rdb.Close()
		m.Close()
	})
	return &Env{RDB: rdb, URL: "redis://" + m.Addr(), Namespace: ns, Mini: m}
}

// Purge deletes every key of namespace ns, bgjobs' and asynq's alike.
func Purge(rdb redis.UniversalClient, ns string) {
	redisns.DropNamespace(context.Background(), rdb, ns)
}

// FreePort returns a loopback port nobody listens on right now.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// RedisServer is a private redis-server process.
type RedisServer = redisproc.Server

// started registers s to be killed when t ends, or ends t on err.
func started(t testing.TB, s *RedisServer, err error) *RedisServer {
	t.Helper()
	if errors.Is(err, redisproc.ErrNotInstalled) {
		SkipOrFail(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// StartSentinel starts a private sentinel monitoring the master on
// masterPort as name (quorum 1), authenticating to it with password, and
// returns its port.
func StartSentinel(t testing.TB, masterPort int, name, password string) int {
	t.Helper()
	s, err := redisproc.StartSentinel(t.TempDir(), masterPort, name, password)
	return started(t, s, err).Port
}

// StartRedisServer starts a private redis-server on a free loopback port
// with AOF persistence (fsync always), for tests that kill processes.
// extra are more redis-server arguments ("--requirepass", "s3cret").
func StartRedisServer(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	s, err := redisproc.Start(t.TempDir(), extra...)
	return started(t, s, err)
}

// Eventually polls cond every 20ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
}

// RestartRedisServer starts s again on the same port and directory, so it
// reloads its AOF.
func RestartRedisServer(t testing.TB, s *RedisServer) *RedisServer {
	t.Helper()
	n, err := s.Restart()
	return started(t, n, err)
}

// StartRedisCluster starts n private redis-servers as the masters of a
// Redis Cluster (no replicas) and returns their addresses once the
// cluster is ok.
func StartRedisCluster(t testing.TB, n int) []string {
	t.Helper()
	var addrs []string
	for range n {
		addrs = append(addrs, StartRedisServer(t, redisproc.ClusterNode(t.TempDir())...).Addr())
	}
	if err := redisproc.CreateCluster(context.Background(), addrs); err != nil {
		t.Fatal(err)
	}
	return addrs
}
