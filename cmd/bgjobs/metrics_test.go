package main

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func sample(text, series string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+-]+)$`).FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// /metrics after a run shows the counts that run produced. Not parallel:
// the instruments are process-wide, so no other test may move them
// meanwhile.
func TestMetricsReflectTheRun(t *testing.T) {
	c := client{t: t, base: startServe(t, nil)}
	before := scrape(t, c.base)
	var ids []string
	for i, fail := range []bool{false, false, true} {
		_, j := c.do("POST", "/v1/jobs", echoJob("chat-metrics", strconv.Itoa(i), fail))
		ids = append(ids, j["id"].(string))
	}
	for _, id := range ids {
		testenv.Eventually(t, 10*time.Second, id+" ended", func() bool {
			_, j := c.do("GET", "/v1/jobs/"+id, nil)
			return j["status"] == "completed" || j["status"] == "failed"
		})
	}
	_, d := c.do("POST", "/v1/sessions/chat-metrics/drain", nil)
	require.Len(t, d["notifications"], 3)
	after := scrape(t, c.base)
	delta := func(series string) float64 { return sample(after, series) - sample(before, series) }
	require.Equal(t, 3.0, delta(`bgjobs_jobs_spawned_total{kind="work"}`))
	require.Equal(t, 2.0, delta(`bgjobs_jobs_settled_total{kind="work",status="completed"}`))
	require.Equal(t, 1.0, delta(`bgjobs_jobs_settled_total{kind="work",status="failed"}`))
	require.Equal(t, 1.0, delta(`bgjobs_drain_notifications_count`), "one drain")
	require.Equal(t, 3.0, delta(`bgjobs_drain_notifications_sum`), "of three notifications")
	require.Contains(t, after, "asynq_tasks_enqueued_total", "asynq's queue collector is served too")
}

// With BGJOBS_METRICS_KEY set, a scrape needs it (or the admin key) as its
// bearer key; an agent's key, a wrong one or none is a JSON 401.
func TestMetricsKey(t *testing.T) {
	t.Parallel()
	base := startServe(t, map[string]string{"BGJOBS_METRICS_KEY": "mk", "BGJOBS_ADMIN_KEY": "adm", "BGJOBS_API_KEYS": "alpha:ka"})
	get := func(key string) (int, string) {
		req, err := http.NewRequest("GET", base+"/metrics", nil)
		require.NoError(t, err)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, key := range []string{"", "ka", "mk2", "m"} {
		code, body := get(key)
		require.Equal(t, http.StatusUnauthorized, code, "key %q", key)
		require.Contains(t, body, `"code":"unauthenticated"`)
		require.Contains(t, body, "BGJOBS_METRICS_KEY")
	}
	for _, key := range []string{"mk", "adm"} {
		code, body := get(key)
		require.Equal(t, http.StatusOK, code, "key %q", key)
		require.Contains(t, body, "bgjobs_jobs_spawned_total")
	}
}
