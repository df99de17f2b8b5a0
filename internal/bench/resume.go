package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/agents"
	"github.com/bgjobs/bgjobs/handlers"
	"github.com/bgjobs/bgjobs/internal/bench/loadgen"
	"github.com/bgjobs/bgjobs/internal/netguard"
	"github.com/bgjobs/bgjobs/tasks"
	"github.com/bgjobs/bgjobs/work"
)

// arrivals records when each resume reached the test agent, by trigger,
// and how many reached each session.
type arrivals struct {
	mu       sync.Mutex
	at       map[string]time.Time
	sessions map[string]int
}

func (a *arrivals) markSession(session string) {
	a.mu.Lock()
	if a.sessions == nil {
		a.sessions = map[string]int{}
	}
	a.sessions[session]++
	a.mu.Unlock()
}

func (a *arrivals) count(session string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sessions[session]
}

func (a *arrivals) mark(trigger string) {
	a.mu.Lock()
	if _, ok := a.at[trigger]; !ok {
		a.at[trigger] = time.Now()
	}
	a.mu.Unlock()
}

// webhook is a webhook receiver that notes resumes.
func (a *arrivals) webhook() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Trigger string `json:"trigger"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		a.mark(body.Trigger)
	})
}

// wait returns when a resume for trigger arrived, checking often enough
// not to blur a millisecond figure.
func (a *arrivals) wait(trigger string, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		a.mu.Lock()
		t, ok := a.at[trigger]
		a.mu.Unlock()
		if ok {
			return t, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("no resume for %s within %s", trigger, timeout)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// a2aReceiver is an A2A agent that only notes resumes.
type a2aReceiver struct{ arr *arrivals }

func (r a2aReceiver) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	if rc.Message != nil {
		if tr, _ := rc.Message.Metadata["trigger"].(string); tr != "" {
			r.arr.mark(tr)
		}
		r.arr.markSession(rc.Message.ContextID)
	}
	return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "ok"}))
}

func (a2aReceiver) Cancel(context.Context, *a2asrv.RequestContext, eventqueue.Queue) error {
	return nil
}

// Resume measures completion → resume received, to an A2A agent and to a
// webhook, on an otherwise idle system; then a 1,000-member fan-out spawned
// in one call and the time from its last settle to its join resume.
func Resume(ctx context.Context, o Options, out io.Writer) error {
	// The work share is off: this phase registers two agents, and the
	// storm burst's 50 jobs must all start at once to complete over the
	// 2.5 s it specifies (with a share of half the slots, the second half
	// would start a second later and spread the burst).
	own, err := newOwnManager(ctx, o, bgjobs.Config{WorkConcurrency: o.Concurrency, WorkShare: o.Concurrency, PollInterval: o.Poll, AgentAllow: []string{"127.0.0.1"}},
		func(cfg bgjobs.Config) tasks.Deps {
			runner := agents.NewA2A(netguard.NewAllow(cfg.AgentAllow))
			return tasks.Deps{Logger: quiet, Resumer: runner, Turns: runner}
		})
	if err != nil {
		return err
	}
	defer own.close()
	where, cfg, m := own.where, own.cfg, own.m
	w := m.NewWorker()
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Shutdown()
	api, stopAPI, err := loadgen.Serve(handlers.NewServer(cfg, handlers.Deps{Manager: m, Log: quiet}))
	if err != nil {
		return err
	}
	defer stopAPI()

	arr := &arrivals{at: map[string]time.Time{}}
	a2aURL, stopA2A, err := loadgen.Serve(a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(a2aReceiver{arr})))
	if err != nil {
		return err
	}
	defer stopA2A()
	hookURL, stopHook, err := loadgen.Serve(arr.webhook())
	if err != nil {
		return err
	}
	defer stopHook()

	fmt.Fprintf(out, "\nresume latency (completion → resume received), %d jobs each, one at a time, redis %s\n", o.Samples, where)
	for _, target := range []struct {
		name  string
		agent *bgjobs.Agent
	}{
		{"A2A agent", &bgjobs.Agent{Name: "a2a", A2AURL: a2aURL}},
		{"webhook", &bgjobs.Agent{Name: "hook", Resume: bgjobs.ResumeWebhook, WebhookURL: hookURL, WebhookSecret: "k"}},
	} {
		if err := m.PutAgent(ctx, target.agent); err != nil {
			return err
		}
		lat, err := resumeLatencies(ctx, m, target.agent.Name, arr, o.Samples)
		if err != nil {
			return fmt.Errorf("%s: %w", target.name, err)
		}
		fmt.Fprintf(out, "  %-10s p50 %6.1f ms   p99 %6.1f ms   (goal p50 ≤ 20 ms, p99 ≤ 100 ms)\n",
			target.name, ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99)))
	}
	if err := fanOutJoin(ctx, m, api, arr, out); err != nil {
		return err
	}
	if err := stormBurst(ctx, m, arr, out); err != nil {
		return err
	}
	if err := drainAmidLoad(ctx, m, out); err != nil {
		return err
	}
	return waitLatency(ctx, api, o.Samples, out)
}

// stormBurst: 50 completions of one session spread over 2.5 s, counted as
// the resumes that reach it; then a lone completion after a quiet spell,
// timed from its end to its resume.
func stormBurst(ctx context.Context, m *tasks.Manager, arr *arrivals, out io.Writer) error {
	const session = "storm-burst"
	var ids []string
	for i := range 50 {
		args, _ := json.Marshal(work.EchoArgs{Text: "x", DelayMS: i * 50})
		j, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: "a2a", OriginSession: session, Kind: bgjobs.KindWork,
			Description: "burst", Work: &bgjobs.WorkSpec{Type: "echo", Args: args}})
		if err != nil {
			return err
		}
		ids = append(ids, j.ID)
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, id := range ids {
		for {
			j, err := m.Get(ctx, "a2a", id)
			if err != nil {
				return err
			}
			if j.Status.Terminal() {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("storm burst: %s did not end", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	time.Sleep(5 * time.Second) // the last window closes; then quiet
	burst := arr.count(session)
	j, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: "a2a", OriginSession: session, Kind: bgjobs.KindWork,
		Description: "lone", Work: &bgjobs.WorkSpec{Type: "echo", Args: json.RawMessage(`{"text":"x"}`)}})
	if err != nil {
		return err
	}
	got, err := arr.wait(j.ID, 10*time.Second)
	if err != nil {
		return err
	}
	row, err := m.Get(ctx, "a2a", j.ID)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nstorm guard: 50 completions of one session over 2.5 s: %d resumes (goal ≤ 3; fixed 250 ms windows sent one per window, ~10)\n", burst)
	fmt.Fprintf(out, "  a lone completion after a quiet spell: resumed %.1f ms after it ended\n", ms(got.Sub(*row.CompletedAt)))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func resumeLatencies(ctx context.Context, m *tasks.Manager, agent string, arr *arrivals, n int) ([]time.Duration, error) {
	var lat []time.Duration
	for i := range n {
		j, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: agent, OriginSession: fmt.Sprintf("lat-%d", i), Kind: bgjobs.KindWork,
			Description: "lat", Work: &bgjobs.WorkSpec{Type: "echo", Args: json.RawMessage(`{"text":"x"}`)}})
		if err != nil {
			return nil, err
		}
		got, err := arr.wait(j.ID, 10*time.Second)
		if err != nil {
			return nil, err
		}
		row, err := m.Get(ctx, agent, j.ID)
		if err != nil {
			return nil, err
		}
		if row.CompletedAt == nil {
			return nil, fmt.Errorf("%s has no completion time", j.ID)
		}
		// completed_at has millisecond precision: ±0.5 ms on each sample.
		lat = append(lat, got.Sub(*row.CompletedAt))
		time.Sleep(20 * time.Millisecond) // an idle system between samples
	}
	return lat, nil
}

// fanOutJoin spawns 1,000 members in one HTTP call and measures the call and
// the time from the last member's settle to the join resume.
func fanOutJoin(ctx context.Context, m *tasks.Manager, api string, arr *arrivals, out io.Writer) error {
	const size = tasks.BatchMax
	// Open mode: the API acts as agent "default"; it resumes by webhook.
	hook, err := m.GetAgent(ctx, "hook")
	if err != nil {
		return err
	}
	def := *hook
	def.Name = handlers.OpenAgent
	if err := m.PutAgent(ctx, &def); err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(`{"origin_session":"fan","jobs":[`)
	for i := range size {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"kind":"work","description":"member","work":{"type":"echo","args":{"text":"m"}}}`)
	}
	b.WriteString("]}")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v1/batches", bytes.NewReader([]byte(b.String())))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("batch: %d %s", resp.StatusCode, raw)
	}
	var res bgjobs.BatchResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return err
	}
	joinAt, err := arr.wait(res.BatchID, 2*time.Minute)
	if err != nil {
		return err
	}
	var last time.Time
	for _, mem := range res.Jobs {
		j, err := m.Get(ctx, handlers.OpenAgent, mem.ID)
		if err != nil {
			return err
		}
		if j.CompletedAt != nil && j.CompletedAt.After(last) {
			last = *j.CompletedAt
		}
	}
	fmt.Fprintf(out, "\nfan-out of %d members\n  spawned in one call: %6.1f ms (goal ≤ 250 ms)\n  last settle → join resume received: %6.1f ms\n",
		size, ms(took), ms(joinAt.Sub(last)))
	return nil
}

// waitLatency measures how long a 0 ms echo spawned with wait_ms takes to
// answer over HTTP, one at a time.
func waitLatency(ctx context.Context, api string, n int, out io.Writer) error {
	body := []byte(`{"origin_session":"wait","kind":"work","description":"w","wait_ms":2000,"work":{"type":"echo","args":{"text":"x"}}}`)
	var lat []time.Duration
	for range n {
		start := time.Now()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/v1/jobs", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("wait_ms spawn answered %d, not 200", resp.StatusCode)
		}
		lat = append(lat, time.Since(start))
		time.Sleep(20 * time.Millisecond)
	}
	fmt.Fprintf(out, "\nspawn with wait_ms, 0 ms echo, %d one at a time\n  answered in p50 %6.1f ms   p99 %6.1f ms   (goal p50 ≤ 10 ms)\n",
		n, ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)))
	return nil
}
