package followup

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/metrics"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks/internal/registry"
)

// errAwaitingIndex keeps an outbox entry until the report it announces is
// searchable; the indexer moves it on.
var errAwaitingIndex = errors.New("report not yet searchable")

// errAwaitingWaiter keeps a waited entry while its caller still waits.
var errAwaitingWaiter = errors.New("a caller is waiting for this job")

// IsWaiting reports whether err only means "not yet": the entry stays and
// something later moves it on.
func IsWaiting(err error) bool {
	return errors.Is(err, errAwaitingIndex) || errors.Is(err, errAwaitingWaiter)
}

// WaitGrace lets a waiter that just hit its deadline finish taking the
// result before the pump treats the job as unclaimed.
const WaitGrace = 2 * time.Second

// carriers maps each outbox entry kind to the function that carries it out
// (registry/outbox.go has the table of who records each).
func (f *Followups) carrier(k registry.EntryKind) func(ctx context.Context, tag string, e registry.Entry) error {
	switch k {
	case registry.EntryAnnounce:
		return f.announce
	case registry.EntryWaited:
		return f.announceWaited
	case registry.EntryJoin:
		return f.join
	case registry.EntryStraggler:
		return f.armStraggler
	case registry.EntryIndex:
		return f.index
	case registry.EntryMerged:
		return f.merged
	case registry.EntryFold:
		return f.fold
	}
	return nil
}

// Pump moves a session's outbox on: each entry is carried out and leaves
// the outbox only once that is done. It is safe to run any number of
// times, from any process: every task it enqueues has a deterministic id.
func (f *Followups) Pump(ctx context.Context, tag string) error {
	ctx = context.WithoutCancel(ctx)
	entries, err := f.store.Outbox(ctx, tag)
	if err != nil {
		return err
	}
	var first error
	for _, e := range entries {
		if err := f.PumpEntry(ctx, tag, e); err != nil && !IsWaiting(err) {
			f.log.Warn("outbox entry will be retried", slog.String("entry", e.String()), slog.Any("err", err))
			first = cmp.Or(first, err)
		}
	}
	return first
}

// PumpEntry carries out one outbox entry its caller just recorded, without
// reading the rest of the session's outbox: concurrent settles of one
// session each carry their own.
func (f *Followups) PumpEntry(ctx context.Context, tag string, e registry.Entry) error {
	ctx = context.WithoutCancel(ctx)
	carry := f.carrier(e.Kind)
	if carry == nil {
		f.log.Error("unknown outbox entry dropped", slog.String("entry", e.String()))
	} else if err := carry(ctx, tag, e); err != nil {
		return err
	}
	return f.store.Done(ctx, tag, e)
}

// announce: one job ended; nudge its session (through the storm guard).
func (f *Followups) announce(ctx context.Context, tag string, e registry.Entry) error {
	j, err := f.announceable(ctx, tag, e.Ref)
	if err != nil || j == nil {
		return err
	}
	return f.announceJob(ctx, tag, j)
}

// announceWaited: like announce, once the caller waiting for the job has
// let go; nothing if it took the result.
func (f *Followups) announceWaited(ctx context.Context, tag string, e registry.Entry) error {
	j, err := f.announceable(ctx, tag, e.Ref)
	if err != nil || j == nil {
		return err
	}
	if f.now().Before(j.WaitUntil.Add(WaitGrace)) {
		return errAwaitingWaiter // its caller may still take it
	}
	if j.Notified {
		return nil // the caller took it and died before tidying up
	}
	return f.announceJob(ctx, tag, j)
}

// announceable loads a job whose session may be woken, or nil.
func (f *Followups) announceable(ctx context.Context, tag, id string) (*bgjobs.Job, error) {
	agent, session := bgjobs.SplitTag(tag)
	if !f.mayWake(ctx, agent, session, false) {
		return nil, nil
	}
	j, err := f.store.Load(ctx, tag, id)
	if err != nil || j == nil || j.Incognito {
		return nil, err
	}
	return j, nil
}

func (f *Followups) announceJob(ctx context.Context, tag string, j *bgjobs.Job) error {
	if f.awaitingIndex(ctx, j) {
		return errAwaitingIndex // the drain would hold it back: nudge once it is there
	}
	meta := bgjobs.ResumeMeta{Trigger: j.ID, Jobs: []string{j.ID}, BatchID: j.BatchID}
	meta.Counts.Add(j.Status, 1)
	if f.cfg.ResumeCoalesce > 0 && j.BatchID == nil {
		send, err := f.storm.gate(ctx, tag, j)
		if err != nil || !send {
			return err // merged into the window's nudge
		}
	}
	taskID, msgID := resumeIDs("resume:", j.ID, j.Generation)
	return f.enqueueResume(ctx, tag, taskID, msgID, meta)
}

// resumeIDs are the task and message ids of a resume first caused by job
// id: a retried job's new outcome is news, so its generation is in both.
func resumeIDs(taskPrefix, id string, generation int) (taskID, messageID string) {
	taskID, messageID = taskPrefix+id, "resume-"+id
	if generation > 0 {
		taskID, messageID = fmt.Sprintf("%s:r%d", taskID, generation), fmt.Sprintf("%s-r%d", messageID, generation)
	}
	return taskID, messageID
}

// join: the batch joined; tell people, and nudge once with the counts.
func (f *Followups) join(ctx context.Context, tag string, e registry.Entry) error {
	b, err := f.store.LoadBatch(ctx, tag, e.Ref)
	if err != nil || b == nil {
		return err
	}
	if f.indexerAlive(ctx) {
		// Like a single job's nudge, the join waits until the drain would
		// hand over every member.
		members, err := f.store.Briefs(ctx, b.Jobs)
		if err != nil {
			return err
		}
		for _, j := range members {
			if j != nil && f.awaitingIndex(ctx, j) {
				return errAwaitingIndex
			}
		}
	}
	agent, session := bgjobs.SplitTag(tag)
	if !b.Partial {
		// Joined in full: its straggler timeout would find the claim taken.
		// (A partial join is that timeout.)
		f.strag.Disarm(tag, b.ID)
	}
	metrics.BatchJoins.WithLabelValues(strconv.FormatBool(b.Partial)).Inc()
	f.feeds.Publish(bgjobs.Event{Type: bgjobs.EventBatchJoined, BatchID: b.ID, Agent: agent, OriginSession: session,
		Status: bgjobs.StatusCompleted, Counts: &b.Counts, Partial: b.Partial, At: f.now().UTC()})
	if !f.mayWake(ctx, agent, session, b.AllIncognito) {
		return nil
	}
	id := b.ID
	meta := bgjobs.ResumeMeta{Trigger: b.ID, Jobs: b.Jobs, BatchID: &id, Counts: b.Counts, Partial: b.Partial}
	return f.enqueueResume(ctx, tag, "resume:"+b.ID, "resume-"+b.ID, meta)
}

// armStraggler: the batch's first member settled; its straggler timeout
// starts. A batch whose members all ended at once may have joined already:
// its timeout, found due, does nothing.
func (f *Followups) armStraggler(ctx context.Context, tag string, e registry.Entry) error {
	due := f.now().Add(f.cfg.BatchJoinTimeout)
	if err := f.strag.Arm(ctx, tag, e.Ref, due); err != nil {
		return err
	}
	f.expectStraggler(due)
	return nil
}

// index: a turn's report goes to the reports stream.
func (f *Followups) index(ctx context.Context, tag string, e registry.Entry) error {
	j, err := f.store.Load(ctx, tag, e.Ref)
	if err != nil || j == nil {
		return err
	}
	doc, err := json.Marshal(ReportDoc(j))
	if err != nil {
		return err
	}
	_, err = f.feeds.AppendReports(ctx, [][]byte{doc})
	return err
}

// merged: a storm window closed; one nudge lists every job merged behind it.
func (f *Followups) merged(ctx context.Context, tag string, e registry.Entry) error {
	agent, session := bgjobs.SplitTag(tag)
	if !f.mayWake(ctx, agent, session, false) {
		return nil
	}
	ids := strings.Split(e.Ref, ",")
	meta := bgjobs.ResumeMeta{Trigger: ids[0], Jobs: []string{}}
	generation := 0
	for i, id := range ids {
		j, err := f.store.Load(ctx, tag, id)
		if err != nil {
			return err
		}
		if i == 0 && j != nil {
			generation = j.Generation
		}
		if j == nil || j.Incognito {
			continue
		}
		meta.Jobs = append(meta.Jobs, id)
		meta.Counts.Add(j.Status, 1)
	}
	if len(meta.Jobs) == 0 {
		return nil
	}
	// The oldest merged job never had a nudge of its own: its id (and
	// generation, so a retried job's merge is news) names this one, and a
	// repeat of the pump is a no-op.
	taskID, msgID := resumeIDs("storm:", ids[0], generation)
	return f.enqueueResume(ctx, tag, taskID, msgID, meta)
}

// fold: a busy session went idle with nudges held; one nudge for what is
// still undrained.
func (f *Followups) fold(ctx context.Context, tag string, e registry.Entry) error {
	agent, session := bgjobs.SplitTag(tag)
	if !f.mayWake(ctx, agent, session, false) {
		return nil
	}
	ids, err := f.store.PendingIDs(ctx, tag, foldJobsMax)
	if err != nil {
		return err
	}
	meta := bgjobs.ResumeMeta{Trigger: e.Ref, Jobs: []string{}}
	for _, id := range ids {
		j, err := f.store.Load(ctx, tag, id)
		if err != nil {
			return err
		}
		if j == nil {
			continue
		}
		meta.Jobs = append(meta.Jobs, id)
		meta.Counts.Add(j.Status, 1)
	}
	if len(meta.Jobs) == 0 {
		return nil
	}
	if strings.HasPrefix(e.Ref, "bt-") {
		b := e.Ref
		meta.BatchID = &b
	}
	suffix := strconv.FormatInt(e.At, 10)
	return f.enqueueResume(ctx, tag, "fold:"+e.Ref+":"+suffix, "resume-"+e.Ref+"-"+suffix, meta)
}

// foldJobsMax caps the job ids listed in a coalesced nudge.
const foldJobsMax = 100

// OnIndexed records that reports are searchable and moves on what waited
// for them (their notifications and resumes). The search writer calls it
// after each batch.
func (f *Followups) OnIndexed(ctx context.Context, docs []search.Doc) {
	var refs []registry.JobRef
	for _, d := range docs {
		if d.SourceType == search.SourceReport && d.JobID != "" {
			refs = append(refs, registry.JobRef{Tag: bgjobs.Tag(d.Agent, d.Session), ID: d.JobID})
		}
	}
	if len(refs) == 0 {
		return
	}
	tags, err := f.store.MarkIndexed(ctx, refs)
	if err != nil {
		f.log.Warn("mark reports indexed", slog.Any("err", err))
		return
	}
	for tag := range tags {
		_ = f.Pump(ctx, tag)
	}
}

// ReportDoc is the document of a turn job's report. A retry's report gets
// a new id (by generation and attempt) and supersedes the earlier one.
func ReportDoc(j *bgjobs.Job) search.Doc {
	at := j.CreatedAt
	if j.CompletedAt != nil {
		at = *j.CompletedAt
	}
	body := ""
	if j.Result != nil {
		body = *j.Result
	}
	return search.Doc{
		DocID: fmt.Sprintf("rpt-%s-%d-%d", j.ID, j.Generation, j.Attempts), JobID: j.ID, Agent: j.Agent, Session: j.OriginSession,
		SourceType: search.SourceReport, Heading: fmt.Sprintf("%s (%s)", j.Description, j.ID), Body: body,
		TrustTier: search.TrustAgent, CreatedAt: at,
	}
}
