// Package stats is what the bench reads besides time: medians of rounds,
// the CPU of this process and of the Redis server, the commands Redis ran,
// and this process's memory.
package stats

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
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
}

// Meter reads the counters before a phase; its result, after, is the
// phase's cost per job. A counter it cannot read is left at zero.
func Meter(ctx context.Context, rdb redis.UniversalClient) func(jobs int) Cost {
	p0, r0 := ProcessCPU(), RedisCPU(ctx, rdb)
	c0, _ := CommandsProcessed(ctx, rdb)
	return func(jobs int) Cost {
		n := time.Duration(max(jobs, 1))
		c1, _ := CommandsProcessed(ctx, rdb)
		return Cost{
			Process:  (ProcessCPU() - p0) / n,
			Redis:    (RedisCPU(ctx, rdb) - r0) / n,
			Commands: float64(c1-c0) / float64(n),
		}
	}
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
	}
}

// Print writes c as one line under label.
func (c Cost) Print(out io.Writer, label string) {
	fmt.Fprintf(out, "  %-34s this process %4.0f µs CPU   Redis %4.0f µs CPU, %4.1f commands\n",
		label, float64(c.Process)/float64(time.Microsecond), float64(c.Redis)/float64(time.Microsecond), c.Commands)
}

// RedisCPU is the server's own CPU time (INFO cpu).
func RedisCPU(ctx context.Context, rdb redis.UniversalClient) time.Duration {
	f, _ := InfoFields(ctx, rdb, "cpu")
	sys, _ := strconv.ParseFloat(f["used_cpu_sys"], 64)
	user, _ := strconv.ParseFloat(f["used_cpu_user"], 64)
	return time.Duration((sys + user) * float64(time.Second))
}

// CommandsProcessed is the server's total_commands_processed.
func CommandsProcessed(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	f, err := InfoFields(ctx, rdb, "stats")
	if err != nil {
		return 0, err
	}
	v, ok := f["total_commands_processed"]
	if !ok {
		return 0, fmt.Errorf("no total_commands_processed in INFO stats")
	}
	return strconv.ParseInt(v, 10, 64)
}

// InfoFields is one section of the server's INFO, field by field.
func InfoFields(ctx context.Context, rdb redis.UniversalClient, section string) (map[string]string, error) {
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
