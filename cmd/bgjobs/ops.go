package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/app"
	"github.com/bgjobs/bgjobs/tasks"
)

// opsEnv is what every operator command shares: the environment, a Redis
// URL flag, and JSON or table output.
type opsEnv struct {
	ctx      context.Context
	getenv   func(string) string
	stdout   io.Writer
	redisURL string
	asJSON   bool
}

// manager opens the Manager for one command run.
func (o *opsEnv) manager(cmd *cobra.Command) (*tasks.Manager, func(), error) {
	cfg, err := bgjobs.Load(o.getenv)
	if err != nil {
		return nil, nil, err
	}
	if cmd.Flags().Changed("redis-url") {
		cfg.RedisURL = o.redisURL
	}
	return app.OpenManager(o.ctx, cfg)
}

func (o *opsEnv) flags(cmd *cobra.Command) *cobra.Command {
	cmd.Flags().StringVar(&o.redisURL, "redis-url", "", "Redis URL (REDIS_URL): redis://, rediss://, redis-sentinel://")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func (o *opsEnv) printJobs(jobs []*bgjobs.Job) error {
	if o.asJSON {
		if jobs == nil {
			jobs = []*bgjobs.Job{}
		}
		return json.NewEncoder(o.stdout).Encode(jobs)
	}
	if len(jobs) == 0 {
		fmt.Fprintln(o.stdout, "no jobs")
		return nil
	}
	w := tabwriter.NewWriter(o.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tAGENT\tSESSION\tKIND\tSTATUS\tNOTIFIED\tATTEMPTS\tCREATED\tDESCRIPTION")
	for _, j := range jobs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%t\t%d\t%s\t%s\n", j.ID, j.Agent, j.OriginSession, j.Kind, j.Status,
			j.Notified, j.Attempts, j.CreatedAt.Format(time.RFC3339), j.Description)
	}
	return w.Flush()
}

// showJob prints one job for a person: its fields, then its result or
// error whole.
func showJob(out io.Writer, j *bgjobs.Job) error {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return t.Format(time.RFC3339)
	}
	for _, f := range [][2]string{
		{"ID", j.ID}, {"Agent", j.Agent}, {"Session", j.OriginSession}, {"Kind", string(j.Kind) + " " + j.SubagentType + j.WorkType},
		{"Description", j.Description}, {"Status", string(j.Status)}, {"Attempts", fmt.Sprint(j.Attempts)},
		{"Notified", fmt.Sprint(j.Notified)}, {"Batch", cmp.Or(deref(j.BatchID), "-")}, {"Resume", cmp.Or(j.ResumeState, "-")},
		{"Created", j.CreatedAt.Format(time.RFC3339)}, {"Started", at(j.StartedAt)}, {"Ended", at(j.CompletedAt)},
	} {
		fmt.Fprintf(w, "%s:\t%s\n", f[0], f[1])
	}
	if err := w.Flush(); err != nil {
		return err
	}
	switch {
	case j.Result != nil:
		_, err := fmt.Fprintf(out, "\n%s\n", *j.Result)
		return err
	case j.Error != nil:
		_, err := fmt.Fprintf(out, "\nError: %s\n", *j.Error)
		return err
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func opsCommands(ctx context.Context, getenv func(string) string, stdout io.Writer) []*cobra.Command {
	return []*cobra.Command{jobsCmd(ctx, getenv, stdout), retryCmd(ctx, getenv, stdout), cancelCmd(ctx, getenv, stdout),
		purgeCmd(ctx, getenv, stdout), statsCmd(ctx, getenv, stdout), keysCmd(ctx, getenv, stdout)}
}

func jobsCmd(ctx context.Context, getenv func(string) string, stdout io.Writer) *cobra.Command {
	root := &cobra.Command{Use: "jobs", Short: "List and show jobs"}
	ls := &opsEnv{ctx: ctx, getenv: getenv, stdout: stdout}
	var req tasks.ListRequest
	lsCmd := ls.flags(&cobra.Command{
		Use: "ls", Short: "List an agent's jobs, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, done, err := ls.manager(cmd)
			if err != nil {
				return err
			}
			defer done()
			agents := []string{req.Agent}
			if req.Agent == "" {
				// The operator's view: every agent's jobs, newest first.
				if agents, err = m.Agents(ctx); err != nil {
					return err
				}
			}
			var jobs []*bgjobs.Job
			for _, a := range agents {
				r := req
				r.Agent = a
				page, _, err := m.List(ctx, r)
				if err != nil {
					return err
				}
				jobs = append(jobs, page...)
			}
			slices.SortFunc(jobs, func(a, b *bgjobs.Job) int { return b.CreatedAt.Compare(a.CreatedAt) })
			if limit := cmp.Or(req.Limit, tasks.ListLimitDefault); len(jobs) > limit {
				jobs = jobs[:limit]
			}
			return ls.printJobs(jobs)
		},
	})
	lsCmd.Flags().StringVar(&req.Agent, "agent", "", "only this agent's jobs (default: every agent's)")
	lsCmd.Flags().StringVar(&req.Session, "session", "", "only this session")
	lsCmd.Flags().StringVar(&req.Status, "status", "", "only this status")
	lsCmd.Flags().StringVar(&req.BatchID, "batch", "", "only this batch")
	lsCmd.Flags().IntVar(&req.Limit, "limit", 50, "at most this many")

	show := &opsEnv{ctx: ctx, getenv: getenv, stdout: stdout}
	showCmd := show.flags(&cobra.Command{
		Use: "show <id>…", Short: "Show jobs whole: every field, the result and the error", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			m, done, err := show.manager(cmd)
			if err != nil {
				return err
			}
			defer done()
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			for i, id := range ids {
				j, err := m.Lookup(ctx, id)
				if err != nil {
					return err
				}
				if show.asJSON {
					err = enc.Encode(j)
				} else {
					if i > 0 {
						fmt.Fprintln(stdout)
					}
					err = showJob(stdout, j)
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	})
	root.AddCommand(lsCmd, showCmd)
	return root
}

func retryCmd(ctx context.Context, getenv func(string) string, stdout io.Writer) *cobra.Command {
	o := &opsEnv{ctx: ctx, getenv: getenv, stdout: stdout}
	var agent, session, batch, status string
	var force, dry bool
	cmd := o.flags(&cobra.Command{
		Use:   "retry [<id>…]",
		Short: "Run failed or cancelled jobs again as a new attempt (completed ones only with --force)",
		Long: "Each job goes back to queued and runs again; its new outcome drains once and resumes its session.\n" +
			"Select jobs by id, or by --session, --batch and --status for one --agent.",
		RunE: func(cmd *cobra.Command, ids []string) error {
			m, done, err := o.manager(cmd)
			if err != nil {
				return err
			}
			defer done()
			if len(ids) == 0 {
				if session == "" && batch == "" && status == "" {
					return bgjobs.FieldError("id", "name job ids, or select with --session, --batch or --status")
				}
				// Every page: a batch of 1,000 may have hundreds to retry.
				req := tasks.ListRequest{Agent: agent, Session: session, BatchID: batch, Status: status, Limit: tasks.ListLimitMax}
				for {
					jobs, next, err := m.List(ctx, req)
					if err != nil {
						return err
					}
					for _, j := range jobs {
						if j.Status == bgjobs.StatusFailed || j.Status == bgjobs.StatusCancelled || (force && j.Status == bgjobs.StatusCompleted) {
							ids = append(ids, j.ID)
						}
					}
					if next == "" {
						break
					}
					req.Cursor = next
				}
			}
			var out []*bgjobs.Job
			for _, id := range ids {
				if dry {
					j, err := m.Lookup(ctx, id)
					if err != nil {
						return err
					}
					out = append(out, j)
					continue
				}
				j, err := m.Retry(ctx, id, force)
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				out = append(out, j)
			}
			return o.printJobs(out)
		},
	})
	cmd.Flags().StringVar(&agent, "agent", "default", "with selectors: the agent whose jobs to retry")
	cmd.Flags().StringVar(&session, "session", "", "retry this session's failed and cancelled jobs")
	cmd.Flags().StringVar(&batch, "batch", "", "retry this batch's failed and cancelled members")
	cmd.Flags().StringVar(&status, "status", "", "only jobs with this status (failed or cancelled; completed needs --force)")
	cmd.Flags().BoolVar(&force, "force", false, "also re-run completed jobs")
	cmd.Flags().BoolVar(&dry, "dry-run", false, "list what would be retried; change nothing")
	return cmd
}

func purgeCmd(ctx context.Context, getenv func(string) string, stdout io.Writer) *cobra.Command {
	o := &opsEnv{ctx: ctx, getenv: getenv, stdout: stdout}
	var status string
	var req tasks.PurgeRequest
	cmd := o.flags(&cobra.Command{
		Use:   "purge",
		Short: "Remove ended jobs whose results were handed over, and their leftover queue tasks",
		Long:  "Never removes a queued, running or undrained job.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := bgjobs.ParseStatuses(status)
			if err != nil {
				return err
			}
			req.Statuses = st
			m, done, err := o.manager(cmd)
			if err != nil {
				return err
			}
			defer done()
			jobs, err := m.Purge(ctx, req)
			if err != nil {
				return err
			}
			if !o.asJSON {
				verb := "purged"
				if req.DryRun {
					verb = "would purge"
				}
				fmt.Fprintf(stdout, "%s %d job(s)\n", verb, len(jobs))
			}
			return o.printJobs(jobs)
		},
	})
	cmd.Flags().StringVar(&status, "status", "", "only these statuses, comma separated (completed, failed, cancelled)")
	cmd.Flags().StringVar(&req.Agent, "agent", "", "only this agent's jobs (default: every agent's)")
	cmd.Flags().DurationVar(&req.OlderThan, "older-than", 0, "only jobs that ended longer ago than this (e.g. 72h)")
	cmd.Flags().BoolVar(&req.DryRun, "dry-run", false, "list what would be purged; change nothing")
	return cmd
}

func keysCmd(ctx context.Context, getenv func(string) string, stdout io.Writer) *cobra.Command {
	root := &cobra.Command{Use: "keys", Short: "Create and revoke agent keys (stored hashed in Redis)"}
	create := &opsEnv{ctx: ctx, getenv: getenv, stdout: stdout}
	root.AddCommand(create.flags(&cobra.Command{
		Use: "create <agent>", Short: "Make a key for an agent and print it (shown once)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, done, err := create.manager(cmd)
			if err != nil {
				return err
			}
			defer done()
			key, err := m.CreateKey(ctx, args[0])
			if err != nil {
				return err
			}
			if create.asJSON {
				return json.NewEncoder(stdout).Encode(map[string]string{"agent": args[0], "key": key})
			}
			fmt.Fprintln(stdout, key)
			return nil
		},
	}))
	revoke := &opsEnv{ctx: ctx, getenv: getenv, stdout: stdout}
	root.AddCommand(revoke.flags(&cobra.Command{
		Use: "revoke <agent>", Short: "Revoke every stored key of an agent", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, done, err := revoke.manager(cmd)
			if err != nil {
				return err
			}
			defer done()
			n, err := m.RevokeKeys(ctx, args[0])
			if err != nil {
				return err
			}
			cfg, err := bgjobs.Load(getenv)
			if err != nil {
				return err
			}
			if slices.Contains(slices.Collect(maps.Values(cfg.APIKeys)), args[0]) {
				// Say so even when stored keys went too: the agent still has a key.
				return bgjobs.FieldError("BGJOBS_API_KEYS", "revoked %d stored key(s); %s's key in BGJOBS_API_KEYS stays valid until it is removed there and the servers restart", n, args[0])
			}
			if n == 0 {
				return bgjobs.Errorf(bgjobs.ENotFound, "%s has no stored key to revoke", args[0])
			}
			fmt.Fprintf(stdout, "revoked %d key(s) of %s\n", n, args[0])
			return nil
		},
	}))
	return root
}

func cancelCmd(ctx context.Context, getenv func(string) string, stdout io.Writer) *cobra.Command {
	o := &opsEnv{ctx: ctx, getenv: getenv, stdout: stdout}
	return o.flags(&cobra.Command{
		Use:   "cancel <id>…",
		Short: "Stop queued or running jobs: they end cancelled and drain like any other",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			m, done, err := o.manager(cmd)
			if err != nil {
				return err
			}
			defer done()
			var out []*bgjobs.Job
			for _, id := range ids {
				j, err := m.Lookup(ctx, id)
				if err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				if j, err = m.Cancel(ctx, j.Agent, id); err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				out = append(out, j)
			}
			return o.printJobs(out)
		},
	})
}

// queueStats is one queue's tasks by state, as asynq counts them.
type queueStats struct {
	Queue     string `json:"queue"`
	Pending   int    `json:"pending"`
	Active    int    `json:"active"`
	Scheduled int    `json:"scheduled"`
	Retry     int    `json:"retry"`
	Archived  int    `json:"archived"`
	Completed int    `json:"completed"`
	Processed int    `json:"processed_today"`
	Failed    int    `json:"failed_today"`
	Paused    bool   `json:"paused"`
}

func statsCmd(ctx context.Context, getenv func(string) string, stdout io.Writer) *cobra.Command {
	o := &opsEnv{ctx: ctx, getenv: getenv, stdout: stdout}
	return o.flags(&cobra.Command{
		Use:   "stats",
		Short: "Tasks per queue and state (turns, work, resume, control), like asynq stats",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, done, err := o.manager(cmd)
			if err != nil {
				return err
			}
			defer done()
			known, err := m.Inspector().Queues()
			if err != nil {
				return err
			}
			var rows []queueStats
			for _, base := range []string{tasks.QueueTurns, tasks.QueueWork, tasks.QueueResume, tasks.QueueControl} {
				q := m.Queue(base)
				if !slices.Contains(known, q) {
					rows = append(rows, queueStats{Queue: q})
					continue // nothing was ever queued there
				}
				info, err := m.Inspector().GetQueueInfo(q)
				if err != nil {
					return err
				}
				rows = append(rows, queueStats{Queue: q, Pending: info.Pending, Active: info.Active, Scheduled: info.Scheduled,
					Retry: info.Retry, Archived: info.Archived, Completed: info.Completed, Processed: info.Processed,
					Failed: info.Failed, Paused: info.Paused})
			}
			if o.asJSON {
				return json.NewEncoder(stdout).Encode(rows)
			}
			w := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(w, "QUEUE\tPENDING\tACTIVE\tSCHEDULED\tRETRY\tARCHIVED\tCOMPLETED\tPROCESSED TODAY\tFAILED TODAY\tPAUSED")
			for _, r := range rows {
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%t\n", r.Queue, r.Pending, r.Active, r.Scheduled,
					r.Retry, r.Archived, r.Completed, r.Processed, r.Failed, r.Paused)
			}
			return w.Flush()
		},
	})
}
