package bgjobs_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/bgjobs/bgjobs"
)

// The zero Config gets every documented default.
func TestWithDefaultsAppliesEveryDefault(t *testing.T) {
	t.Parallel()
	got := bgjobs.Config{}.WithDefaults()
	want := bgjobs.Config{
		Addr: bgjobs.AddrDefault, DataDir: bgjobs.DataDirDefault,
		TurnConcurrency: bgjobs.TurnConcurrencyDefault, TurnShare: (bgjobs.TurnConcurrencyDefault + 1) / 2, WorkConcurrency: bgjobs.WorkConcurrencyDefault,
		WorkShare:        (bgjobs.WorkConcurrencyDefault + 1) / 2,
		BatchJoinTimeout: bgjobs.BatchJoinTimeoutDefault, SummaryChars: bgjobs.SummaryCharsDefault,
		RunTimeout: bgjobs.RunTimeoutDefault, ResumeCoalesce: bgjobs.ResumeCoalesceDefault,
		Retention: bgjobs.RetentionDefault, ReconcileInterval: bgjobs.ReconcileIntervalDefault,
		ShutdownTimeout: bgjobs.ShutdownTimeoutDefault, Namespace: bgjobs.NamespaceDefault,
		PollInterval: bgjobs.PollIntervalDefault, TurnPollInterval: bgjobs.TurnPollIntervalDefault,
		ResumePollInterval: bgjobs.ResumePollIntervalDefault, ControlPollInterval: bgjobs.ControlPollIntervalDefault,
		MaxFetchLoops: bgjobs.MaxFetchLoopsDefault, MaxFastFetchLoops: bgjobs.MaxFastFetchLoopsDefault,
		SparePollInterval:    bgjobs.SparePollIntervalDefault,
		FetchWait:            bgjobs.FetchWaitDefault,
		EventStreamsPerAgent: bgjobs.EventStreamsPerAgentDefault, EventStreams: bgjobs.EventStreamsDefault,
		ResumeRetries: bgjobs.ResumeRetriesDefault, ResumeAgainInterval: bgjobs.ResumeAgainIntervalDefault,
		ResumeAgainMax: bgjobs.ResumeAgainMaxDefault, MaxDepth: bgjobs.MaxDepthDefault, TurnWindow: bgjobs.TurnWindowDefault, ResumeCoalesceMax: bgjobs.ResumeCoalesceMaxDefault, MinReplicasTimeout: bgjobs.MinReplicasTimeoutDefault,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("WithDefaults (-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc      string
		env       map[string]string
		want      func(c *bgjobs.Config)
		wantField string
	}{
		{desc: "empty environment: defaults", env: map[string]string{}, want: func(*bgjobs.Config) {}},
		{desc: "storm guard off with 0", env: map[string]string{"BGJOBS_RESUME_COALESCE": "0"},
			want: func(c *bgjobs.Config) { c.ResumeCoalesce = -1 }},
		{desc: "turn timeout bounds every job", env: map[string]string{"BGJOBS_TURN_TIMEOUT": "5m"},
			want: func(c *bgjobs.Config) { c.RunTimeout = 5 * time.Minute }},
		{desc: "fetch tuning", env: map[string]string{"BGJOBS_MAX_FETCH_LOOPS": "4", "BGJOBS_SPARE_POLL_INTERVAL": "1s"},
			want: func(c *bgjobs.Config) { c.MaxFetchLoops, c.SparePollInterval = 4, time.Second }},
		{desc: "a poll interval never below the work poll", env: map[string]string{"BGJOBS_POLL_INTERVAL": "200ms"},
			want: func(c *bgjobs.Config) {
				c.PollInterval, c.TurnPollInterval, c.ControlPollInterval, c.SparePollInterval = 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
			}},
		{desc: "keys", env: map[string]string{"BGJOBS_API_KEYS": "alpha:k1, beta:k2"},
			want: func(c *bgjobs.Config) { c.APIKeys = map[string]string{"k1": "alpha", "k2": "beta"} }},
		{desc: "a quieter log", env: map[string]string{"BGJOBS_LOG_LEVEL": "warn"},
			want: func(c *bgjobs.Config) { c.LogLevel = slog.LevelWarn }},
		{desc: "a bad log level names its variable", env: map[string]string{"BGJOBS_LOG_LEVEL": "loud"}, wantField: "BGJOBS_LOG_LEVEL"},
		{desc: "bad integer names its variable", env: map[string]string{"BGJOBS_WORK_CONCURRENCY": "ten"}, wantField: "BGJOBS_WORK_CONCURRENCY"},
		{desc: "bad duration names its variable", env: map[string]string{"BGJOBS_TURN_TIMEOUT": "soon"}, wantField: "BGJOBS_TURN_TIMEOUT"},
		{desc: "bad boolean names its variable", env: map[string]string{"BGJOBS_AUTO_RESUME": "maybe"}, wantField: "BGJOBS_AUTO_RESUME"},
		{desc: "a key given twice", env: map[string]string{"BGJOBS_API_KEYS": "alpha:k,beta:k"}, wantField: "BGJOBS_API_KEYS"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			t.Parallel()
			got, err := bgjobs.Load(func(k string) string { return tc.env[k] })
			if tc.wantField != "" {
				e, ok := err.(*bgjobs.Error)
				if !ok || e.Field != tc.wantField {
					t.Fatalf("want an error naming %s, got %v", tc.wantField, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := bgjobs.Config{APIKeys: map[string]string{}}
			tc.want(&want)
			want = want.WithDefaults()
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Load (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		desc      string
		edit      func(c *bgjobs.Config)
		wantField string
	}{
		{"address", func(c *bgjobs.Config) { c.Addr = "nowhere" }, "BGJOBS_ADDR"},
		{"turn concurrency", func(c *bgjobs.Config) { c.TurnConcurrency = -1 }, "BGJOBS_TURN_CONCURRENCY"},
		{"turn share", func(c *bgjobs.Config) { c.TurnShare = -1 }, "BGJOBS_TURN_SHARE"},
		{"work share", func(c *bgjobs.Config) { c.WorkShare = -1 }, "BGJOBS_WORK_SHARE"},
		{"summary", func(c *bgjobs.Config) { c.SummaryChars = 10 }, "BGJOBS_SUMMARY_CHARS"},
		{"retention", func(c *bgjobs.Config) { c.Retention = time.Minute }, "BGJOBS_RETENTION"},
		{"fetch loops", func(c *bgjobs.Config) { c.MaxFetchLoops = -2 }, "BGJOBS_MAX_FETCH_LOOPS"},
	} {
		c := bgjobs.Config{}.WithDefaults()
		tc.edit(&c)
		e, ok := c.Validate().(*bgjobs.Error)
		if !ok || e.Field != tc.wantField {
			t.Errorf("%s: want an error naming %s, got %v", tc.desc, tc.wantField, c.Validate())
		}
	}
}
