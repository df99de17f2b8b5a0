// Package stats is what the bench reads besides time: medians of rounds,
// the CPU of this process and of the Redis server, the commands Redis ran,
// and this process's memory.
package stats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Median is the middle of v (the upper of the two middles of an even
// count), v left as it was.
func Median[T cmp.Ordered](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// Spread is "rounds lo–hi", the lowest and highest of the ratios
// num[i]/den[i], each taken within one round: the medians make the ratio
// a line reports, this says how far single rounds strayed from it on a
// machine whose speed drifts between rounds. Rounds missing from either
// side are left out; fewer than two rounds give "".
func Spread(num, den []float64) string {
	var lo, hi float64
	n := 0
	for i := range min(len(num), len(den)) {
		if den[i] <= 0 {
			continue
		}
		r := num[i] / den[i]
		if n == 0 || r < lo {
			lo = r
		}
		if n == 0 || r > hi {
			hi = r
		}
		n++
	}
	if n < 2 {
		return ""
	}
	return fmt.Sprintf("rounds %.2f–%.2f", lo, hi)
}

// Rates turns the durations of rounds of jobs each into rates.
func Rates(jobs int, ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(jobs) / d.Seconds()
	}
	return out
}

// Cost is what one phase spent per job: CPU of this process (bgjobs or
// asynq and the load that drives it), CPU of the Redis server, and the
// commands Redis ran (those inside scripts included). Throughput on a
// shared 2-core machine swings with its neighbours; these move far less,
// so a change that saves work shows here even when the rates are noisy.
type Cost struct {
	Process, Redis time.Duration
	Commands       float64
	// Busy is the share of the machine's cores that were busy over the
	// phase, every process counted (0 where /proc/stat is not there): a
	// phase well under 1 waits on something other than CPU.
	Busy float64
}

// Meter reads the counters before a phase; its result, after, is the
// phase's cost per job. A counter it cannot read (rdb nil: no Redis) is
// left at zero.
func Meter(ctx context.Context, rdb redis.UniversalClient) func(jobs int) Cost {
	p0, r0 := ProcessCPU(), RedisCPU(ctx, rdb)
	c0, _ := CommandsProcessed(ctx, rdb)
	b0, t0 := MachineTicks()
	return func(jobs int) Cost {
		n := time.Duration(max(jobs, 1))
		c1, _ := CommandsProcessed(ctx, rdb)
		b1, t1 := MachineTicks()
		c := Cost{
			Process:  (ProcessCPU() - p0) / n,
			Redis:    (RedisCPU(ctx, rdb) - r0) / n,
			Commands: float64(c1-c0) / float64(n),
		}
		if t1 > t0 {
			c.Busy = float64(b1-b0) / float64(t1-t0)
		}
		return c
	}
}

// Sample is one timed run: how long it took and what it spent per job.
type Sample struct {
	Took time.Duration
	Cost Cost
}

// Clock starts timing and metering a run; calling what it returns ends it.
func Clock(ctx context.Context, rdb redis.UniversalClient) func(jobs int) Sample {
	meter, start := Meter(ctx, rdb), time.Now()
	return func(jobs int) Sample {
		took := time.Since(start)
		return Sample{Took: took, Cost: meter(jobs)}
	}
}

// MachineTicks are the machine's busy and total CPU ticks so far, every
// core and process counted (the first line of /proc/stat; idle and iowait
// are not busy). Zeros where it cannot be read.
func MachineTicks() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, f := range fields[1:] {
		v, _ := strconv.ParseUint(f, 10, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

// MedianCost is the median of each figure over the rounds.
func MedianCost(cs []Cost) Cost {
	if len(cs) == 0 {
		return Cost{}
	}
	med := func(f func(Cost) float64) float64 {
		v := make([]float64, len(cs))
		for i, c := range cs {
			v[i] = f(c)
		}
		return Median(v)
	}
	return Cost{
		Process:  time.Duration(med(func(c Cost) float64 { return float64(c.Process) })),
		Redis:    time.Duration(med(func(c Cost) float64 { return float64(c.Redis) })),
		Commands: med(func(c Cost) float64 { return c.Commands }),
		Busy:     med(func(c Cost) float64 { return c.Busy }),
	}
}

// Print writes c as one line under label.
func (c Cost) Print(out io.Writer, label string) {
	busy := ""
	if c.Busy > 0 {
		busy = fmt.Sprintf("   machine %3.0f %% busy", 100*c.Busy)
	}
	fmt.Fprintf(out, "  %-34s this process %4.0f µs CPU   Redis %4.0f µs CPU, %4.1f commands%s\n",
		label, float64(c.Process)/float64(time.Microsecond), float64(c.Redis)/float64(time.Microsecond), c.Commands, busy)
}

// RedisCPU is the server's own CPU time (INFO cpu), summed over the
// masters of a cluster.
func RedisCPU(ctx context.Context, rdb redis.UniversalClient) time.Duration {
	var total time.Duration
	_ = eachServer(ctx, rdb, func(c redis.UniversalClient) error {
		f, _ := InfoFields(ctx, c, "cpu")
		sys, _ := strconv.ParseFloat(f["used_cpu_sys"], 64)
		user, _ := strconv.ParseFloat(f["used_cpu_user"], 64)
		total += time.Duration((sys + user) * float64(time.Second))
		return nil
	})
	return total
}

// eachServer calls f with rdb, or with each master of a cluster in turn:
// a cluster's INFO goes to one node, and its counters are the sum over
// all of them.
func eachServer(ctx context.Context, rdb redis.UniversalClient, f func(redis.UniversalClient) error) error {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return f(rdb)
	}
	var mu sync.Mutex
	return cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		return f(c)
	})
}

// CommandsProcessed is the server's total_commands_processed, summed over
// the masters of a cluster.
func CommandsProcessed(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	var total int64
	err := eachServer(ctx, rdb, func(c redis.UniversalClient) error {
		f, err := InfoFields(ctx, c, "stats")
		if err != nil {
			return err
		}
		v, ok := f["total_commands_processed"]
		if !ok {
			return fmt.Errorf("no total_commands_processed in INFO stats")
		}
		n, err := strconv.ParseInt(v, 10, 64)
		total += n
		return err
	})
	return total, err
}

// InfoFields is one section of the server's INFO, field by field.
func InfoFields(ctx context.Context, rdb redis.UniversalClient, section string) (map[string]string, error) {
	if rdb == nil {
		return nil, errors.New("no Redis to read")
	}
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

// ProcessCPU is the user and system time this process has used.
func ProcessCPU() time.Duration {
	ru := rusage()
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// PeakRSS is the most resident memory this process has held, in bytes.
func PeakRSS() int64 {
	return rusage().Maxrss * 1024 // Linux reports KiB
}

// rusage is this process's resource usage; zero if it cannot be read.
func rusage() syscall.Rusage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru
}

// GCPercent is the Go GC target the process runs at (GOGC, or what the
// program set).
func GCPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// Notes joins a line's remarks (goal, baseline, spread), leaving out the
// empty ones.
func Notes(parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), "; ")
}
