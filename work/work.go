// Package work is the registry of work kinds: what a work job of each
// work.type checks at spawn time, who may run it, and how it runs. bgjobs
// registers its own (echo here; ingest and delegate in agents), and a Go
// program that embeds bgjobs registers more before NewManager takes the
// registry.
package work

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/jsonbody"
)

// Func runs one work job. args are the spawn request's work.args, already
// accepted by the kind's Check. It returns the deliverable, which is handed
// to the origin whole. An error fails the job; wrap it with Retryable when
// another attempt could succeed.
type Func func(ctx context.Context, args json.RawMessage) (string, error)

// JobInfo tells a work function whose job it runs.
type JobInfo struct {
	ID            string
	Agent         string
	OriginSession string
	Description   string
}

type jobInfoKey struct{}

// WithJob returns ctx carrying the job a Func runs for.
func WithJob(ctx context.Context, j JobInfo) context.Context {
	return context.WithValue(ctx, jobInfoKey{}, j)
}

// JobFromContext returns the job a Func's context belongs to.
func JobFromContext(ctx context.Context) (JobInfo, bool) {
	j, ok := ctx.Value(jobInfoKey{}).(JobInfo)
	return j, ok
}

// Kind is a registered kind of deterministic work.
type Kind struct {
	// Name is the work.type that selects this kind.
	Name string
	// Check validates args at spawn time; its error becomes a 400. Nil
	// accepts anything.
	Check func(args json.RawMessage) error
	// Authorize decides, at spawn time, whether agent may run this kind
	// with these args (already accepted by Check); its error becomes the
	// answer. CallerFrom(ctx) tells who asked. Nil allows everyone.
	Authorize func(ctx context.Context, agent string, args json.RawMessage) error
	// Run does the work.
	Run Func
}

// Caller is who asked for a job over an API: the agent it acts for, and
// whether it holds the admin key (open mode acts as the admin).
type Caller struct {
	Agent string
	Admin bool
}

type callerKey struct{}

// WithCaller returns ctx carrying the API caller, for Authorize.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the API caller behind ctx. ok is false when a program
// calls the Manager itself: the program embedding bgjobs is trusted.
func CallerFrom(ctx context.Context) (c Caller, ok bool) {
	c, ok = ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// Kinds is a registry of work kinds, open to programs that embed bgjobs.
// It is safe for concurrent use.
type Kinds struct {
	mu    sync.RWMutex
	kinds map[string]Kind
}

// NewKinds returns a registry holding the built-in kinds.
func NewKinds() *Kinds {
	k := &Kinds{kinds: map[string]Kind{}}
	k.Register(Echo())
	return k
}

// Register adds or replaces a kind.
func (k *Kinds) Register(w Kind) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kinds[w.Name] = w
}

// Lookup returns the kind registered under name.
func (k *Kinds) Lookup(name string) (Kind, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	w, ok := k.kinds[name]
	return w, ok
}

// Names lists the registered kinds, sorted.
func (k *Kinds) Names() []string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	names := make([]string, 0, len(k.kinds))
	for n := range k.kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// retryableError marks a failure another attempt may fix.
type retryableError struct{ err error }

func (e retryableError) Error() string { return e.err.Error() }
func (e retryableError) Unwrap() error { return e.err }

// Retryable marks err as worth another attempt (asynq retries the job with
// backoff; after the last attempt it fails).
func Retryable(err error) error { return retryableError{err} }

// IsRetryable reports whether err was marked with Retryable.
func IsRetryable(err error) bool { return errors.As(err, new(retryableError)) }

// EchoArgs are the arguments of the built-in echo kind.
type EchoArgs struct {
	// Text is returned as the result, or as the error when Fail is set.
	Text string `json:"text"`
	// DelayMS sleeps first, honouring cancel.
	DelayMS int `json:"delay_ms"`
	// Fail ends the job failed with Text as the error.
	Fail bool `json:"fail"`
}

// maxEchoDelay keeps a smoke-test job from holding a worker for a day.
const maxEchoDelay = time.Hour

func decodeEchoArgs(raw json.RawMessage) (EchoArgs, error) {
	var a EchoArgs
	if err := DecodeArgs(raw, &a); err != nil {
		return a, err
	}
	if _, err := bgjobs.Within("work.args.delay_ms", int64(a.DelayMS), time.Millisecond, maxEchoDelay); err != nil {
		return a, err
	}
	return a, nil
}

// DecodeArgs reads a work job's args into v strictly, for a kind's Check
// and Run: an unknown field, a wrong type or malformed JSON is a 400 that
// names the field as the caller wrote it ("work.args.url") in JSON's words.
// Missing or null args leave v as it is.
func DecodeArgs(raw json.RawMessage, v any) error {
	return jsonbody.DecodeAt("work.args", raw, v)
}

// Echo is the built-in smoke-test kind: it returns its text after an
// optional delay, or fails on request.
func Echo() Kind {
	return Kind{
		Name: "echo",
		Check: func(args json.RawMessage) error {
			_, err := decodeEchoArgs(args)
			return err
		},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			a, err := decodeEchoArgs(raw)
			if err != nil {
				return "", err
			}
			if a.DelayMS > 0 {
				t := time.NewTimer(time.Duration(a.DelayMS) * time.Millisecond)
				defer t.Stop()
				select {
				case <-ctx.Done():
					return "", ctx.Err()
				case <-t.C:
				}
			}
			if a.Fail {
				return "", fmt.Errorf("%s", a.Text)
			}
			return a.Text, nil
		},
	}
}
