package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/agents"
	"github.com/bgjobs/bgjobs/handlers"
	"github.com/bgjobs/bgjobs/internal/bench/loadgen"
	"github.com/bgjobs/bgjobs/internal/bench/stats"
	"github.com/bgjobs/bgjobs/internal/netguard"
	"github.com/bgjobs/bgjobs/internal/redisns"
	"github.com/bgjobs/bgjobs/tasks"
)

// joinShapes are the batch-join phases: batches × members.
var joinShapes = [][2]int{{10, 1000}, {1000, 10}}

// joinBaselines are the ratios the issue measured before this bench.
var joinBaselines = map[[2]int]string{{10, 1000}: "0.92–0.93", {1000, 10}: "0.72–0.77"}

// Joins measures fan-outs joined into one wake-up each: batches of no-op
// members spawned over HTTP, timed until every batch's join resume has
// reached its agent, as member jobs a second; beside BullMQ flows (a
// parent per flow that runs once its children are done) on the same Redis
// at the same concurrency, rounds alternating, medians reported. BullMQ
// runs from bullmqDir with node; without node it is not measured.
func Joins(ctx context.Context, o Options, rdb redis.UniversalClient, redisURL string, out io.Writer) error {
	bull := bullmqDir()
	node, nodeErr := exec.LookPath("node")
	fmt.Fprintf(out, "\nbatch joins: member jobs/s until every join resume is received, worker concurrency %d, %d HTTP clients, median of %d rounds\n",
		o.Concurrency, o.Clients, o.Rounds)
	for _, shape := range joinShapes {
		var mine, theirs []time.Duration
		for range o.Rounds {
			d, err := bgjobsJoins(ctx, rdb, o, shape[0], shape[1])
			if err != nil {
				return fmt.Errorf("joins %d×%d: %w", shape[0], shape[1], err)
			}
			mine = append(mine, d)
			if nodeErr != nil || bull == "" || redisURL == "" {
				continue
			}
			if d, err = bullmqFlows(ctx, node, bull, redisURL, o, shape[0], shape[1]); err != nil {
				return fmt.Errorf("bullmq %d×%d: %w", shape[0], shape[1], err)
			}
			theirs = append(theirs, d)
		}
		n := float64(shape[0] * shape[1])
		rate := n / stats.Median(mine).Seconds()
		line := fmt.Sprintf("  %4d batches × %4d members   bgjobs %7.0f jobs/s", shape[0], shape[1], rate)
		if len(theirs) > 0 {
			peer := n / stats.Median(theirs).Seconds()
			spread := stats.Spread(stats.Rates(int(n), mine), stats.Rates(int(n), theirs))
			line += fmt.Sprintf("   BullMQ flows %7.0f jobs/s   ratio %.2f (%s)", peer, rate/peer,
				stats.Notes("goal ≥ 1.20", "baseline "+joinBaselines[shape], spread))
		} else {
			line += "   BullMQ: not measured (needs node, `npm ci` in internal/bench/bullmq, and a real Redis)"
		}
		fmt.Fprintln(out, line)
	}
	return nil
}

// bullmqDir is internal/bench/bullmq with its modules installed, or "".
func bullmqDir() string {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "bullmq")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "bullmq")); err != nil {
		return ""
	}
	return dir
}

func bullmqFlows(ctx context.Context, node, dir, redisURL string, o Options, batches, size int) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, node, "flows.mjs", redisURL, fmt.Sprint(batches), fmt.Sprint(size), fmt.Sprint(o.Concurrency), fmt.Sprint(o.Clients))
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, stderr.String())
	}
	var res struct {
		ElapsedMS float64 `json:"elapsed_ms"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return 0, fmt.Errorf("%v: %s", err, raw)
	}
	return time.Duration(res.ElapsedMS * float64(time.Millisecond)), nil
}

// bgjobsJoins spawns batches over HTTP from o.Clients clients, each batch
// in a session of its own, and waits for every join's webhook resume.
func bgjobsJoins(ctx context.Context, rdb redis.UniversalClient, o Options, batches, size int) (time.Duration, error) {
	ns := namespace()
	defer redisns.DropNamespace(context.Background(), rdb, ns)
	cfg := bgjobs.Config{Namespace: ns, WorkConcurrency: o.Concurrency, PollInterval: o.Poll, AgentAllow: []string{"127.0.0.1"}}.WithDefaults()
	m := tasks.NewManager(rdb, cfg, tasks.Deps{Logger: quiet, Resumer: agents.NewA2A(netguard.NewAllow(cfg.AgentAllow))})
	defer m.Close()
	w := m.NewWorker()
	if err := w.Start(ctx); err != nil {
		return 0, err
	}
	defer w.Shutdown()
	api, stopAPI, err := loadgen.Serve(handlers.NewServer(cfg, handlers.Deps{Manager: m, Log: quiet}))
	if err != nil {
		return 0, err
	}
	defer stopAPI()
	arr := &arrivals{at: map[string]time.Time{}}
	hookURL, stopHook, err := loadgen.Serve(arr.webhook())
	if err != nil {
		return 0, err
	}
	defer stopHook()
	if err := m.PutAgent(ctx, &bgjobs.Agent{Name: handlers.OpenAgent, Resume: bgjobs.ResumeWebhook, WebhookURL: hookURL, WebhookSecret: "k"}); err != nil {
		return 0, err
	}
	member := `{"kind":"work","description":"member","work":{"type":"echo","args":{"text":"m"}}}`
	members := strings.Repeat(member+",", size-1) + member
	pc, err := loadgen.New(api, o.Clients+1)
	if err != nil {
		return 0, err
	}
	defer pc.Close()
	ids := make([]string, batches)
	start := time.Now()
	if err := loadgen.FanOut(batches, o.Clients, func(i int) error {
		body := fmt.Sprintf(`{"origin_session":"join-%d","jobs":[%s]}`, i, members)
		status, raw, err := pc.Post("/v1/batches", []byte(body))
		if err != nil {
			return err
		}
		if status != http.StatusAccepted {
			return fmt.Errorf("batch: %d %s", status, raw)
		}
		var res bgjobs.BatchResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return err
		}
		ids[i] = res.BatchID
		return nil
	}); err != nil {
		return 0, err
	}
	var last time.Time
	for _, id := range ids {
		at, err := arr.wait(id, 5*time.Minute)
		if err != nil {
			return 0, err
		}
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(start), nil
}

// redisURLOf is the URL node's Redis client should use for rdb's server.
func redisURLOf(rdb redis.UniversalClient) string {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return ""
	}
	opt := c.Options()
	u := &url.URL{Scheme: "redis", Host: opt.Addr, Path: fmt.Sprint("/", opt.DB)}
	if opt.Password != "" {
		u.User = url.UserPassword(opt.Username, opt.Password)
	}
	return u.String()
}
