package tasks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks"
	"github.com/bgjobs/bgjobs/work"
)

// A Go program that embeds bgjobs registers its own work kind, spawns a
// job of it, and hands the result to its model through the drain.
func Example_embeddedWorkKind() {
	mr := miniredis.RunT(nopT{})
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	kinds := work.NewKinds()
	kinds.Register(work.Kind{
		Name: "shout",
		Check: func(args json.RawMessage) error {
			var a struct{ Text string }
			if err := json.Unmarshal(args, &a); err != nil || a.Text == "" {
				return bgjobs.FieldError("work.args.text", "say something")
			}
			return nil
		},
		Run: func(ctx context.Context, args json.RawMessage) (string, error) {
			var a struct{ Text string }
			_ = json.Unmarshal(args, &a)
			return strings.ToUpper(a.Text) + "!", nil
		},
	})
	m := tasks.NewManager(rdb, bgjobs.Config{}, tasks.Deps{Kinds: kinds, Logger: slog.New(slog.DiscardHandler)})
	defer m.Close()
	w := m.NewWorker()
	ctx := context.Background()
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown()

	job, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: "default", OriginSession: "chat-1", Kind: bgjobs.KindWork,
		Description: "Shout", Work: &bgjobs.WorkSpec{Type: "shout", Args: json.RawMessage(`{"text":"hello"}`)}})
	if err != nil {
		panic(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if j, _ := m.Get(ctx, "default", job.ID); j.Status.Terminal() {
			break
		}
	}
	notes, _ := m.Drain(ctx, "default", "chat-1", "")
	for _, n := range notes {
		fmt.Println(n.Status, strings.Contains(n.Text, "<result>HELLO!</result>"))
	}
	// Output: completed true
}

// nopT lets miniredis start outside a test.
type nopT struct{}

func (nopT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (nopT) Cleanup(func())                    {}
func (nopT) Logf(string, ...any)               {}
