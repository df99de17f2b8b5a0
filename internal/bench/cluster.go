package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs/internal/bench/stats"
	"github.com/bgjobs/bgjobs/internal/redisconn"
	"github.com/bgjobs/bgjobs/internal/redisproc"
)

// clusterSessions spreads the cluster phase's jobs over sessions, so the
// per-session keys land on every master (one session is one slot).
const clusterSessions = 16

// Cluster measures HTTP spawn and end-to-end throughput on a private
// 3-master Redis Cluster beside one private redis-server on the same
// machine, and on a cluster of one master, rounds alternating, medians
// reported.
func Cluster(ctx context.Context, o Options, out io.Writer) error {
	dir, err := os.MkdirTemp("", "bgjobs-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var procs []*redisproc.Server
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	// No persistence: one Redis and the cluster alike measure memory.
	start := func(extra ...string) (*redisproc.Server, error) {
		d, err := os.MkdirTemp(dir, "redis")
		if err != nil {
			return nil, err
		}
		s, err := redisproc.Start(d, append([]string{"--appendonly", "no"}, extra...)...)
		if err == nil {
			procs = append(procs, s)
		}
		return s, err
	}
	single, err := start()
	if errors.Is(err, redisproc.ErrNotInstalled) {
		fmt.Fprintln(out, "cluster vs one Redis: not measured (redis-server and redis-cli are not installed)")
		return nil
	}
	if err != nil {
		return err
	}
	// A cluster of one master (every slot on one node) sets apart what
	// cluster mode and its client cost from what spreading the keys over
	// three servers on these same cores costs.
	cluster := func(n int) ([]string, error) {
		var nodes []string
		for range n {
			d, err := os.MkdirTemp(dir, "node")
			if err != nil {
				return nil, err
			}
			s, err := start(redisproc.ClusterNode(d)...)
			if err != nil {
				return nil, err
			}
			nodes = append(nodes, s.Addr())
		}
		return nodes, redisproc.CreateCluster(ctx, nodes)
	}
	soloNode, err := cluster(1)
	if err != nil {
		return err
	}
	nodes, err := cluster(3)
	if err != nil {
		return err
	}
	// Opened as serve and worker open them, from their URLs: the same
	// protocol and pool as a deployment.
	names := []string{"one Redis", "one master", "cluster"}
	targets := make([]redis.UniversalClient, len(names))
	for i, url := range []string{"redis://" + single.Addr(), "redis-cluster://" + soloNode[0], "redis-cluster://" + strings.Join(nodes, ",")} {
		if targets[i], err = redisconn.Open(url); err != nil {
			return err
		}
		defer targets[i].Close()
	}

	o.Jobs = max(1000, o.Jobs/2)
	var spawn, e2e, raw [3][]time.Duration
	var spawnCost, e2eCost [3][]stats.Cost
	for range o.Rounds {
		for i, rdb := range targets {
			// asynq alone on the same servers: what a cluster on this
			// machine gives any client, bgjobs' ceiling here.
			s, err := rawAsynq(ctx, rdb, o, []int{o.Concurrency})
			if err != nil {
				return fmt.Errorf("raw asynq on %s: %w", names[i], err)
			}
			raw[i] = append(raw[i], s.Took)
			if s, err = spawnOnly(ctx, rdb, o, clusterSessions); err != nil {
				return fmt.Errorf("spawn on %s: %w", names[i], err)
			}
			spawn[i], spawnCost[i] = append(spawn[i], s.Took), append(spawnCost[i], s.Cost)
			if s, err = endToEnd(ctx, rdb, o, clusterSessions); err != nil {
				return fmt.Errorf("end to end on %s: %w", names[i], err)
			}
			e2e[i], e2eCost[i] = append(e2e[i], s.Took), append(e2eCost[i], s.Cost)
		}
	}
	rate := func(ds []time.Duration) float64 {
		return float64(o.Jobs) / stats.Median(ds).Seconds()
	}
	fmt.Fprintf(out, "cluster (3 masters) vs one redis-server, both private on this machine, %d jobs over %d sessions, median of %d rounds:\n",
		o.Jobs, clusterSessions, o.Rounds)
	for _, l := range []struct {
		label string
		d     [3][]time.Duration
		goal  string
	}{
		{"HTTP spawn", spawn, "goal ≥ 1.00"},
		{"end to end (spawn → worker → settle → drain)", e2e, "goal ≥ 1.00"},
		{"raw asynq, enqueue → no-op handler", raw, "the machine's ceiling, no goal"},
	} {
		one, many := rate(l.d[0]), rate(l.d[2])
		spread := stats.Spread(stats.Rates(o.Jobs, l.d[2]), stats.Rates(o.Jobs, l.d[0]))
		fmt.Fprintf(out, "  %-46s one Redis %7.0f jobs/s, cluster %7.0f jobs/s, ratio %.2f (%s; one master in cluster mode %.2f)\n", l.label, one, many, many/one,
			stats.Notes(l.goal, spread), rate(l.d[1])/one)
	}
	// Where a cluster's job costs more: this process (the cluster client
	// splits each pipeline by node) or the servers (all masters summed),
	// and how much of it comes with cluster mode alone.
	fmt.Fprintln(out, "  per job (median of rounds; Redis is every master's CPU and commands summed):")
	for _, c := range []struct {
		label string
		costs [3][]stats.Cost
	}{{"HTTP spawn", spawnCost}, {"end to end", e2eCost}} {
		for i, name := range names {
			stats.MedianCost(c.costs[i]).Print(out, c.label+", "+name)
		}
	}
	return nil
}
