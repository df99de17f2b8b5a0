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
// machine, rounds alternating, medians reported.
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
	var nodes []string
	for range 3 {
		d, err := os.MkdirTemp(dir, "node")
		if err != nil {
			return err
		}
		s, err := start(redisproc.ClusterNode(d)...)
		if err != nil {
			return err
		}
		nodes = append(nodes, s.Addr())
	}
	if err := redisproc.CreateCluster(ctx, nodes); err != nil {
		return err
	}
	// Opened as serve and worker open them, from their URLs: the same
	// protocol and pool as a deployment.
	one, err := redisconn.Open("redis://" + single.Addr())
	if err != nil {
		return err
	}
	defer one.Close()
	cluster, err := redisconn.Open("redis-cluster://" + strings.Join(nodes, ","))
	if err != nil {
		return err
	}
	defer cluster.Close()

	o.Jobs = max(1000, o.Jobs/2)
	targets := []redis.UniversalClient{one, cluster}
	var spawn, e2e, raw [2][]time.Duration
	var spawnCost, e2eCost [2][]stats.Cost
	for range o.Rounds {
		for i, rdb := range targets {
			// asynq alone on the same servers: what a cluster on this
			// machine gives any client, bgjobs' ceiling here.
			s, err := rawAsynq(ctx, rdb, o, []int{o.Concurrency})
			if err != nil {
				return fmt.Errorf("raw asynq on %T: %w", rdb, err)
			}
			raw[i] = append(raw[i], s.Took)
			if s, err = spawnOnly(ctx, rdb, o, clusterSessions); err != nil {
				return fmt.Errorf("spawn on %T: %w", rdb, err)
			}
			spawn[i], spawnCost[i] = append(spawn[i], s.Took), append(spawnCost[i], s.Cost)
			if s, err = endToEnd(ctx, rdb, o, clusterSessions); err != nil {
				return fmt.Errorf("end to end on %T: %w", rdb, err)
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
		d     [2][]time.Duration
		goal  string
	}{
		{"HTTP spawn", spawn, "goal ≥ 1.00"},
		{"end to end (spawn → worker → settle → drain)", e2e, "goal ≥ 1.00"},
		{"raw asynq, enqueue → no-op handler", raw, "the machine's ceiling, no goal"},
	} {
		one, many := rate(l.d[0]), rate(l.d[1])
		spread := stats.Spread(stats.Rates(o.Jobs, l.d[1]), stats.Rates(o.Jobs, l.d[0]))
		fmt.Fprintf(out, "  %-46s one Redis %7.0f jobs/s, cluster %7.0f jobs/s, ratio %.2f (%s)\n", l.label, one, many, many/one,
			stats.Notes(l.goal, spread))
	}
	// Where a cluster's job costs more: this process (the cluster client
	// splits each pipeline by node) or the servers (all masters summed).
	fmt.Fprintln(out, "  per job (median of rounds; Redis is every master's CPU and commands summed):")
	for _, c := range []struct {
		label string
		costs [2][]stats.Cost
	}{{"HTTP spawn", spawnCost}, {"end to end", e2eCost}} {
		stats.MedianCost(c.costs[0]).Print(out, c.label+", one Redis")
		stats.MedianCost(c.costs[1]).Print(out, c.label+", cluster")
	}
	return nil
}
