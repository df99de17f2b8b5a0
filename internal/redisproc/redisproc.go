// Package redisproc runs private redis-server processes on free loopback
// ports: for the tests that kill, pause, fail over or cluster Redis
// (through internal/testenv) and for the bench's cluster-vs-single phase.
// The caller stops each server with Kill.
package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotInstalled: redis-server or redis-cli is not on the PATH.
var ErrNotInstalled = errors.New("redis-server and redis-cli must be installed")

// Server is a private redis-server (or sentinel) process.
type Server struct {
	Port     int
	Dir      string
	cmd      *exec.Cmd
	exited   chan struct{} // closed once the process has ended and been reaped
	args     []string
	password string
}

// errPortTaken: the port FreePort gave was taken before the server bound
// it (another test's or the bench's server got there first).
var errPortTaken = errors.New("port taken before the server bound it")

// portTries is how many free ports a start tries.
const portTries = 5

// onFreePort runs start on free ports until one is not taken meanwhile.
func onFreePort(start func(port int) (*Server, error)) (*Server, error) {
	for range portTries - 1 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		if s, err := start(port); !errors.Is(err, errPortTaken) {
			return s, err
		}
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	return start(port)
}

// FreePort returns a loopback port nobody listens on right now.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Start runs redis-server with its files in dir on a free loopback port,
// with AOF persistence (fsync always), for tests that kill it. extra are
// more arguments; a later one overrides ("--appendonly", "no").
func Start(dir string, extra ...string) (*Server, error) {
	return onFreePort(func(port int) (*Server, error) {
		s := &Server{Port: port, Dir: dir}
		s.args = []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no"}
		for i := 0; i+1 < len(extra); i += 2 {
			if extra[i] == "--requirepass" {
				s.password = extra[i+1]
			}
		}
		s.args = append(s.args, extra...)
		return s, s.run("redis-server", s.args...)
	})
}

// Restart starts s again on the same port and directory, so it reloads
// its AOF.
func (s *Server) Restart() (*Server, error) {
	n := &Server{Port: s.Port, Dir: s.Dir, args: s.args, password: s.password}
	return n, n.run("redis-server", n.args...)
}

// StartSentinel runs a sentinel with its files in dir, monitoring the
// master on masterPort as name (quorum 1), authenticating to it with
// password.
func StartSentinel(dir string, masterPort int, name, password string) (*Server, error) {
	return onFreePort(func(port int) (*Server, error) {
		conf := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor %s 127.0.0.1 %d 1\n", port, dir, name, masterPort)
		if password != "" {
			conf += fmt.Sprintf("sentinel auth-pass %s %s\n", name, password)
		}
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		s := &Server{Port: port, Dir: dir}
		return s, s.run("redis-server", path, "--sentinel")
	})
}

// run starts the process and waits until it answers on its port. The
// answer must come from this process (INFO's process_id): a server that
// found its port taken exits, and whoever took the port answers PING.
func (s *Server) run(bin string, args ...string) error {
	path, err := exec.LookPath(bin)
	if err != nil {
		return ErrNotInstalled
	}
	s.cmd = exec.Command(path, args...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", bin, err)
	}
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.password, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond})
	defer rdb.Close()
	pid := "process_id:" + strconv.Itoa(s.cmd.Process.Pid) + "\r\n"
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-s.exited:
			return fmt.Errorf("%s on port %d: %w", bin, s.Port, errPortTaken)
		default:
		}
		info, err := rdb.Info(context.Background(), "server").Result()
		switch {
		case err != nil:
		case strings.Contains(info, pid):
			return nil
		default: // another process's server on the port
			s.Kill()
			return fmt.Errorf("%s on port %d: %w", bin, s.Port, errPortTaken)
		}
	}
	s.Kill()
	return fmt.Errorf("%s on port %d did not come up", bin, s.Port)
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Kill stops the server with SIGKILL and returns once it has ended, so
// its port is free again.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// ClusterNode are the extra arguments of a cluster node whose cluster
// configuration file lives in dir.
func ClusterNode(dir string) []string {
	return []string{"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "2000"}
}

// CreateCluster joins the nodes at addrs as the masters of a Redis Cluster
// (no replicas) and waits until every one of them says it is ok. One node
// alone takes every slot: a cluster in name, one server in fact (redis-cli
// makes clusters of three masters or more).
func CreateCluster(ctx context.Context, addrs []string) error {
	if len(addrs) == 1 {
		c := redis.NewClient(&redis.Options{Addr: addrs[0]})
		err := c.Do(ctx, "cluster", "addslotsrange", 0, 16383).Err()
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("cluster addslotsrange: %w", err)
		}
	} else {
		cli, err := exec.LookPath("redis-cli")
		if err != nil {
			return ErrNotInstalled
		}
		args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
		if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
		}
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var notOK atomic.Bool // the callbacks run at once, one per node
		_ = c.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
			info, err := node.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				notOK.Store(true)
			}
			return nil
		})
		if !notOK.Load() {
			return nil
		}
	}
	return errors.New("the cluster did not become ok within 20 s")
}
