package agents

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"

	"github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/bgjobs/bgjobs"
)

// ErrReportTooLarge is a turn whose report (or one streamed event) is over
// what bgjobs keeps: the job fails, once, rather than re-run the turn.
var ErrReportTooLarge = fmt.Errorf("the report is over the %d MiB bgjobs keeps", bgjobs.MaxReportBytes>>20)

// maxEventBytes bounds one streamed event: a report at the cap, with room
// for JSON escaping and the event around it.
const maxEventBytes = 4*bgjobs.MaxReportBytes + 64<<10

// longStreams is a2a-go's JSON-RPC transport with message/stream read by
// bgjobs: a2a-go v0.3.3 reads the event stream with a bufio.Scanner's
// default 64 KiB line, so a report over that in one event broke the stream
// ("token too long"). Every other call is a2a-go's.
type longStreams struct {
	a2aclient.Transport
	url  string
	http *http.Client
}

func jsonrpcWithLongStreams(hc *http.Client) a2aclient.FactoryOption {
	return a2aclient.WithTransport(a2a.TransportProtocolJSONRPC,
		a2aclient.TransportFactoryFn(func(_ context.Context, url string, _ *a2a.AgentCard) (a2aclient.Transport, error) {
			return longStreams{Transport: a2aclient.NewJSONRPCTransport(url, hc), url: url, http: hc}, nil
		}))
}

// SendStreamingMessage posts message/stream and yields its events.
func (t longStreams) SendStreamingMessage(ctx context.Context, p *a2a.MessageSendParams) iter.Seq2[a2a.Event, error] {
	return func(yield func(a2a.Event, error) bool) {
		body, err := t.open(ctx, p)
		if err != nil {
			yield(nil, err)
			return
		}
		defer body.Close()
		r := bufio.NewReaderSize(body, 64<<10)
		for {
			line, err := readLine(r, maxEventBytes)
			if errors.Is(err, io.EOF) && len(line) == 0 {
				return
			}
			if err != nil && !errors.Is(err, io.EOF) {
				yield(nil, err)
				return
			}
			data, ok := bytes.CutPrefix(line, []byte("data:"))
			if !ok {
				continue // ids, comments, blank separators
			}
			ev, err := eventOf(bytes.TrimSpace(data))
			if err != nil || !yield(ev, nil) {
				if err != nil {
					yield(nil, err)
				}
				return
			}
		}
	}
}

func (t longStreams) open(ctx context.Context, p *a2a.MessageSendParams) (io.ReadCloser, error) {
	var id [8]byte
	_, _ = rand.Read(id[:])
	raw, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "message/stream", "params": p, "id": hex.EncodeToString(id[:])})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := t.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("unexpected HTTP status: %s", resp.Status)
	}
	return resp.Body, nil
}

// readLine reads one line of at most max bytes (without its newline).
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			return nil, fmt.Errorf("a streamed event over %d MiB: %w", max>>20, ErrReportTooLarge)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

// eventOf decodes one JSON-RPC response of the stream into its A2A event.
func eventOf(data []byte) (a2a.Event, error) {
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("unreadable stream event: %w", err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("agent error %d: %s", resp.Error.Code, resp.Error.Message)
	}
	return a2a.UnmarshalEventJSON(resp.Result)
}
