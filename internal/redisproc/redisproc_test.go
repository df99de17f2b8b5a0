package redisproc

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// A server whose port was taken between FreePort and its start is told
// apart from one that came up, whether the port's holder speaks Redis or
// not, and Start moves on to another port.
func TestAStartWhosePortWasTaken(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	holder, err := Start(t.TempDir(), "--appendonly", "no")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Kill()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	plain := ln.Addr().(*net.TCPAddr).Port
	for what, port := range map[string]int{"another redis-server": holder.Port, "a plain listener": plain} {
		s := &Server{Port: port, Dir: t.TempDir()}
		start := time.Now()
		err := s.run("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", s.Dir, "--save", "")
		if !errors.Is(err, errPortTaken) {
			t.Fatalf("%s on the port: err = %v, want errPortTaken", what, err)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("%s on the port: told after %s", what, time.Since(start))
		}
	}
	tries := 0
	s, err := onFreePort(func(port int) (*Server, error) {
		tries++
		if tries == 1 {
			port = holder.Port // as if another had taken the free port first
		}
		s := &Server{Port: port, Dir: t.TempDir()}
		return s, s.run("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", s.Dir, "--save", "")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	if tries != 2 || s.Port == holder.Port {
		t.Fatalf("tries %d, port %d (holder's %d)", tries, s.Port, holder.Port)
	}
}
