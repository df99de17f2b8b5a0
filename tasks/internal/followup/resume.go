package followup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/wake"
)

// ErrNudgeInFlight defers a resume while another of its session is being
// delivered; asynq tries it again shortly and must not count it a failure.
var ErrNudgeInFlight = errors.New("another resume of this session is being delivered")

// inflightTTL bounds a delivery's hold on its session, should the process
// die mid-send.
const inflightTTL = 30 * time.Second

func (f *Followups) enqueueResume(ctx context.Context, tag, taskID, messageID string, meta bgjobs.ResumeMeta) error {
	agent, session := bgjobs.SplitTag(tag)
	return f.eng.EnqueueResume(ctx, taskID, engine.ResumePayload{Agent: agent, Session: session,
		MessageID: messageID, Meta: meta, Since: f.now().UnixMilli()}, 0)
}

// ProcessResume is the asynq handler of resume tasks: hold it if the
// session is busy, otherwise send it. A failed send returns its error and
// asynq retries with backoff; the settle that caused it never waits.
func (f *Followups) ProcessResume(ctx context.Context, t *asynq.Task) error {
	var p engine.ResumePayload
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return fmt.Errorf("%w: resume payload: %v", asynq.SkipRetry, err)
	}
	a, err := f.wakeAgent(ctx, p.Agent, p.Session)
	if err != nil {
		return err
	}
	if a == nil {
		metrics.Resumes.WithLabelValues("dropped").Inc()
		return nil
	}
	tag := bgjobs.Tag(p.Agent, p.Session)
	if p.Again > 0 {
		// A slow re-send goes only while something it announces is undrained.
		if undrained, err := f.anyUndrained(ctx, p.Meta.Jobs); err != nil || !undrained {
			return err
		}
	}
	d, err := f.wake.BeginDelivery(ctx, tag, p.Meta.Trigger, p.MessageID, f.now(), inflightTTL)
	switch {
	case err != nil:
		return err
	case d == wake.DeliveryHeld:
		f.store.SetResumeState(tag, p.Meta.Jobs, "held", "")
		metrics.Resumes.WithLabelValues("held").Inc()
		f.log.Info("resume held: session busy", slog.String("session", p.Session), slog.String("trigger", p.Meta.Trigger))
		return nil
	case d == wake.DeliveryInFlight:
		// One nudge in flight per session: a second waits its turn.
		return ErrNudgeInFlight
	case d == wake.DeliveredBefore:
		return nil
	}
	// The lock is ours until the end; the sent mark goes with its release,
	// so a repeat of this task (a worker that died after sending) finds it.
	var sent time.Duration
	defer func() {
		if err := f.wake.EndDelivery(context.WithoutCancel(ctx), tag, p.MessageID, sent); err != nil && sent > 0 {
			f.log.Warn("resume delivered but not marked", slog.String("message_id", p.MessageID), slog.Any("err", err))
		}
	}()
	if f.resumer == nil {
		return fmt.Errorf("%w: this process cannot send resumes", asynq.SkipRetry)
	}
	if err := f.resumer.SendResume(ctx, a, p.Session, p.MessageID, p.Meta); err != nil {
		f.deliveryFailed(ctx, tag, p, err)
		return err
	}
	sent = engine.ResumeRetention
	f.store.SetResumeState(tag, p.Meta.Jobs, "delivered", "")
	metrics.Resumes.WithLabelValues("delivered").Inc()
	if p.Since > 0 {
		metrics.ResumeLatency.Observe(f.now().Sub(time.UnixMilli(p.Since)).Seconds())
	}
	f.log.Info("resume delivered", slog.String("session", p.Session), slog.String("message_id", p.MessageID))
	f.feeds.Publish(bgjobs.Event{Type: bgjobs.EventResumed, JobID: soleJob(p.Meta.Jobs), Agent: p.Agent, OriginSession: p.Session,
		Status: bgjobs.StatusCompleted, Trigger: p.Meta.Trigger, Counts: &p.Meta.Counts, At: f.now().UTC()})
	return nil
}

// soleJob is the job id a resume event names: the one job it announces,
// or none for a batch or a merge.
func soleJob(ids []string) string {
	if len(ids) == 1 {
		return ids[0]
	}
	return ""
}

// deliveryFailed makes a failed delivery seen — a warning in the log, the
// state and error on each job's row, a background.resume_failed event, the
// metric — and, once asynq's retries are spent, arms a slow re-send while
// the jobs stay undrained, up to Config.ResumeAgainMax times.
func (f *Followups) deliveryFailed(ctx context.Context, tag string, p engine.ResumePayload, err error) {
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	msg := err.Error()
	metrics.Resumes.WithLabelValues("failed").Inc()
	f.log.Warn("resume delivery failed", slog.String("session", p.Session), slog.String("message_id", p.MessageID),
		slog.Int("attempt", retried+1), slog.Int("again", p.Again), slog.String("err", msg))
	e := bgjobs.Event{Type: bgjobs.EventResumeFailed, JobID: soleJob(p.Meta.Jobs), Agent: p.Agent, OriginSession: p.Session,
		Status: bgjobs.StatusCompleted, Trigger: p.Meta.Trigger, Error: msg, Attempt: int64(retried + 1), At: f.now().UTC()}
	f.feeds.Publish(e)
	state := "failed"
	if retried >= maxRetry {
		if p.Again < f.cfg.ResumeAgainMax {
			taskID, _ := asynq.GetTaskID(ctx)
			taskID, _, _ = strings.Cut(taskID, ":again")
			p.Again++
			ctx := context.WithoutCancel(ctx)
			if err := f.eng.EnqueueResume(ctx, taskID+":again"+strconv.Itoa(p.Again), p, f.cfg.ResumeAgainInterval); err != nil {
				f.log.Error("resume re-send not armed; the job still drains", slog.String("message_id", p.MessageID), slog.Any("err", err))
			}
		} else {
			state = "gave_up"
			f.log.Error("resume given up; the job still drains", slog.String("session", p.Session), slog.String("message_id", p.MessageID))
		}
	}
	f.store.SetResumeState(tag, p.Meta.Jobs, state, msg)
}

// anyUndrained reports whether any of the jobs is still to be handed over.
func (f *Followups) anyUndrained(ctx context.Context, ids []string) (bool, error) {
	jobs, err := f.store.Briefs(ctx, ids)
	if err != nil {
		return false, err
	}
	for _, j := range jobs {
		if j != nil && !j.Notified {
			return true, nil
		}
	}
	return false, nil
}
