package bgjobs

import (
	"regexp"
	"strings"
	"time"
)

// Limits of the HTTP contract (API.md "Conventions").
const (
	MaxBodyBytes   = 1 << 20
	MaxPromptBytes = 256 << 10
	// MaxReportBytes is the largest turn report bgjobs keeps: it is
	// stored, indexed and drained (cut) whole up to this; a longer one
	// fails the job.
	MaxReportBytes      = 4 << 20
	MaxDescriptionChars = 500
)

var (
	agentNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	sessionRE   = regexp.MustCompile(`^[A-Za-z0-9._:@/-]{1,200}$`)
	jobIDRE     = regexp.MustCompile(`^bg-[0-9a-f]{12}$`)
	batchIDRE   = regexp.MustCompile(`^bt-[0-9a-f]{12}$`)
)

// ValidAgentName reports whether s is 1–64 characters of [a-z0-9_-].
func ValidAgentName(s string) bool { return agentNameRE.MatchString(s) }

// ValidSession reports whether s is 1–200 characters of [A-Za-z0-9._:@/-].
func ValidSession(s string) bool { return sessionRE.MatchString(s) }

// ValidJobID reports whether s has the shape bg-<12 hex>.
func ValidJobID(s string) bool { return jobIDRE.MatchString(s) }

// ValidBatchID reports whether s has the shape bt-<12 hex>.
func ValidBatchID(s string) bool { return batchIDRE.MatchString(s) }

// Within turns n units of unit into a duration, or returns the 400 naming
// field when n is below 0 or the duration above max. The range is checked
// before multiplying, so a huge n cannot wrap around into a small one.
func Within(field string, n int64, unit, max time.Duration) (time.Duration, error) {
	if n < 0 || n > int64(max/unit) {
		return 0, FieldError(field, "between 0 and %d", int64(max/unit))
	}
	return time.Duration(n) * unit, nil
}

// CheckSession returns the 400 for a bad session id, naming field; nil
// when s is valid.
func CheckSession(field, s string) error {
	if ValidSession(s) {
		return nil
	}
	if s == "" {
		return FieldError(field, "is required: the session to report back to")
	}
	return FieldError(field, "session ids are 1–200 characters of [A-Za-z0-9._:@/-]")
}

// CheckAgentName returns the 400 for a bad agent name, naming field; nil
// when s is valid.
func CheckAgentName(field, s string) error {
	if ValidAgentName(s) {
		return nil
	}
	return FieldError(field, "agent names are 1–64 characters of [a-z0-9_-]")
}

// ParseStatuses reads "failed,cancelled".
func ParseStatuses(s string) ([]Status, error) {
	var out []Status
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !ValidStatus(part) {
			return nil, FieldError("status", "unknown status %q", part)
		}
		out = append(out, Status(part))
	}
	return out, nil
}
