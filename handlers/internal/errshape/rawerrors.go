package errshape

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strings"

	"github.com/bgjobs/bgjobs"
)

// net/http answers a request it cannot parse (a raw "%" in the path, a
// request line or headers over the limit) itself, in plain text, before
// any handler runs. WrapListener rewrites exactly those answers into the
// API's JSON error shape, so every error a client meets reads the same.

// rawErrorHeaders is what net/http writes after the status line of such an
// answer; no handler of bgjobs writes it.
const rawErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// WrapListener returns ln with net/http's own plain-text error answers
// turned into JSON.
func WrapListener(ln net.Listener) net.Listener { return jsonErrorListener{ln} }

type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrorConn{Conn: c}, nil
}

type jsonErrorConn struct{ net.Conn }

// Write passes everything through but net/http's own error answer, which
// it writes in one call just before closing the connection.
func (c *jsonErrorConn) Write(p []byte) (int, error) {
	if !bytes.HasPrefix(p, []byte("HTTP/1.1 4")) {
		return c.Conn.Write(p)
	}
	status, text, ok := strings.Cut(string(p), rawErrorHeaders)
	if !ok || strings.Contains(status, "\r\n") {
		return c.Conn.Write(p)
	}
	code := bgjobs.EInvalid
	if strings.HasPrefix(status, "HTTP/1.1 431") {
		code = bgjobs.ETooLarge
	}
	body, _ := json.Marshal(Body{Error: Detail{Code: code, Message: strings.TrimSpace(text)}})
	out := status + "\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n" + string(body) + "\n"
	if _, err := c.Conn.Write([]byte(out)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite lets net/http half-close after its error answer, as it would
// on the bare connection.
func (c *jsonErrorConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Plain gives the plain-text error answers of a handler bgjobs mounts
// (http.Error: the MCP SDK answers its transport's errors so, "session not
// found", "Content-Type must be 'application/json'") the API's JSON shape,
// keeping their status. Any other answer passes through untouched,
// streamed and flushed as written.
func Plain(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		jw := &jsonErrorWriter{ResponseWriter: w}
		h.ServeHTTP(jw, r)
		jw.finish()
	})
}

type jsonErrorWriter struct {
	http.ResponseWriter
	// status is the error answer being rewritten; 0 while none is.
	status int
	text   bytes.Buffer
}

func (w *jsonErrorWriter) WriteHeader(status int) {
	if status >= 400 && w.status == 0 && strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		w.status = status
		return
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *jsonErrorWriter) Write(p []byte) (int, error) {
	if w.status != 0 {
		return w.text.Write(p)
	}
	return w.ResponseWriter.Write(p)
}

// Flush keeps a streamed answer (MCP's server-sent events) streaming.
func (w *jsonErrorWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok && w.status == 0 {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *jsonErrorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *jsonErrorWriter) finish() {
	if w.status == 0 {
		return
	}
	code, ok := Code(w.status)
	msg := strings.TrimSpace(w.text.String())
	switch {
	case w.status >= 500:
		code, msg = bgjobs.EInternal, "internal error"
	case !ok:
		code = bgjobs.EInvalid
	}
	w.Header().Set("Content-Type", "application/json")
	w.ResponseWriter.WriteHeader(w.status)
	body, _ := json.Marshal(Body{Error: Detail{Code: code, Message: msg}})
	_, _ = w.ResponseWriter.Write(append(body, '\n'))
}
