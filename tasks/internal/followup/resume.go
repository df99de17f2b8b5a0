package followup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/tasks/internal/engine"
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
		MessageID: messageID, Meta: meta, Since: f.now().UnixMilli()})
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
	held, err := f.wake.HoldIfBusy(ctx, tag, p.Meta.Trigger, f.now())
	if err != nil {
		return err
	}
	if held {
		metrics.Resumes.WithLabelValues("held").Inc()
		f.log.Info("resume held: session busy", slog.String("session", p.Session), slog.String("trigger", p.Meta.Trigger))
		return nil
	}
	if f.resumer == nil {
		return fmt.Errorf("%w: this process cannot send resumes", asynq.SkipRetry)
	}
	// One nudge in flight per session: a second waits its turn.
	if ok, err := f.wake.LockDelivery(ctx, tag, p.MessageID, inflightTTL); err != nil {
		return err
	} else if !ok {
		return ErrNudgeInFlight
	}
	defer f.wake.UnlockDelivery(context.WithoutCancel(ctx), tag, p.MessageID)
	// A worker that died after sending but before asynq recorded the task
	// done would send it again on recovery: the delivered mark, set the
	// moment the agent answered, turns that repeat into a no-op.
	if sent, err := f.wake.Delivered(ctx, tag, p.MessageID); err != nil || sent {
		return err
	}
	if err := f.resumer.SendResume(ctx, a, p.Session, p.MessageID, p.Meta); err != nil {
		metrics.Resumes.WithLabelValues("failed").Inc()
		return err
	}
	if err := f.wake.MarkDelivered(context.WithoutCancel(ctx), tag, p.MessageID, engine.ResumeRetention); err != nil {
		f.log.Warn("resume delivered but not marked", slog.String("message_id", p.MessageID), slog.Any("err", err))
	}
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
