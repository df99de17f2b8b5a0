package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// cost is what one phase spent per job: CPU of this process (bgjobs or
// asynq and the load that drives it), CPU of the Redis server, and the
// commands Redis ran (those inside scripts included). Throughput on a
// shared 2-core machine swings with its neighbours; these move far less,
// so a change that saves work shows here even when the rates are noisy.
type cost struct {
	process, redis time.Duration
	commands       float64
}

// meter reads the counters before a phase; its result, after, is the
// phase's cost per job. A counter it cannot read is left at zero.
func meter(ctx context.Context, rdb redis.UniversalClient) func(jobs int) cost {
	p0, r0 := processCPU(), redisCPU(ctx, rdb)
	c0, _ := commandsProcessed(ctx, rdb)
	return func(jobs int) cost {
		n := time.Duration(max(jobs, 1))
		c1, _ := commandsProcessed(ctx, rdb)
		return cost{
			process:  (processCPU() - p0) / n,
			redis:    (redisCPU(ctx, rdb) - r0) / n,
			commands: float64(c1-c0) / float64(n),
		}
	}
}

// redisCPU is the server's own CPU time (INFO cpu).
func redisCPU(ctx context.Context, rdb redis.UniversalClient) time.Duration {
	f, _ := infoFields(ctx, rdb, "cpu")
	sys, _ := strconv.ParseFloat(f["used_cpu_sys"], 64)
	user, _ := strconv.ParseFloat(f["used_cpu_user"], 64)
	return time.Duration((sys + user) * float64(time.Second))
}

// infoFields is one section of the server's INFO, field by field.
func infoFields(ctx context.Context, rdb redis.UniversalClient, section string) (map[string]string, error) {
	info, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	fields := map[string]string{}
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields, nil
}

// medianCost is the median of each figure over the rounds.
func medianCost(cs []cost) cost {
	if len(cs) == 0 {
		return cost{}
	}
	med := func(f func(cost) float64) float64 {
		v := make([]float64, len(cs))
		for i, c := range cs {
			v[i] = f(c)
		}
		return median(v)
	}
	return cost{
		process:  time.Duration(med(func(c cost) float64 { return float64(c.process) })),
		redis:    time.Duration(med(func(c cost) float64 { return float64(c.redis) })),
		commands: med(func(c cost) float64 { return c.commands }),
	}
}

func (c cost) print(out io.Writer, label string) {
	fmt.Fprintf(out, "  %-34s this process %4.0f µs CPU   Redis %4.0f µs CPU, %4.1f commands\n",
		label, float64(c.process)/float64(time.Microsecond), float64(c.redis)/float64(time.Microsecond), c.commands)
}
