package bgjobs

import "time"

// SpawnMessage is what a spawn answers the model, over HTTP and MCP alike:
// the job is under way (or when it will start), and its result will come
// by itself.
func SpawnMessage(j *Job) string {
	const trust = ". You will be notified when it completes — do NOT poll, check, or spawn a duplicate; continue with other work."
	if !j.RunAt.IsZero() {
		return "Background agent scheduled: " + j.ID + ", to start at " + j.RunAt.UTC().Format(time.RFC3339) + trust
	}
	return "Background agent started: " + j.ID + trust
}

// CutRunes returns s cut to at most n runes (never in the middle of one).
func CutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n])
}

// Excerpt is CutRunes with an ellipsis when something was cut.
func Excerpt(s string, n int) string {
	if c := CutRunes(s, n); c != s {
		return c + "…"
	}
	return s
}
