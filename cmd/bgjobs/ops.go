package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	w := tabwriter.NewWriter(o.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tAGENT\tSESSION\tKIND\tSTATUS\tNOTIFIED\tATTEMPTS\tCREATED\tDESCRIPTION")
	for _, j := range jobs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%t\t%d\t%s\t%s\n", j.ID, j.Agent, j.OriginSession, j.Kind, j.Status,
			j.Notified, j.Attempts, j.CreatedAt.Format(time.RFC3339), j.Description)
	}
	return w.Flush()
}

func opsCommands(ctx context.Context, getenv func(string) string, stdout io.Writer) []*cobra.Command {
	return []*cobra.Command{jobsCmd(ctx, getenv, stdout), retryCmd(ctx, getenv, stdout), purgeCmd(ctx, getenv, stdout), keysCmd(ctx, getenv, stdout)}
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
			jobs, _, err := m.List(ctx, req)
			if err != nil {
				return err
			}
			return ls.printJobs(jobs)
		},
	})
	lsCmd.Flags().StringVar(&req.Agent, "agent", "default", "the agent whose jobs to list")
	lsCmd.Flags().StringVar(&req.Session, "session", "", "only this session")
	lsCmd.Flags().StringVar(&req.Status, "status", "", "only this status")
	lsCmd.Flags().StringVar(&req.BatchID, "batch", "", "only this batch")
	lsCmd.Flags().IntVar(&req.Limit, "limit", 50, "at most this many")

	show := &opsEnv{ctx: ctx, getenv: getenv, stdout: stdout}
	showCmd := show.flags(&cobra.Command{
		Use: "show <id>…", Short: "Show jobs whole (JSON)", Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, ids []string) error {
			m, done, err := show.manager(cmd)
			if err != nil {
				return err
			}
			defer done()
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			for _, id := range ids {
				j, err := m.Lookup(ctx, id)
				if err != nil {
					return err
				}
				if err := enc.Encode(j); err != nil {
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
				jobs, _, err := m.List(ctx, tasks.ListRequest{Agent: agent, Session: session, BatchID: batch, Status: status, Limit: tasks.ListLimitMax})
				if err != nil {
					return err
				}
				for _, j := range jobs {
					if j.Status == bgjobs.StatusFailed || j.Status == bgjobs.StatusCancelled || (force && j.Status == bgjobs.StatusCompleted) {
						ids = append(ids, j.ID)
					}
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
			st, err := tasks.ParseStatuses(status)
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
			fmt.Fprintf(stdout, "revoked %d key(s) of %s\n", n, args[0])
			return nil
		},
	}))
	return root
}
