// Package notify renders a drained job as the <task-notification> text the
// origin's model reads (API.md "Sessions").
package notify

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/tasks/internal/registry/handover"
)

// Render renders a drained row in the <task-notification> format of
// API.md. cut caps a turn report (0: deliver whole); work deliverables are
// always whole, since background versus foreground is a transport choice,
// not a content policy.
func Render(r handover.DrainRow, cut int) bgjobs.Notification {
	n := bgjobs.Notification{JobID: r.ID, Status: r.Status, Description: r.Description, BatchID: r.BatchID}
	var b strings.Builder
	b.WriteString("<task-notification>\n")
	fmt.Fprintf(&b, "<task-id>%s</task-id>\n", r.ID)
	fmt.Fprintf(&b, "<status>%s</status>\n", r.Status)
	fmt.Fprintf(&b, "<summary>%s</summary>\n", summary(r))
	switch {
	case r.Status == string(bgjobs.StatusCompleted) && r.Result != nil:
		body := *r.Result
		total := utf8.RuneCountInString(body)
		if bgjobs.Kind(r.Kind) == bgjobs.KindTurn && cut > 0 && total > cut {
			body = CutReport(body, cut)
			n.Truncated = true
		}
		fmt.Fprintf(&b, "<result>%s</result>\n", body)
		if n.Truncated {
			fmt.Fprintf(&b, "<full-report>%d characters; search it with memory_recall or open job %s.</full-report>\n", total, r.ID)
		}
	case r.Error != nil:
		fmt.Fprintf(&b, "<error>%s</error>\n", *r.Error)
	case r.Result != nil:
		fmt.Fprintf(&b, "<result>%s</result>\n", *r.Result)
	}
	b.WriteString("</task-notification>")
	n.Text = b.String()
	return n
}

func summary(r handover.DrainRow) string {
	what := "Background agent"
	if bgjobs.Kind(r.Kind) == bgjobs.KindWork {
		what = "Background job"
	}
	verb := map[string]string{
		string(bgjobs.StatusCompleted): "completed",
		string(bgjobs.StatusFailed):    "failed",
		string(bgjobs.StatusCancelled): "was cancelled",
	}[r.Status]
	return fmt.Sprintf("%s %q %s.", what, r.Description, verb)
}

// CutReport shortens s to at most max runes, ending at the last sentence or
// line boundary in the second half of the allowance when there is one, so
// the model does not read half a sentence.
func CutReport(s string, max int) string {
	r := []rune(s)
	if len(r) <= max {
		return s
	}
	head := r[:max]
	for i := len(head) - 1; i >= max/2; i-- {
		c := head[i]
		if c == '\n' {
			return strings.TrimRightFunc(string(head[:i]), unicode.IsSpace)
		}
		if (c == '.' || c == '!' || c == '?') && i+1 < len(r) && unicode.IsSpace(r[i+1]) {
			return string(head[:i+1])
		}
	}
	return string(head)
}
