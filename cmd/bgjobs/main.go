// Command bgjobs runs background work for AI agents: `bgjobs serve` for the
// API and workers, `bgjobs worker` for workers alone.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bgjobs:", err)
		os.Exit(1)
	}
}
