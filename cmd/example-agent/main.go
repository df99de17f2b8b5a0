// Command example-agent is a small, real A2A agent (a2a-go's JSON-RPC
// server) for the quick start, demos and end-to-end tests. It does not
// pretend to be a language model: it answers every turn deterministically
// from its prompt and logs each message it receives as one JSON line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/bgjobs/bgjobs/agents/exampleagent"
	"github.com/bgjobs/bgjobs/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("example-agent", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9000", "listen address")
	drainURL := fs.String("drain-on-resume", "", "bgjobs URL: drain the session on every resume received, as the agent's next turn would")
	key := fs.String("key", os.Getenv("BGJOBS_KEY"), "the agent's bgjobs key, for --drain-on-resume (BGJOBS_KEY)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	var drain *client.Client
	if *drainURL != "" {
		drain = client.New(*drainURL, *key)
	}
	srv := &http.Server{Handler: exampleagent.NewHandler(ln.Addr().String(), stdout, drain), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	fmt.Fprintf(stdout, "example-agent: A2A JSON-RPC on http://%s/a2a\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
