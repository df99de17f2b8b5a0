package handlers_test

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/bgjobs/bgjobs"
	"github.com/bgjobs/bgjobs/handlers"
	"github.com/bgjobs/bgjobs/internal/testenv"
	"github.com/bgjobs/bgjobs/mcpapi"
	"github.com/bgjobs/bgjobs/tasks"
)

// A caller that sends its headers and then withholds the body (or trickles
// it) is answered 400 once the body's time is up and the connection is
// closed; a body that arrives in time lifts the deadline, so what the
// request then waits for (a spawn's wait_ms here) runs its full course.
func TestABodyThatNeverArrives(t *testing.T) {
	t.Parallel()
	env := testenv.New(t)
	cfg := bgjobs.Config{Namespace: env.Namespace, APIKeys: map[string]string{"key-a": "alpha"}}.WithDefaults()
	m := tasks.NewManager(env.RDB, cfg, tasks.Deps{Logger: slog.New(slog.DiscardHandler)})
	t.Cleanup(func() { _ = m.Close() })
	const timeout = 500 * time.Millisecond
	srv := httptest.NewServer(handlers.NewServer(cfg, handlers.Deps{Manager: m, MCP: mcpapi.Handler(m, nil, false), Log: slog.New(slog.DiscardHandler), BodyTimeout: timeout}))
	t.Cleanup(srv.Close)

	send := func(t *testing.T, head string, parts ...string) (*bufio.Reader, net.Conn) {
		t.Helper()
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		require.NoError(t, conn.SetDeadline(time.Now().Add(30*time.Second)))
		_, err = io.WriteString(conn, head)
		require.NoError(t, err)
		for _, p := range parts {
			time.Sleep(timeout / 5)
			_, err = io.WriteString(conn, p)
			require.NoError(t, err)
		}
		return bufio.NewReader(conn), conn
	}
	head := func(path string, n int) string {
		return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer key-a\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(n) + "\r\n\r\n"
	}

	for _, path := range []string{"/v1/jobs", "/v1/sessions/s/busy", "/mcp"} {
		r, _ := send(t, head(path, 100), `{"origin`)
		resp, err := http.ReadResponse(r, nil)
		require.NoError(t, err, path)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", path, raw)
		if path != "/mcp" {
			var e struct{ Error bgjobs.Error }
			require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
			require.Contains(t, e.Error.Message, "did not arrive in time", path)
		}
		_, err = r.ReadByte()
		require.ErrorIs(t, err, io.EOF, "%s: the connection is closed after the answer", path)
	}

	body := `{"origin_session":"s","kind":"work","work":{"type":"echo","args":{"text":"x"}},"wait_ms":1500}`
	began := time.Now()
	r, _ := send(t, head("/v1/jobs", len(body)), body[:10], body[10:])
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Nothing here runs the job: the wait ends at its budget, three times
	// the body's deadline, which the body's arrival lifted.
	require.Equal(t, http.StatusAccepted, resp.StatusCode, "%s", raw)
	require.GreaterOrEqual(t, time.Since(began), 1500*time.Millisecond)
}
