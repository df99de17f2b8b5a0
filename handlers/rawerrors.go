package handlers

import (
	"bytes"
	"encoding/json"
	"net"
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
	body, _ := json.Marshal(errorBody{Error: errorDetail{Code: code, Message: strings.TrimSpace(text)}})
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
