// Package loadgen is the bench's HTTP load generator: JSON POSTs over
// kept-alive HTTP/1.1 connections, one request at a time on each, written
// and read on the caller's goroutine; the callers fanned out over
// goroutines (FanOut); and the loopback servers they load (Serve).
package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Poster posts to one server. net/http's client hands every request to a
// writer and a reader goroutine of its connection; on two cores shared
// with the server under test, that hand-off is charged to bgjobs although
// an agent's client runs elsewhere (end to end: 227 → 203 µs of this
// process's CPU a job, alternating in one process). The answer is parsed
// by net/http itself.
type Poster struct {
	addr string // host:port
	// idle holds connections between requests; a caller that finds none
	// dials one, so there are as many as callers at once.
	idle chan *posterConn
}

type posterConn struct {
	net.Conn
	r   *bufio.Reader
	buf []byte
}

// New posts to base ("http://host:port"), keeping up to conns
// connections open.
func New(base string, conns int) (*Poster, error) {
	addr, ok := strings.CutPrefix(base, "http://")
	if !ok || strings.Contains(addr, "/") {
		return nil, fmt.Errorf("loadgen: %q is not http://host:port", base)
	}
	return &Poster{addr: addr, idle: make(chan *posterConn, conns)}, nil
}

// Post sends body to path and returns the status and the answer's body.
// A connection that failed or that the server will close is dropped.
func (p *Poster) Post(path string, body []byte) (int, []byte, error) {
	var c *posterConn
	select {
	case c = <-p.idle:
	default:
		nc, err := net.Dial("tcp", p.addr)
		if err != nil {
			return 0, nil, err
		}
		c = &posterConn{Conn: nc, r: bufio.NewReader(nc)}
	}
	c.buf = append(c.buf[:0], "POST "...)
	c.buf = append(c.buf, path...)
	c.buf = append(c.buf, " HTTP/1.1\r\nHost: "...)
	c.buf = append(c.buf, p.addr...)
	c.buf = append(c.buf, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	c.buf = strconv.AppendInt(c.buf, int64(len(body)), 10)
	c.buf = append(c.buf, "\r\n\r\n"...)
	c.buf = append(c.buf, body...)
	if _, err := c.Write(c.buf); err != nil {
		_ = c.Close()
		return 0, nil, err
	}
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		_ = c.Close()
		return 0, nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || resp.Close {
		_ = c.Close()
	} else {
		select {
		case p.idle <- c:
		default:
			_ = c.Close()
		}
	}
	return resp.StatusCode, raw, err
}

// Close closes the idle connections.
func (p *Poster) Close() {
	for {
		select {
		case c := <-p.idle:
			_ = c.Close()
		default:
			return
		}
	}
}

// FanOut calls fn n times from workers goroutines, stopping at the first
// error.
func FanOut(n, workers int, fn func(int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// Serve serves h on a loopback port and returns its base URL and how to
// stop it.
func Serve(h http.Handler) (base string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}
