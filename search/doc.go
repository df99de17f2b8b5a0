// Package search is bgjobs' knowledge store: a bleve index of every report
// and ingested document, fed from a Redis stream by one batching writer per
// process, and queried by Recall. The index is derived data: it can always
// be rebuilt from the stream.
package search

import (
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/keyword"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"
	"github.com/blevesearch/bleve/v2/mapping"
)

// Source types of documents.
const (
	SourceReport = "background_report"
	SourceIngest = "ingest"
	SourceNote   = "knowledge"
)

// Trust tiers: how far a document's content can be trusted.
const (
	// TrustAgent is an agent-derived report.
	TrustAgent = 2
	// TrustExternal is fetched or user-supplied content.
	TrustExternal = 3
)

// Doc is one indexed document.
type Doc struct {
	DocID      string    `json:"doc_id"`
	JobID      string    `json:"job_id"`
	Agent      string    `json:"agent"`
	Session    string    `json:"session"`
	SourceType string    `json:"source_type"`
	Heading    string    `json:"heading"`
	Body       string    `json:"body"`
	TrustTier  int       `json:"trust_tier"`
	CreatedAt  time.Time `json:"created_at"`
	Superseded bool      `json:"superseded"`
}

// docType names the one document mapping.
const docType = "doc"

// BleveType tells bleve which mapping a Doc uses.
func (Doc) BleveType() string { return docType }

// newMapping: keywords for ids and filters (exact, never analysed, so a
// session id full of punctuation matches itself only), English for the
// text people search.
func newMapping() mapping.IndexMapping {
	kw := bleve.NewKeywordFieldMapping()
	kw.Analyzer = keyword.Name
	text := bleve.NewTextFieldMapping()
	text.Analyzer = en.AnalyzerName
	text.IncludeTermVectors = true // for highlighting
	num := bleve.NewNumericFieldMapping()
	date := bleve.NewDateTimeFieldMapping()
	flag := bleve.NewBooleanFieldMapping()
	stored := bleve.NewKeywordFieldMapping() // not indexed: see below
	// Recall names its fields; nothing queries the composite _all field,
	// so indexing into it is wasted work and disk. Doc values serve sorting
	// and facets, which recall does not ask for (it ranks by score):
	// without them small batches indexed 0–14 % faster (about 7 % at the
	// median over four alternating pairs).
	for _, f := range []*mapping.FieldMapping{kw, text, num, date, flag, stored} {
		f.IncludeInAll = false
		f.DocValues = false
	}

	// Fields recall only hands back are stored, not indexed: a number or a
	// date is indexed as sixteen terms, and every indexed field costs each
	// new segment a dictionary, which for the small batches of callers
	// waiting on their text is a cost per batch, not per document. Both
	// mappings in one process, alternating: 396 → 337 µs a document in
	// batches of 18, 484 → 418 in batches of 1,000. An index made before
	// keeps the mapping it was made with (bleve stores it) until reindex.
	for _, f := range []*mapping.FieldMapping{num, date, stored} {
		f.Index = false
	}

	dm := bleve.NewDocumentStaticMapping()
	for _, f := range []string{"job_id", "agent", "session", "source_type"} {
		dm.AddFieldMappingsAt(f, kw)
	}
	dm.AddFieldMappingsAt("doc_id", stored) // the hit's own id says it
	dm.AddFieldMappingsAt("heading", text)
	dm.AddFieldMappingsAt("body", text)
	dm.AddFieldMappingsAt("trust_tier", num)
	dm.AddFieldMappingsAt("created_at", date)
	dm.AddFieldMappingsAt("superseded", flag)
	// With every field out of it, _all would still be built, empty, in
	// every segment; disabled, it is not there at all.
	dm.AddSubDocumentMapping("_all", bleve.NewDocumentDisabledMapping())

	im := bleve.NewIndexMapping()
	im.AddDocumentMapping(docType, dm)
	im.DefaultMapping = dm
	im.DefaultAnalyzer = en.AnalyzerName
	return im
}
