package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSessions spreads the cluster phase's jobs over sessions, so the
// per-session keys land on every master (one session is one slot).
const clusterSessions = 16

// Cluster measures HTTP spawn and end-to-end throughput on a private
// 3-master Redis Cluster beside one private redis-server on the same
// machine, rounds alternating, medians reported.
func Cluster(ctx context.Context, o Options, out io.Writer) error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		fmt.Fprintln(out, "cluster vs one Redis: not measured (redis-server is not installed)")
		return nil
	}
	dir, err := os.MkdirTemp("", "bgjobs-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()
	start := func(extra ...string) (string, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		d := filepath.Join(dir, strconv.Itoa(port))
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
		cmd := exec.Command("redis-server", append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", d,
			"--save", "", "--appendonly", "no"}, extra...)...)
		if err := cmd.Start(); err != nil {
			return "", err
		}
		procs = append(procs, cmd)
		addr := "127.0.0.1:" + strconv.Itoa(port)
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		for deadline := time.Now().Add(10 * time.Second); c.Ping(ctx).Err() != nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				return "", fmt.Errorf("redis-server on %s did not come up", addr)
			}
		}
		return addr, nil
	}

	single, err := start()
	if err != nil {
		return err
	}
	var nodes []string
	for range 3 {
		addr, err := start("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
		if err != nil {
			return err
		}
		nodes = append(nodes, addr)
	}
	if b, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, nodes...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-cli --cluster create: %v: %s", err, b)
	}
	one := redis.NewClient(&redis.Options{Addr: single})
	defer one.Close()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: nodes})
	defer cluster.Close()
	for deadline := time.Now().Add(20 * time.Second); !clusterOK(ctx, cluster); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the bench's cluster did not become ok")
		}
	}

	o.Jobs = max(1000, o.Jobs/2)
	targets := []redis.UniversalClient{one, cluster}
	var spawn, e2e [2][]time.Duration
	for range o.Rounds {
		for i, rdb := range targets {
			d, err := spawnOnly(ctx, rdb, o, clusterSessions)
			if err != nil {
				return fmt.Errorf("spawn on %T: %w", rdb, err)
			}
			spawn[i] = append(spawn[i], d)
			if d, err = endToEnd(ctx, rdb, o, clusterSessions); err != nil {
				return fmt.Errorf("end to end on %T: %w", rdb, err)
			}
			e2e[i] = append(e2e[i], d)
		}
	}
	rate := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(o.Jobs) / ds[len(ds)/2].Seconds()
	}
	fmt.Fprintf(out, "cluster (3 masters) vs one redis-server, both private on this machine, %d jobs over %d sessions, median of %d rounds:\n",
		o.Jobs, clusterSessions, o.Rounds)
	for _, l := range []struct {
		label string
		d     [2][]time.Duration
	}{{"HTTP spawn", spawn}, {"end to end (spawn → worker → settle → drain)", e2e}} {
		one, many := rate(l.d[0]), rate(l.d[1])
		fmt.Fprintf(out, "  %-46s one Redis %7.0f jobs/s, cluster %7.0f jobs/s, ratio %.2f (goal ≥ 1.00)\n", l.label, one, many, many/one)
	}
	return nil
}

func clusterOK(ctx context.Context, c *redis.ClusterClient) bool {
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil || !strings.Contains(info, "cluster_state:ok") {
		return false
	}
	// Every master must know the layout before the first write.
	bad := false
	_ = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		if i, err := n.ClusterInfo(ctx).Result(); err != nil || !strings.Contains(i, "cluster_state:ok") {
			bad = true
		}
		return nil
	})
	return !bad
}
