package handlers

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers/internal/incoming"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/tasks"
)

// Memory is the knowledge store the API serves: recall over the index, and
// waiting for a fed document to become searchable, read back from the
// stream (WaitFor) or offered by this process ahead of that read (Expect).
type Memory interface {
	Recall(ctx context.Context, r search.RecallRequest) (*search.RecallResult, error)
	WaitFor(ctx context.Context, streamID string) error
	Expect(docs []search.Doc) *search.Offer
}

// KnowledgeMaxBytes caps text indexed through POST /v1/knowledge.
const KnowledgeMaxBytes = 64 << 10

func noMemory() error {
	return bgjobs.Errorf(bgjobs.EUnavailable, "this process serves no search index")
}

func handleRecall(mem Memory) echo.HandlerFunc {
	return func(c echo.Context) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		if mem == nil {
			return noMemory()
		}
		q, err := incoming.Query(c)
		if err != nil {
			return err
		}
		req := search.RecallRequest{Agent: agent, Query: q.Get("q"), Session: q.Get("session"), SourceType: q.Get("source_type")}
		if req.Session != "" {
			if err := bgjobs.CheckSession("session", req.Session); err != nil {
				return err
			}
		}
		if s := q.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil {
				return bgjobs.FieldError("limit", "not an integer: %q", s)
			}
			req.Limit = n
		}
		if s := q.Get("include_superseded"); s != "" {
			b, err := strconv.ParseBool(s)
			if err != nil {
				return bgjobs.FieldError("include_superseded", "not a boolean: %q", s)
			}
			req.IncludeSuperseded = b
		}
		res, err := mem.Recall(c.Request().Context(), req)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, res)
	}
}

type knowledgeBody struct {
	Session   string          `json:"session"`
	Title     string          `json:"title"`
	Text      string          `json:"text"`
	URL       string          `json:"url"`
	Documents []knowledgeText `json:"documents"`
}

// knowledgeText is one text of a request's documents.
type knowledgeText struct {
	Title string `json:"title"`
	Text  string `json:"text"`
}

// KnowledgeMaxDocuments caps the texts of one POST /v1/knowledge. Texts sent
// together share the index's batches: one caller with many texts indexes
// them at bleve's batch rate, where one text a request waits for a batch
// of its own.
const KnowledgeMaxDocuments = 100

// handleKnowledge indexes text at once (one, or several as documents), or
// turns a URL into an ingest job.
func handleKnowledge(m *tasks.Manager, mem Memory) echo.HandlerFunc {
	return func(c echo.Context) error {
		agent, err := agentOf(c)
		if err != nil {
			return err
		}
		if mem == nil {
			return noMemory()
		}
		var b knowledgeBody
		if err := decodeBody(c, &b); err != nil {
			return err
		}
		if err := bgjobs.CheckSession("session", b.Session); err != nil {
			return err
		}
		ctx := c.Request().Context()
		if b.URL != "" {
			switch {
			case b.Text != "":
				return bgjobs.FieldError("text", "give text or url, not both")
			case len(b.Documents) > 0:
				return bgjobs.FieldError("documents", "give documents or url, not both")
			}
			j, _, err := m.Spawn(ctx, tasks.SpawnRequest{Agent: agent, OriginSession: b.Session, Kind: bgjobs.KindWork,
				Description: bgjobs.CutRunes("Ingest "+b.URL, bgjobs.MaxDescriptionChars),
				Work:        &bgjobs.WorkSpec{Type: "ingest", Args: mustJSON(map[string]string{"url": b.URL})}})
			if err != nil {
				if be, ok := err.(*bgjobs.Error); ok && strings.HasPrefix(be.Field, "work.args") {
					be.Field = "url"
				}
				return err
			}
			return c.JSON(http.StatusAccepted, spawnResponse{ID: j.ID, Status: j.Status, BatchID: j.BatchID, Message: bgjobs.SpawnMessage(j)})
		}
		texts, single := b.Documents, b.Documents == nil
		switch {
		case !single && len(texts) == 0:
			return bgjobs.FieldError("documents", "is empty: give 1–%d texts", KnowledgeMaxDocuments)
		case single && strings.TrimSpace(b.Text) == "":
			return bgjobs.FieldError("text", "give text (or a url) to index")
		case single:
			texts = []knowledgeText{{Title: b.Title, Text: b.Text}}
		case b.Text != "" || b.Title != "":
			return bgjobs.FieldError("documents", "give documents, or title and text, not both")
		case len(texts) > KnowledgeMaxDocuments:
			return bgjobs.FieldError("documents", "at most %d texts a request", KnowledgeMaxDocuments)
		}
		var docs []search.Doc
		ids := make([]string, len(texts))
		for i, t := range texts {
			field := "text"
			if !single {
				field = fmt.Sprintf("documents[%d].text", i)
			}
			passages, err := knowledgeDocs(agent, b.Session, t, field)
			if err != nil {
				return err
			}
			ids[i] = passages[0].DocID
			docs = append(docs, passages...)
		}
		offer := mem.Expect(docs)
		defer offer.Cancel()
		last, err := m.AppendDocs(ctx, docs)
		if err != nil {
			return err
		}
		// Durable either way; this makes the texts searchable before we answer.
		waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if offer.Apply(waitCtx) != nil {
			_ = mem.WaitFor(waitCtx, last)
		}
		if single {
			return c.JSON(http.StatusCreated, map[string]any{"doc_id": ids[0], "passages": len(docs)})
		}
		return c.JSON(http.StatusCreated, map[string]any{"doc_ids": ids, "passages": len(docs)})
	}
}

// knowledgeDocs checks one text and cuts it into the passages indexed;
// field names the text in errors.
func knowledgeDocs(agent, session string, t knowledgeText, field string) ([]search.Doc, error) {
	if strings.TrimSpace(t.Text) == "" {
		return nil, bgjobs.FieldError(field, "give text to index")
	}
	if len(t.Text) > KnowledgeMaxBytes {
		return nil, &bgjobs.Error{Code: bgjobs.ETooLarge, Message: "text is over 64 KiB", Field: field}
	}
	if !utf8.ValidString(t.Text) || !utf8.ValidString(t.Title) {
		return nil, bgjobs.FieldError(field, "must be valid UTF-8")
	}
	title := strings.TrimSpace(t.Title)
	if title == "" {
		title = "Note"
	}
	return search.Passages(search.NewDocID("kn"), agent, session, search.SourceIngest, bgjobs.CutRunes(title, 300), t.Text, search.TrustExternal), nil
}
