package bgjobs

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
