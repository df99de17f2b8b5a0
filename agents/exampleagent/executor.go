// Package exampleagent is a small, real A2A agent (a2a-go's JSON-RPC server)
// for the quick start, demos and end-to-end tests. It does not pretend to be
// a language model: it answers every turn deterministically from its prompt
// and logs each message it receives as one JSON line.
//
// Directives in a prompt change what it does, so demos can show every path:
//
//	[sleep 3s]   take that long before answering (a cancel stops it)
//	[fail]       end the task failed
//	[task]       answer through a task with an artifact instead of a message
//	[long 15000] make the report that many characters long
//	[progress 3] stream that many status updates before the answer
//	             ([progress 3 500ms]: that long apart; 20ms otherwise)
package exampleagent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/bgjobs/bgjobs/client"
)

// received is one log line: what arrived and in which conversation.
type received struct {
	At        time.Time      `json:"at"`
	ContextID string         `json:"context_id"`
	MessageID string         `json:"message_id"`
	Metadata  map[string]any `json:"metadata,omitempty"`
	Text      string         `json:"text"`
}

type executor struct {
	mu  sync.Mutex
	log *json.Encoder
	// drain, when set, drains the session on every resume it receives,
	// as an agent's next turn would, and logs what it got.
	drain *client.Client
}

// drained is the log line of a drain made on a resume.
type drained struct {
	At            time.Time             `json:"at"`
	Session       string                `json:"drained_session"`
	Notifications []client.Notification `json:"notifications"`
	Error         string                `json:"error,omitempty"`
}

var (
	sleepRE = regexp.MustCompile(`\[sleep ([0-9a-z.]+)\]`)
	longRE  = regexp.MustCompile(`\[long ([0-9]{1,7})\]`)
	stepsRE = regexp.MustCompile(`\[progress ([0-9]{1,3})(?: ([0-9]{1,5})ms)?\]`)
)

func (e *executor) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	text := ""
	var meta map[string]any
	msgID := ""
	if rc.Message != nil {
		text = textOf(rc.Message.Parts)
		meta = rc.Message.Metadata
		msgID = rc.Message.ID
	}
	e.mu.Lock()
	_ = e.log.Encode(received{At: time.Now().UTC(), ContextID: rc.ContextID, MessageID: msgID, Metadata: meta, Text: text})
	e.mu.Unlock()

	if kind, _ := meta["kind"].(string); kind == "background.resume" {
		if e.drain != nil {
			ns, err := e.drain.Drain(ctx, rc.ContextID, "")
			line := drained{At: time.Now().UTC(), Session: rc.ContextID, Notifications: ns}
			if err != nil {
				line.Error = err.Error()
			}
			e.mu.Lock()
			_ = e.log.Encode(line)
			e.mu.Unlock()
		}
		return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: "Noted; draining at my next turn."}))
	}
	if m := sleepRE.FindStringSubmatch(text); m != nil {
		if d, err := time.ParseDuration(m[1]); err == nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
	}
	answer := report(text)
	if m := longRE.FindStringSubmatch(text); m != nil {
		n, _ := strconv.Atoi(m[1])
		answer = lengthen(answer, n)
	}
	if m := stepsRE.FindStringSubmatch(text); m != nil {
		n, _ := strconv.Atoi(m[1])
		gap := 20 * time.Millisecond
		if m[2] != "" {
			ms, _ := strconv.Atoi(m[2])
			gap = time.Duration(ms) * time.Millisecond
		}
		if err := submitted(ctx, rc, q); err != nil {
			return err
		}
		for i := 1; i <= n; i++ {
			ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateWorking,
				a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: fmt.Sprintf("step %d of %d", i, n)}))
			if err := q.Write(ctx, ev); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(gap):
			}
		}
		if err := q.Write(ctx, a2a.NewArtifactEvent(rc, a2a.TextPart{Text: answer})); err != nil {
			return err
		}
		ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCompleted, nil)
		ev.Final = true
		return q.Write(ctx, ev)
	}
	switch {
	case strings.Contains(text, "[fail]"):
		if err := submitted(ctx, rc, q); err != nil {
			return err
		}
		ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateFailed,
			a2a.NewMessageForTask(a2a.MessageRoleAgent, rc, a2a.TextPart{Text: "asked to fail by the prompt"}))
		ev.Final = true
		return q.Write(ctx, ev)
	case strings.Contains(text, "[task]"):
		if err := submitted(ctx, rc, q); err != nil {
			return err
		}
		if err := q.Write(ctx, a2a.NewArtifactEvent(rc, a2a.TextPart{Text: answer})); err != nil {
			return err
		}
		ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCompleted, nil)
		ev.Final = true
		return q.Write(ctx, ev)
	}
	return q.Write(ctx, a2a.NewMessage(a2a.MessageRoleAgent, a2a.TextPart{Text: answer}))
}

func (e *executor) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := a2a.NewStatusUpdateEvent(rc, a2a.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// lengthen pads a report with numbered, deterministic sentences to n
// characters.
func lengthen(s string, n int) string {
	var b strings.Builder
	b.WriteString(s)
	for i := 1; b.Len() < n; i++ {
		fmt.Fprintf(&b, "\nFinding %d: the figures in section %d agree with the ledger.", i, i)
	}
	return b.String()[:max(n, len(s))]
}

// report derives an answer from the prompt alone, so the same prompt always
// gets the same report.
func report(prompt string) string {
	sum := sha256.Sum256([]byte(prompt))
	lines := strings.Split(strings.TrimSpace(prompt), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	return fmt.Sprintf("Report on: %s\n\nThe prompt has %d words in %d lines. Fingerprint %s.",
		last, len(strings.Fields(prompt)), len(lines), hex.EncodeToString(sum[:6]))
}

func textOf(parts a2a.ContentParts) string {
	var out []string
	for _, p := range parts {
		switch v := p.(type) {
		case a2a.TextPart:
			out = append(out, v.Text)
		case *a2a.TextPart:
			out = append(out, v.Text)
		}
	}
	return strings.Join(out, "\n")
}

// NewHandler serves the agent's card and its A2A JSON-RPC endpoint at /a2a.
// With drain set, every resume it receives drains its session at once.
func NewHandler(addr string, logTo io.Writer, drain *client.Client) http.Handler {
	card := &a2a.AgentCard{
		Name:               "bgjobs example agent",
		Description:        "Answers turns deterministically from the prompt; logs every message it receives.",
		URL:                "http://" + addr + "/a2a",
		PreferredTransport: a2a.TransportProtocolJSONRPC,
		ProtocolVersion:    "0.3.0",
		Version:            "1.0.0",
		DefaultInputModes:  []string{"text/plain"},
		DefaultOutputModes: []string{"text/plain"},
		Capabilities:       a2a.AgentCapabilities{Streaming: true},
		Skills: []a2a.AgentSkill{{
			ID: "report", Name: "Deterministic report",
			Description: "Returns a short report derived from the prompt.", Tags: []string{"demo"},
		}},
	}
	mux := http.NewServeMux()
	mux.Handle("/a2a", a2asrv.NewJSONRPCHandler(a2asrv.NewHandler(&executor{log: json.NewEncoder(logTo), drain: drain})))
	mux.Handle(a2asrv.WellKnownAgentCardPath, a2asrv.NewStaticAgentCardHandler(card))
	return mux
}

// submitted opens a task with a status update rather than a Task event:
// the a2a-go server keeps updating the task it stores, and a Task event
// would share it with the stream being written (a2a-go's own template
// starts the same way).
func submitted(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	if rc.StoredTask != nil {
		return nil
	}
	return q.Write(ctx, a2a.NewStatusUpdateEvent(rc, a2a.TaskStateSubmitted, nil))
}
