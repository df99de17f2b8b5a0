// Package testenv gives each test its own Redis space: a namespace on the
// server named by BGJOBS_TEST_REDIS_URL (CI runs the suite against real
// Redis that way), or a private miniredis when the variable is unset.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/internal/redisns"
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
func NewNamespace() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// RedisServer is a private redis-server process.
type RedisServer struct {
	Port     int
	Dir      string
	cmd      *exec.Cmd
	args     []string
	password string
}

// StartSentinel starts a private sentinel monitoring the master on
// masterPort as name (quorum 1), authenticating to it with password, and
// returns its port.
func StartSentinel(t testing.TB, masterPort int, name, password string) int {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		SkipOrFail(t, "redis-server is not installed")
	}
	port, dir := FreePort(t), t.TempDir()
	conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n", port, dir, name, masterPort)
	if password != "" {
		conf += fmt.Sprintf("sentinel auth-pass %s %s\n", name, password)
	}
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, path, "--sentinel")
	if err := cmd.Start(); err != nil {
		t.Fatalf("sentinel: %v", err)
	}
	s := &RedisServer{Port: port, cmd: cmd}
	t.Cleanup(s.Kill)
	s.waitReady(t)
	return port
}

// StartRedisServer starts a private redis-server on a free loopback port
// with AOF persistence (fsync always), for tests that kill processes.
// extra are more redis-server arguments ("--requirepass", "s3cret").
func StartRedisServer(t testing.TB, extra ...string) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		SkipOrFail(t, "redis-server is not installed")
	}
	s := &RedisServer{Port: FreePort(t), Dir: t.TempDir()}
	s.args = []string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.Dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i] == "--requirepass" {
			s.password = extra[i+1]
		}
	}
	s.args = append(s.args, extra...)
	s.cmd = exec.Command(bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() { s.Kill() })
	s.waitReady(t)
	return s
}

// URL is the server's redis:// URL.
func (s *RedisServer) URL() string { return "redis://127.0.0.1:" + strconv.Itoa(s.Port) + "/0" }

// Kill stops the server with SIGKILL.
func (s *RedisServer) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

func (s *RedisServer) waitReady(t testing.TB) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(s.Port), Password: s.password})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if rdb.Ping(context.Background()).Err() == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("redis-server on port %d did not come up", s.Port)
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
	bin, _ := exec.LookPath("redis-server")
	n := &RedisServer{Port: s.Port, Dir: s.Dir, args: s.args, password: s.password}
	n.cmd = exec.Command(bin, n.args...)
	if err := n.cmd.Start(); err != nil {
		t.Fatalf("redis-server restart: %v", err)
	}
	t.Cleanup(func() { n.Kill() })
	n.waitReady(t)
	return n
}

// StartRedisCluster starts n private redis-servers as the masters of a
// Redis Cluster (no replicas) and returns their addresses once the
// cluster is ok.
func StartRedisCluster(t testing.TB, n int) []string {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		SkipOrFail(t, "redis-cli is not installed")
	}
	var addrs []string
	for range n {
		dir := t.TempDir()
		s := StartRedisServer(t, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000")
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(s.Port))
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	Eventually(t, 20*time.Second, "the cluster to be ok", func() bool {
		var notOK atomic.Bool // the callbacks run at once, one per node
		_ = c.ForEachShard(context.Background(), func(ctx context.Context, node *redis.Client) error {
			info, err := node.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				notOK.Store(true)
			}
			return nil
		})
		return !notOK.Load()
	})
	return addrs
}
