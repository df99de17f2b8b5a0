package agents

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"
	"golang.org/x/net/html"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/internal/netguard"
	"github.com/bgjobs/bgjobs/search"
	"github.com/bgjobs/bgjobs/work"
)

// Ingest limits.
const (
	IngestMaxBytes = 2 << 20
	ingestTimeout  = 30 * time.Second
)

// DocFeed appends documents to the search feed.
type DocFeed func(ctx context.Context, docs []search.Doc) (string, error)

type ingestArgs struct {
	URL string `json:"url"`
}

// IngestKind fetches a URL with the SSRF-safe client, turns HTML into text
// with a real parser, and indexes it as source "ingest", trust tier 3.
// allow is the client's allow-list (BGJOBS_FETCH_ALLOW): a URL naming an
// internal address literally, and not on it, is refused at spawn; a name is
// judged when the client dials it.
func IngestKind(client *http.Client, allow netguard.Allow, feed DocFeed) work.Kind {
	return work.Kind{
		Name: "ingest",
		Check: func(raw json.RawMessage) error {
			var a ingestArgs
			if err := work.DecodeArgs(raw, &a); err != nil {
				return err
			}
			if a.URL == "" {
				return bgjobs.FieldError("work.args.url", "is required: the http:// or https:// URL to fetch")
			}
			if err := netguard.CheckURL(a.URL, allow, "BGJOBS_FETCH_ALLOW"); err != nil {
				return bgjobs.FieldError("work.args.url", "%v", err)
			}
			return nil
		},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a ingestArgs
			if err := work.DecodeArgs(raw, &a); err != nil {
				return "", err
			}
			job, _ := work.JobFromContext(ctx)
			title, text, err := fetchText(ctx, client, a.URL)
			if err != nil {
				return "", err
			}
			if title == "" {
				title = a.URL
			}
			docs := search.Passages(search.NewDocID("ing"), job.Agent, job.OriginSession, search.SourceIngest, title, text, search.TrustExternal)
			for i := range docs {
				docs[i].JobID = job.ID
			}
			if _, err := feed(ctx, docs); err != nil {
				return "", work.Retryable(err)
			}
			return fmt.Sprintf("Ingested %q from %s: %d characters in %d passage(s), doc %s. Search it with memory_recall.",
				title, a.URL, len([]rune(text)), len(docs), docs[0].DocID), nil
		},
	}
}

func fetchText(ctx context.Context, client *http.Client, u string) (title, text string, err error) {
	ctx, cancel := context.WithTimeout(ctx, ingestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("User-Agent", "bgjobs-ingest/1")
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, netguard.ErrForbiddenAddress) {
			return "", "", fmt.Errorf("refused: %w", err)
		}
		return "", "", work.Retryable(fmt.Errorf("fetch %s: %w", u, err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		err := fmt.Errorf("fetch %s: %s", u, resp.Status)
		if resp.StatusCode >= 500 {
			return "", "", work.Retryable(err)
		}
		return "", "", err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, IngestMaxBytes+1))
	if err != nil {
		return "", "", work.Retryable(err)
	}
	if len(body) > IngestMaxBytes {
		return "", "", fmt.Errorf("fetch %s: larger than %d bytes", u, IngestMaxBytes)
	}
	if strings.Contains(resp.Header.Get("Content-Type"), "html") || bytes.Contains(bytes.ToLower(body[:min(len(body), 512)]), []byte("<html")) {
		title, text := HTMLText(body)
		return title, text, nil
	}
	return "", string(body), nil
}

// HTMLText extracts a page's title and readable text, skipping scripts,
// styles and other non-content elements.
func HTMLText(page []byte) (title, text string) {
	doc, err := html.Parse(bytes.NewReader(page))
	if err != nil {
		return "", string(page)
	}
	var b strings.Builder
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "script", "style", "noscript", "template", "svg", "head":
				if n.Data == "head" {
					for c := n.FirstChild; c != nil; c = c.NextSibling {
						if c.Type == html.ElementNode && c.Data == "title" && c.FirstChild != nil {
							title = strings.TrimSpace(c.FirstChild.Data)
						}
					}
				}
				return
			case "p", "div", "br", "li", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "section", "article":
				b.WriteString("\n")
			}
		}
		if n.Type == html.TextNode {
			if t := strings.TrimSpace(n.Data); t != "" {
				b.WriteString(t)
				b.WriteString(" ")
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	lines := strings.Split(b.String(), "\n")
	var out []string
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return title, strings.Join(out, "\n")
}

type delegateArgs struct {
	Agent   string `json:"agent"`
	Message string `json:"message"`
}

// AgentLookup finds a registered agent.
type AgentLookup func(ctx context.Context, name string) (*bgjobs.Agent, error)

// DelegateKind sends a message to another registered agent over A2A; its
// reply is the deliverable, handed over whole.
func (r *A2A) DelegateKind(lookup AgentLookup) work.Kind {
	return work.Kind{
		Name: "delegate",
		Check: func(raw json.RawMessage) error {
			var a delegateArgs
			if err := work.DecodeArgs(raw, &a); err != nil {
				return err
			}
			if err := bgjobs.CheckAgentName("work.args.agent", a.Agent); err != nil {
				return err
			}
			if strings.TrimSpace(a.Message) == "" {
				return bgjobs.FieldError("work.args.message", "a delegate job needs a message")
			}
			return nil
		},
		// A delegate goes only to the job's own agent, to agents the admin
		// let it reach (delegate_to), or anywhere for the admin itself. An
		// unregistered agent and another tenant's get the same answer, so
		// the answer does not tell which names exist.
		Authorize: func(ctx context.Context, agent string, raw json.RawMessage) error {
			var a delegateArgs
			if err := work.DecodeArgs(raw, &a); err != nil {
				return err
			}
			refused := bgjobs.FieldError("work.args.agent", "no agent %q that %s may delegate to", a.Agent, agent)
			if c, api := work.CallerFrom(ctx); api && !c.Admin && a.Agent != agent {
				from, err := lookup(ctx, agent)
				if err != nil {
					return err
				}
				if from == nil || !slices.Contains(from.DelegateTo, a.Agent) {
					return refused
				}
			}
			target, err := lookup(ctx, a.Agent)
			if err != nil {
				return err
			}
			if target == nil || target.A2AURL == "" {
				return refused
			}
			return nil
		},
		Run: func(ctx context.Context, raw json.RawMessage) (string, error) {
			var a delegateArgs
			if err := work.DecodeArgs(raw, &a); err != nil {
				return "", err
			}
			target, err := lookup(ctx, a.Agent)
			if err != nil {
				return "", work.Retryable(err)
			}
			if target == nil || target.A2AURL == "" {
				return "", fmt.Errorf("agent %q is not registered with an a2a_url", a.Agent)
			}
			job, _ := work.JobFromContext(ctx)
			client, err := a2aclient.NewFromEndpoints(ctx, []a2a.AgentInterface{{URL: target.A2AURL, Transport: a2a.TransportProtocolJSONRPC}},
				a2aclient.WithJSONRPCTransport(r.HTTP))
			if err != nil {
				return "", err
			}
			defer client.Destroy()
			meta := map[string]any{"origin": "background", "kind": "background.delegate", "trigger": job.ID, "from_agent": job.Agent}
			msg := &a2a.Message{ID: job.ID, ContextID: BackgroundContext(job.ID), Role: a2a.MessageRoleUser,
				Parts: a2a.ContentParts{a2a.TextPart{Text: a.Message}}, Metadata: meta}
			res, err := client.SendMessage(ctx, &a2a.MessageSendParams{Message: msg, Metadata: meta})
			if err != nil {
				if ctx.Err() != nil {
					return "", ctx.Err()
				}
				return "", work.Retryable(netguard.Brief(fmt.Errorf("delegate to %s: %w", a.Agent, err)))
			}
			switch v := res.(type) {
			case *a2a.Message:
				return messageText(v), nil
			case *a2a.Task:
				return r.follow(ctx, client, v)
			}
			return "", fmt.Errorf("delegate: unexpected result %T", res)
		},
	}
}
