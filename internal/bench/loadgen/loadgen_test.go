package loadgen

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestPostsSpeakHTTP posts as the bench does: bodies arrive whole, answers
// come back with their status whether sized or chunked, kept-alive
// connections are reused, and one the server closes is replaced.
func TestPostsSpeakHTTP(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want a JSON POST", http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/chunked":
			w.WriteHeader(http.StatusAccepted)
			for range 3 {
				_, _ = w.Write([]byte(strings.Repeat("x", 3000)))
				w.(http.Flusher).Flush()
			}
		case "/close":
			w.Header().Set("Connection", "close")
			fmt.Fprintf(w, "bye %s", body)
		default:
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, "got %s", body)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	p, err := New(srv.URL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 5 {
		status, raw, err := p.Post("/echo", fmt.Appendf(nil, `{"n":%d}`, i))
		if err != nil || status != http.StatusCreated || string(raw) != fmt.Sprintf(`got {"n":%d}`, i) {
			t.Fatalf("post %d: %d %q %v", i, status, raw, err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections for 5 posts in a row, want 1 kept alive", n)
	}
	status, raw, err := p.Post("/chunked", nil)
	if err != nil || status != http.StatusAccepted || len(raw) != 9000 {
		t.Fatalf("chunked: %d, %d bytes, %v", status, len(raw), err)
	}
	if status, raw, err = p.Post("/close", []byte("{}")); err != nil || string(raw) != "bye {}" {
		t.Fatalf("close: %d %q %v", status, raw, err)
	}
	if status, _, err = p.Post("/echo", []byte("{}")); err != nil || status != http.StatusCreated {
		t.Fatalf("after a close: %d %v", status, err)
	}
	if n := conns.Load(); n != 2 {
		t.Errorf("%d connections, want 2: the closed one replaced once", n)
	}
	if _, err := New("https://example.test", 1); err == nil {
		t.Error("an https base was taken")
	}
}

// FanOut calls fn once for each index, from as many goroutines as asked,
// and stops handing out indexes at the first error, which it returns.
func TestFanOutCallsEachIndexOnceAndStopsAtAnError(t *testing.T) {
	var calls [1000]atomic.Int64
	if err := FanOut(len(calls), 8, func(i int) error { calls[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		if n := calls[i].Load(); n != 1 {
			t.Fatalf("index %d called %d times", i, n)
		}
	}
	var after atomic.Int64
	err := FanOut(100000, 4, func(i int) error {
		if i == 10 {
			return fmt.Errorf("index %d failed", i)
		}
		if i > 10 {
			after.Add(1)
			time.Sleep(time.Millisecond) // all 100,000 would take 25 s
		}
		return nil
	})
	if err == nil || err.Error() != "index 10 failed" {
		t.Fatalf("err = %v", err)
	}
	if after.Load() > 1000 {
		t.Fatalf("%d indexes after the failure were still called", after.Load())
	}
}

// Serve answers on a loopback port until stopped.
func TestServeAnswersUntilStopped(t *testing.T) {
	base, stop, err := Serve(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "up") }))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "up" || !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("%s answered %q", base, b)
	}
	stop()
	if _, err := http.Get(base); err == nil {
		t.Fatal("still answering after stop")
	}
}
