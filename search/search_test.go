package search

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
)

func openTest(t *testing.T) *Index {
	t.Helper()
	x, rebuilt, err := Open(t.TempDir(), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.True(t, rebuilt)
	t.Cleanup(func() { _ = x.Close() })
	return x
}

func doc(id, agent, session, body string) Doc {
	return Doc{DocID: id, JobID: "bg-" + id, Agent: agent, Session: session, SourceType: SourceReport,
		Heading: "Report " + id, Body: body, TrustTier: TrustAgent, CreatedAt: time.Now().UTC()}
}

func TestRecallIsScopedToTheAgent(t *testing.T) {
	t.Parallel()
	x := openTest(t)
	require.NoError(t, x.Apply([]Doc{
		doc("a1", "alpha", "chat-1", "the fuel figures for the fleet"),
		doc("b1", "beta", "chat-1", "the fuel secret of beta"),
	}, "1-0"))
	ctx := context.Background()
	for _, q := range []string{"fuel", `agent:beta fuel`, `+agent:beta`, `fuel OR agent:beta`, `"fuel" *`, `session:chat-1 fuel`, `fuel\) OR (agent:*`} {
		res, err := x.Recall(ctx, RecallRequest{Agent: "alpha", Query: q})
		if err != nil {
			require.Equal(t, bgjobs.EInvalid, bgjobs.ErrorCode(err), q)
			continue
		}
		for _, h := range res.Hits {
			require.NotEqual(t, "b1", h.DocID, "query %q reached beta's document", q)
		}
	}
	res, err := x.Recall(ctx, RecallRequest{Agent: "alpha", Query: "fuel", Session: "chat-1"})
	require.NoError(t, err)
	require.Len(t, res.Hits, 1)
	require.Contains(t, res.Hits[0].Snippet, "<mark>fuel</mark>")
	res, err = x.Recall(ctx, RecallRequest{Agent: "beta", Query: "fleet"})
	require.NoError(t, err)
	require.Empty(t, res.Hits)
}

func TestRecallWordsAndPhrases(t *testing.T) {
	t.Parallel()
	x := openTest(t)
	require.NoError(t, x.Apply([]Doc{
		doc("p1", "alpha", "s", "the quick brown fox jumps"),
		doc("p2", "alpha", "s", "a brown quick fox sleeps"),
	}, "1-0"))
	ctx := context.Background()
	res, err := x.Recall(ctx, RecallRequest{Agent: "alpha", Query: `"quick brown"`})
	require.NoError(t, err)
	require.Len(t, res.Hits, 1)
	require.Equal(t, "p1", res.Hits[0].DocID)
	res, err = x.Recall(ctx, RecallRequest{Agent: "alpha", Query: `brown fox`})
	require.NoError(t, err)
	require.Len(t, res.Hits, 2)
	for _, bad := range []string{`"unclosed`, ``, `   `, `"" !!`, strings.Repeat("a", maxQueryBytes+1)} {
		_, err := x.Recall(ctx, RecallRequest{Agent: "alpha", Query: bad})
		require.Equal(t, bgjobs.EInvalid, bgjobs.ErrorCode(err), "%q", bad)
	}
	_, err = x.Recall(ctx, RecallRequest{Agent: "alpha", Query: "fox", Limit: 101})
	require.Equal(t, bgjobs.EInvalid, bgjobs.ErrorCode(err))
	// A misspelt source type is a 400, not an empty answer.
	_, err = x.Recall(ctx, RecallRequest{Agent: "alpha", Query: "fox", SourceType: "reports"})
	var be *bgjobs.Error
	require.ErrorAs(t, err, &be)
	require.Equal(t, "source_type", be.Field)
	for _, st := range []string{SourceReport, SourceIngest, SourceNote} {
		_, err = x.Recall(ctx, RecallRequest{Agent: "alpha", Query: "fox", SourceType: st})
		require.NoError(t, err, st)
	}
}

func TestANewReportSupersedesTheOld(t *testing.T) {
	t.Parallel()
	x := openTest(t)
	first := doc("rpt-bg-1-1", "alpha", "s", "draft about zeppelins")
	first.JobID = "bg-1"
	require.NoError(t, x.Apply([]Doc{first}, "1-0"))
	second := doc("rpt-bg-1-2", "alpha", "s", "final about zeppelins")
	second.JobID = "bg-1"
	require.NoError(t, x.Apply([]Doc{second}, "2-0"))
	ctx := context.Background()
	res, err := x.Recall(ctx, RecallRequest{Agent: "alpha", Query: "zeppelins"})
	require.NoError(t, err)
	require.Len(t, res.Hits, 1)
	require.Equal(t, "rpt-bg-1-2", res.Hits[0].DocID)
	res, err = x.Recall(ctx, RecallRequest{Agent: "alpha", Query: "zeppelins", IncludeSuperseded: true})
	require.NoError(t, err)
	require.Len(t, res.Hits, 2)
	cp, err := x.Checkpoint()
	require.NoError(t, err)
	require.Equal(t, "2-0", cp)
}

// A text of one passage is kept as it is, without the split's copy into
// runes: the documents are those the split makes, at and around the size
// limit, in several scripts, and for invalid UTF-8 (which takes the split,
// each bad byte becoming U+FFFD).
func TestPassagesOfOneTextAreWhatTheSplitMakes(t *testing.T) {
	t.Parallel()
	// What the split makes of a text of at most PassageChars runes.
	split := func(text string) string { return strings.TrimSpace(string([]rune(text))) }
	for _, text := range []string{
		"", "  a note  \n", strings.Repeat("x", PassageChars), strings.Repeat("é", PassageChars),
		strings.Repeat("日本", PassageChars/2), "bad \xff byte \xc3", "\xff" + strings.Repeat("y", PassageChars-1),
	} {
		docs := Passages("kn-1", "alpha", "s", SourceIngest, "Note", text, TrustExternal)
		require.Len(t, docs, 1, "%q", text)
		require.Equal(t, split(text), docs[0].Body, "%q", text)
		require.Equal(t, "kn-1", docs[0].DocID)
		require.Equal(t, "Note", docs[0].Heading)
	}
	require.Len(t, Passages("kn-1", "alpha", "s", SourceIngest, "Note", strings.Repeat("é", PassageChars+1), TrustExternal), 2)
}

func TestPassagesSplitLongText(t *testing.T) {
	t.Parallel()
	text := ""
	for len(text) < 3*PassageChars {
		text += "A line of the handbook about safety procedures.\n"
	}
	docs := Passages("kn-1", "alpha", "s", SourceIngest, "Handbook", text, TrustExternal)
	require.GreaterOrEqual(t, len(docs), 3)
	require.Equal(t, "kn-1", docs[0].DocID)
	require.Equal(t, "kn-1#2", docs[1].DocID)
	total := 0
	for _, d := range docs {
		require.LessOrEqual(t, len([]rune(d.Body)), PassageChars)
		total += len(d.Body)
	}
	require.Greater(t, total, 3*PassageChars-len(docs)*2)
}

// Document ids grow with time, so bleve can tell a new document has no
// older copy in a segment from the segment's largest id alone.
func TestNewDocIDsGrowWithTime(t *testing.T) {
	t.Parallel()
	prev := NewDocID("kn")
	for range 5 {
		time.Sleep(2 * time.Millisecond)
		next := NewDocID("kn")
		require.Less(t, prev, next)
		require.True(t, strings.HasPrefix(next, "kn-"), next)
		prev = next
	}
	require.NotEqual(t, NewDocID("kn"), NewDocID("kn"), "ids made in one millisecond differ")
}

func TestCompareIDs(t *testing.T) {
	t.Parallel()
	require.Equal(t, -1, CompareIDs("0-0", "1-0"))
	require.Equal(t, 1, CompareIDs("10-0", "9-5"))
	require.Equal(t, -1, CompareIDs("5-2", "5-10"))
	require.Equal(t, 0, CompareIDs("5-2", "5-2"))
}

// TestStoredOnlyFieldsComeBack: what recall only hands back (the document's
// id, trust tier and time) is stored but not indexed, and _all is not built
// (with the mapping before, every field was excluded from _all, yet the
// index still listed it): a hit still carries every one of them.
func TestStoredOnlyFieldsComeBack(t *testing.T) {
	t.Parallel()
	x := openTest(t)
	d := doc("s1", "alpha", "chat-1", "harbour fuel figures")
	d.TrustTier, d.CreatedAt = TrustExternal, time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	require.NoError(t, x.Apply([]Doc{d}, "1-0"))
	res, err := x.Recall(context.Background(), RecallRequest{Agent: "alpha", Query: "harbour"})
	require.NoError(t, err)
	require.Len(t, res.Hits, 1)
	h := res.Hits[0]
	require.Equal(t, "s1", h.DocID)
	require.Equal(t, TrustExternal, h.TrustTier)
	require.True(t, d.CreatedAt.Equal(h.CreatedAt), "created_at %v, want %v", h.CreatedAt, d.CreatedAt)
	// firstTerm closes its dictionary before anything is asserted: an
	// open one holds the index, and Close (the test's cleanup) would wait.
	firstTerm := func(field string) string {
		dict, err := x.idx.FieldDict(field)
		require.NoError(t, err)
		entry, err := dict.Next()
		require.NoError(t, dict.Close())
		require.NoError(t, err)
		if entry == nil {
			return ""
		}
		return entry.Term
	}
	for _, field := range []string{"doc_id", "trust_tier", "created_at"} {
		require.Empty(t, firstTerm(field), "field %s has terms in the index", field)
	}
	fields, err := x.idx.Fields()
	require.NoError(t, err)
	require.NotContains(t, fields, "_all", "the composite _all field is still built")
	require.NotEmpty(t, firstTerm("body"), "body has no terms: the check above would pass for nothing")
}
