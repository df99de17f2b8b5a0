package knowledge

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/bgjobs/bgjobs/internal/testenv"
)

// The phase runs as make bench runs it, on fewer texts: every line is
// printed with its rate, each POST line with its ratio, goal and documents
// a batch, and each line's CPU per text.
func TestThePhasePrintsEveryLine(t *testing.T) {
	env := testenv.New(t)
	var out bytes.Buffer
	if err := run(context.Background(), env.RDB, 4, 1, 200, &out); err != nil {
		t.Fatalf("knowledge: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"knowledge indexing, 200 texts",
		"bleve, batches of 1,000, bgjobs' mapping",
		"reports stream → search writer",
		"POST /v1/knowledge, 4 clients, searchable on 201",
		"POST /v1/knowledge, 16 clients, searchable on 201",
		"the same, 4 clients, 20 texts a request",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "docs a batch"); n != 3 {
		t.Errorf("%d lines give documents a batch, want 3:\n%s", n, got)
	}
	if n := strings.Count(got, "goal ≥ 0.80"); n != 4 {
		t.Errorf("%d lines give the goal, want 4:\n%s", n, got)
	}
	if n := strings.Count(got, "µs CPU   Redis"); !strings.Contains(got, "per text") || n != 5 {
		t.Errorf("%d lines give their CPU per text, want 5:\n%s", n, got)
	}
}
