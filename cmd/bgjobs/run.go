package main

import (
	"context"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/app"
	"github.com/bgjobs/bgjobs/internal/bench"
)

// run is the whole program, testable with its own args, environment and
// output.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	defaultGC(getenv)
	root := &cobra.Command{
		Use:           "bgjobs",
		Short:         "Background work for AI agents, reported back to the conversation that asked for it",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// A bad flag or argument prints the command's usage with the error.
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		cmd.PrintErrln("Error:", err)
		cmd.PrintErrln(cmd.UsageString())
		return err
	})
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(processCmd(ctx, "serve", "Run the HTTP API, the workers and the reconciler", app.ModeServe, getenv, stdout))
	root.AddCommand(benchCmd(ctx, stdout))
	root.AddCommand(reindexCmd(ctx, getenv, stdout))
	root.AddCommand(opsCommands(ctx, getenv, stdout)...)
	root.AddCommand(processCmd(ctx, "worker", "Run workers and the reconciler only, against a shared REDIS_URL", app.ModeWorker, getenv, stdout))
	return root.ExecuteContext(ctx)
}

// gcPercentDefault is the Go GC target bgjobs runs with when GOGC is not
// set. Its live heap is small (tens of MB) and every job allocates, so at
// Go's default of 100 the collector runs several times a second under load
// and takes about an eighth of the process's CPU; at 400 it runs a quarter
// as often, for a heap up to five times the live one (make bench prints
// both). GOGC, and GOMEMLIMIT to cap memory, still decide when set.
const gcPercentDefault = 400

// defaultGC applies gcPercentDefault unless the environment chose a GC
// target of its own (the runtime read GOGC already).
func defaultGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercentDefault)
	}
}

// processCmd builds serve or worker: configuration from the environment,
// with flags winning over variables.
func processCmd(ctx context.Context, name, short string, mode app.Mode, getenv func(string) string, stdout io.Writer) *cobra.Command {
	var addr, redisURL, dataDir string
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := bgjobs.Load(getenv)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("addr") {
				cfg.Addr = addr
			}
			if cmd.Flags().Changed("redis-url") {
				cfg.RedisURL = redisURL
			}
			if cmd.Flags().Changed("data-dir") {
				cfg.DataDir = dataDir
			}
			return app.Run(ctx, cfg, mode, stdout, app.Options{})
		},
	}
	if mode == app.ModeServe { // a worker listens nowhere
		cmd.Flags().StringVar(&addr, "addr", bgjobs.AddrDefault, "listen address (BGJOBS_ADDR)")
	}
	cmd.Flags().StringVar(&redisURL, "redis-url", "", "Redis URL: redis://, rediss://, redis-sentinel:// (REDIS_URL); empty: embedded")
	cmd.Flags().StringVar(&dataDir, "data-dir", bgjobs.DataDirDefault, "search index directory (BGJOBS_DATA_DIR)")
	return cmd
}

// benchCmd runs internal/bench.
func benchCmd(ctx context.Context, stdout io.Writer) *cobra.Command {
	o := bench.Options{}
	var cpuProfile, memProfile string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure bgjobs end to end beside raw asynq on the same Redis",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if err := bench.Run(ctx, o, stdout); err != nil {
				return err
			}
			if memProfile == "" {
				return nil
			}
			f, err := os.Create(memProfile)
			if err != nil {
				return err
			}
			defer f.Close()
			return pprof.Lookup("allocs").WriteTo(f, 0)
		},
	}
	cmd.Flags().StringVar(&o.RedisURL, "redis-url", "", "Redis to measure on (default "+bench.LocalRedisDefault+", embedded if it does not answer)")
	cmd.Flags().IntVar(&o.Jobs, "jobs", 10000, "jobs per phase")
	cmd.Flags().IntVar(&o.RecallDocs, "recall-docs", 50000, "documents in the recall phase's corpus (0 skips it)")
	cmd.Flags().IntVar(&o.Concurrency, "concurrency", 50, "worker concurrency of both phases")
	cmd.Flags().IntVar(&o.FetchLoops, "fetch-loops", bgjobs.MaxFetchLoopsDefault, "most work fetch loops of bgjobs (BGJOBS_MAX_FETCH_LOOPS); the split baseline gets the same split")
	cmd.Flags().IntVar(&o.Clients, "clients", 32, "concurrent HTTP clients spawning")
	cmd.Flags().IntVar(&o.Rounds, "rounds", 3, "runs of each throughput phase, alternating; the median is reported")
	cmd.Flags().IntVar(&o.Samples, "samples", 200, "resumes timed per target in the latency phase (0 skips it)")
	cmd.Flags().StringSliceVar(&o.Only, "only", nil, "run only these phases (comma-separated): "+strings.Join(bench.Phases, ", "))
	cmd.Flags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	cmd.Flags().StringVar(&memProfile, "memprofile", "", "write an allocation profile of the whole run to this file")
	cmd.Flags().DurationVar(&o.Poll, "poll", bgjobs.PollIntervalDefault, "idle worker poll interval of both phases")
	return cmd
}

// reindexCmd rebuilds the search index from the reports stream.
func reindexCmd(ctx context.Context, getenv func(string) string, stdout io.Writer) *cobra.Command {
	var redisURL, dataDir string
	cmd := &cobra.Command{
		Use:   "reindex",
		Short: "Rebuild the search index from the reports stream (stop serve first)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := bgjobs.Load(getenv)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("redis-url") {
				cfg.RedisURL = redisURL
			}
			if cmd.Flags().Changed("data-dir") {
				cfg.DataDir = dataDir
			}
			return app.Reindex(ctx, cfg, stdout)
		},
	}
	cmd.Flags().StringVar(&redisURL, "redis-url", "", "Redis URL (REDIS_URL)")
	cmd.Flags().StringVar(&dataDir, "data-dir", bgjobs.DataDirDefault, "search index directory (BGJOBS_DATA_DIR)")
	return cmd
}
