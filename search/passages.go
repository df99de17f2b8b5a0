package search

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// PassageChars is the size a long text is split into for indexing.
const PassageChars = 4000

// NewDocID returns a fresh document id with a prefix: the time in
// milliseconds, then random. Ids that grow with time are cheap to index:
// bleve checks each new document against every segment in the index for
// an older copy to replace, and skips a segment at once when the id sorts
// after every id in it. Random ids made every batch look its ids up in
// each of the hundreds of small segments that callers waiting one text at
// a time leave in memory between flushes.
func NewDocID(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%011x%s", prefix, time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}

// Passages splits text into documents of about PassageChars, at paragraph
// or line boundaries where it can; the first keeps id, the rest id#2, id#3…
func Passages(id, agent, session, source, title, text string, tier int) []Doc {
	now := time.Now().UTC()
	// A text has no more runes than bytes: one that short needs no count.
	if utf8.ValidString(text) && (len(text) <= PassageChars || utf8.RuneCountInString(text) <= PassageChars) {
		// One passage, the text as it is: the split below would copy it
		// into runes and back, as much CPU as decoding its request. (It
		// also turns each invalid byte into U+FFFD; a valid text has none.)
		return []Doc{{DocID: id, Agent: agent, Session: session, SourceType: source, Heading: title,
			Body: strings.TrimSpace(text), TrustTier: tier, CreatedAt: now}}
	}
	var docs []Doc
	rest := []rune(text)
	for n := 1; ; n++ {
		chunk := rest
		if len(chunk) > PassageChars {
			cut := PassageChars
			for i := PassageChars - 1; i > PassageChars/2; i-- {
				if chunk[i] == '\n' {
					cut = i + 1
					break
				}
			}
			chunk = chunk[:cut]
		}
		d := Doc{DocID: id, Agent: agent, Session: session, SourceType: source, Heading: title,
			Body: strings.TrimSpace(string(chunk)), TrustTier: tier, CreatedAt: now}
		if n > 1 {
			d.DocID = fmt.Sprintf("%s#%d", id, n)
			d.Heading = fmt.Sprintf("%s (part %d)", title, n)
		}
		docs = append(docs, d)
		rest = rest[len(chunk):]
		if len(rest) == 0 {
			return docs
		}
	}
}
