package bgjobs

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends e as JSON, byte for byte what encoding/json makes of
// it (TestEventJSONIsEncodingJSONs holds it to that, fuzzed). Every job
// publishes several events, and json.Marshal's reflection over Event was
// the largest single cost of publishing one.
func (e *Event) AppendJSON(b []byte) []byte {
	b = append(b, `{"type":`...)
	b = appendJSONString(b, e.Type)
	b = appendField(b, "job_id", e.JobID)
	b = appendField(b, "batch_id", e.BatchID)
	b = append(b, `,"agent":`...)
	b = appendJSONString(b, e.Agent)
	b = append(b, `,"origin_session":`...)
	b = appendJSONString(b, e.OriginSession)
	b = append(b, `,"status":`...)
	b = appendJSONString(b, string(e.Status))
	b = appendField(b, "kind", string(e.Kind))
	b = appendField(b, "description", e.Description)
	b = appendField(b, "result", e.Result)
	b = appendField(b, "error", e.Error)
	if e.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, e.Attempt, 10)
	}
	b = appendField(b, "trigger", e.Trigger)
	if c := e.Counts; c != nil {
		b = append(b, `,"counts":{"completed":`...)
		b = strconv.AppendInt(b, int64(c.Completed), 10)
		b = append(b, `,"failed":`...)
		b = strconv.AppendInt(b, int64(c.Failed), 10)
		b = append(b, `,"cancelled":`...)
		b = strconv.AppendInt(b, int64(c.Cancelled), 10)
		b = append(b, '}')
	}
	if e.Partial {
		b = append(b, `,"partial":true`...)
	}
	if e.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendInt(b, int64(e.Seq), 10)
	}
	b = appendField(b, "state", e.State)
	b = appendField(b, "text", e.Text)
	b = append(b, `,"at":"`...)
	b = e.At.AppendFormat(b, time.RFC3339Nano)
	return append(b, `"}`...)
}

// appendField appends ,"name":"v" unless v is empty (omitempty).
func appendField(b []byte, name, v string) []byte {
	if v == "" {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, name...)
	b = append(b, '"', ':')
	return appendJSONString(b, v)
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does by default: HTML's <, >
// and & escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
