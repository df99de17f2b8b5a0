package search

import (
	"strings"
	"unicode"

	"github.com/bgjobs/bgjobs"
)

// term is one word or quoted phrase of a recall query.
type term struct {
	text   string
	phrase bool
}

// maxTerms bounds a query's cost.
const maxTerms = 32

// maxQueryBytes caps a recall query, over HTTP and MCP alike.
const maxQueryBytes = 1000

// parseQuery reads words and "quoted phrases". Everything else is text:
// there is no field syntax, so a query can never reach another agent's
// documents or another field. An unclosed quote is an error.
func parseQuery(q string) ([]term, error) {
	if len(q) > maxQueryBytes {
		return nil, bgjobs.FieldError("q", "at most %d bytes", maxQueryBytes)
	}
	var out []term
	rest := strings.TrimSpace(q)
	for rest != "" {
		if rest[0] == '"' {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return nil, bgjobs.FieldError("q", "unclosed quote")
			}
			phrase := strings.TrimSpace(rest[1 : 1+end])
			if hasWordChar(phrase) {
				out = append(out, term{text: phrase, phrase: true})
			}
			rest = strings.TrimSpace(rest[2+end:])
			continue
		}
		end := strings.IndexFunc(rest, func(r rune) bool { return unicode.IsSpace(r) || r == '"' })
		if end < 0 {
			end = len(rest)
		}
		if w := rest[:end]; hasWordChar(w) {
			out = append(out, term{text: w})
		}
		rest = strings.TrimSpace(rest[end:])
	}
	if len(out) == 0 {
		return nil, bgjobs.FieldError("q", "a query needs at least one word")
	}
	if len(out) > maxTerms {
		return nil, bgjobs.FieldError("q", "at most %d words and phrases", maxTerms)
	}
	return out, nil
}

func hasWordChar(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }) >= 0
}
