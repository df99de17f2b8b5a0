package netguard

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The classifier refuses private, link-local and other internal literals
// without dialing anything.
func TestForbiddenLiterals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		host      string
		forbidden bool
	}{
		{"127.0.0.1", true}, {"::1", true}, {"0.0.0.0", true}, {"::", true},
		{"10.1.2.3", true}, {"172.16.0.1", true}, {"192.168.1.1", true}, {"100.64.0.1", true},
		{"169.254.169.254", true}, {"fe80::1", true}, {"fc00::1", true}, {"224.0.0.1", true}, {"ff02::1", true},
		{"::ffff:127.0.0.1", true}, {"::ffff:10.0.0.1", true}, {"[::ffff:169.254.169.254]", true},
		{"2130706433", true}, {"0x7f000001", true}, {"0177.0.0.1", true}, {"127.1", true}, {"0", true},
		{"3232235777", true}, // 192.168.1.1
		{"::7f00:1", true}, {"64:ff9b::7f00:1", true}, {"64:ff9b:1::1", true}, {"2002:7f00:1::", true},
		{"::ffff:0:7f00:1", true}, {"198.18.0.1", true}, {"198.19.255.255", true}, {"255.255.255.255", true},
		{"240.0.0.1", true}, {"fec0::1", true}, {"192.0.0.8", true},
		{"8.8.8.8", false}, {"2001:4860:4860::8888", false}, {"134744072", false}, // 8.8.8.8
	} {
		ip, ok := LiteralIP(tc.host)
		require.True(t, ok, "%s is a literal", tc.host)
		require.Equal(t, tc.forbidden, Forbidden(ip), "%s → %s", tc.host, ip)
	}
	for _, name := range []string{"example.com", "localhost", "1.2.3.4.5", "0x1g"} {
		_, ok := LiteralIP(name)
		require.False(t, ok, name)
	}
	require.True(t, Forbidden(netip.Addr{}), "an invalid address is refused")
}

// A loopback canary receives no connection, whatever the spelling, and a
// redirect to it from an allowed server is refused too.
func TestSafeClientNeverReachesLoopback(t *testing.T) {
	t.Parallel()
	canary, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer canary.Close()
	var hits atomic.Int64
	go func() {
		for {
			c, err := canary.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			c.Close()
		}
	}()
	port := canary.Addr().(*net.TCPAddr).Port
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, fmt.Sprintf("http://127.0.0.1:%d/", port), http.StatusFound)
			return
		}
		fmt.Fprint(w, "<html><head><title>Allowed</title></head><body><p>hello</p><script>x()</script></body></html>")
	}))
	defer allowed.Close()
	allowedHost := strings.TrimPrefix(allowed.URL, "http://")
	client := Client(5*time.Second, NewAllow([]string{allowedHost}))

	for _, host := range []string{"127.0.0.1", "localhost", "[::1]", "0.0.0.0", "2130706433", "[::ffff:127.0.0.1]", "0x7f000001", "127.1"} {
		_, err := client.Get(fmt.Sprintf("http://%s:%d/", host, port))
		require.Error(t, err, host)
		require.True(t, errors.Is(err, ErrForbiddenAddress), "%s: %v", host, err)
	}
	_, err = client.Get(allowed.URL + "/redirect")
	require.True(t, errors.Is(err, ErrForbiddenAddress), "redirect: %v", err)
	time.Sleep(100 * time.Millisecond)
	require.Zero(t, hits.Load(), "the canary was never reached")

	// The allow-list lets a trusted loopback server through.
	resp, err := client.Get(allowed.URL + "/page")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(body), "<p>hello</p>")
}

// A failure's text is one short printable line, whatever the remote sent,
// and still names its cause.
func TestBriefKeepsFailuresShort(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("SECRET-REPLY-BODY\r\n", 100)
	err := Brief(fmt.Errorf("result violates A2A spec; data: %s: %w", body, ErrForbiddenAddress))
	require.LessOrEqual(t, len([]rune(err.Error())), briefMax+1)
	require.NotContains(t, err.Error(), "\n")
	require.NotContains(t, err.Error(), "\r")
	require.ErrorIs(t, err, ErrForbiddenAddress)
	require.NoError(t, Brief(nil))
}
