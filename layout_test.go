package bgjobs_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// redisName finds go-redis names used in a file.
var redisName = regexp.MustCompile(`redis\.[A-Z]\w*`)

// The house rules, checked on the source itself: one package owns
// bgjobs' Redis keys, and no package grows into a god package again.
func TestLayout(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{.Dir}}|{{join .Imports " "}}|{{join .GoFiles " "}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/bgjobs/bgjobs"
	// Who may import go-redis, and why.
	allowed := map[string]string{
		mod + "/tasks/internal/registry":              "every command on bgjobs' keys: jobs, sessions, batches, outboxes",
		mod + "/tasks/internal/registry/wake":         "the registry's session wake-up state",
		mod + "/tasks/internal/registry/feeds":        "the registry's event and report streams",
		mod + "/tasks/internal/registry/reclaim":      "asynq's own keys, to re-queue a dead worker's tasks",
		mod + "/tasks/internal/registry/handover":     "the registry's hand-over of results (drain, ack, wait take, undo)",
		mod + "/tasks/internal/registry/tenants":      "the registry's agents and agent keys",
		mod + "/tasks/internal/registry/turncap":      "the global turn cap and each agent's share of it",
		mod + "/tasks/internal/registry/stragglers":   "the batches' straggler timeouts",
		mod + "/tasks/internal/registry/idem":         "spawn Idempotency-Keys",
		mod + "/tasks/internal/registry/walk":         "sweeps' pages: keys on every master, a sorted set up to a cutoff",
		mod + "/tasks/internal/registry/registrytest": "the registry's test helpers",
		mod + "/internal/pipeline":                    "the batching writer and asynq's client",
		mod + "/tasks":                                "NewManager takes the caller's client (the type only)",
		mod + "/app":                                  "opens the client",
		mod + "/internal/redisconn":                   "opens the client from a URL",
		mod + "/internal/redisns":                     "test and bench clean-up of a namespace",
		mod + "/internal/testenv":                     "test Redis spaces",
		mod + "/internal/redisproc":                   "private redis-servers for tests and the bench",
		mod + "/internal/bench":                       "raw asynq baseline and the bench's own Redis",
		mod + "/internal/bench/stats":                 "the bench reads the server's CPU and command counts",
		mod + "/internal/bench/knowledge":             "the knowledge phase's Managers and search writers, on the bench's Redis",
		mod + "/search":                               "the search writer tails the reports stream",
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		parts := strings.Split(sc.Text(), "|")
		pkg, dir, imports, files := parts[0], parts[1], strings.Fields(parts[2]), strings.Fields(parts[3])
		if slices.Contains(imports, "github.com/redis/go-redis/v9") {
			if _, ok := allowed[pkg]; !ok {
				t.Errorf("%s imports go-redis: bgjobs' Redis access belongs in tasks/internal/registry and its sub-packages", pkg)
			}
		}
		lines := 0
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatal(err)
			}
			lines += strings.Count(string(b), "\n")
			if pkg == mod+"/tasks" {
				for _, m := range redisName.FindAllString(string(b), -1) {
					if m != "redis.UniversalClient" {
						t.Errorf("tasks/%s uses %s: only the registry calls Redis", f, m)
					}
				}
			}
		}
		// The goal is about 1,500 lines a package; past 1,600 fails.
		switch {
		case lines > 1600:
			t.Errorf("%s has %d lines (without tests): split it", pkg, lines)
		case lines > 1500:
			t.Logf("%s has %d lines (without tests): over the 1,500 goal", pkg, lines)
		}
	}
}
