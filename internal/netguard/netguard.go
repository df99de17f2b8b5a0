// Package netguard keeps bgjobs' outbound HTTP away from the space behind
// it: every call to an agent, a webhook or a URL to ingest goes through a
// client that refuses loopback, private, link-local, reserved and other
// internal addresses at every dial (redirects included), unless the
// operator allow-listed the host.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/bgjobs/bgjobs"
)

// ErrForbiddenAddress is returned for a call that would reach loopback,
// private, link-local, reserved, unspecified or multicast space.
var ErrForbiddenAddress = errors.New("address not allowed")

// Forbidden reports whether ip is in space an outbound call must never
// reach. IPv4 addresses in IPv6 clothing (::ffff:127.0.0.1) are judged as
// IPv4; the other IPv6 forms that carry or reach IPv4 (IPv4-compatible,
// IPv4-translated, NAT64, 6to4) are refused whole.
func Forbidden(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, p := range blocked {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// blocked are the special-purpose ranges (RFC 6890 and kin) the standard
// library's predicates do not cover.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space (CGNAT)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast included
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (::7f00:1)
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT)
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4
	netip.MustParsePrefix("fec0::/10"),       // site-local
}

// LiteralIP reads host as an IP address in any spelling a resolver would
// accept — dotted, IPv6, a single decimal or hex number (2130706433,
// 0x7f000001), or dotted parts in octal or hex (0177.0.0.1) — so such
// hosts are judged without a lookup. ok is false for a real name.
func LiteralIP(host string) (netip.Addr, bool) {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		return a, true
	}
	parts := strings.Split(h, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	nums := make([]uint64, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 0, 32) // base from prefix: 0x hex, 0 octal
		if err != nil {
			return netip.Addr{}, false
		}
		nums[i] = n
	}
	// inet_aton: the last part fills the remaining bytes.
	var v uint64
	for i, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, false
		}
		v |= n << (8 * (3 - i))
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, false
	}
	v |= last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// Allow is an operator's allow-list: hosts (host or host:port) outbound
// calls may reach even in forbidden space.
type Allow map[string]bool

// NewAllow reads a list of host or host:port entries.
func NewAllow(hosts []string) Allow {
	allowed := Allow{}
	for _, a := range hosts {
		if a = strings.TrimSpace(strings.ToLower(a)); a != "" {
			allowed[a] = true
		}
	}
	return allowed
}

// Has reports whether host, or host:port, is allow-listed.
func (a Allow) Has(host, port string) bool {
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return a[host] || a[net.JoinHostPort(host, port)] || a["["+host+"]"]
}

// CheckURL refuses, without any lookup, an http(s) URL whose host is a
// literal address in forbidden space and is not allow-listed: what can be
// told at configuration time. Names are judged at every dial. setting names
// the variable whose list allow is, for the refusal's message.
func CheckURL(raw string, allow Allow, setting string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http:// or https:// URL")
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	if ip, ok := LiteralIP(u.Hostname()); ok && Forbidden(ip) && !allow.Has(u.Hostname(), port) {
		return fmt.Errorf("%w: %s is internal; an operator may allow it with %s", ErrForbiddenAddress, u.Hostname(), setting)
	}
	return nil
}

// Client returns an HTTP client that refuses forbidden addresses at every
// dial, redirects included: the check runs on the address actually dialed
// (after resolution), so a name that resolves to loopback is refused too.
// Allow-listed hosts skip the check. A zero timeout leaves each call to
// its context.
func Client(timeout time.Duration, allowed Allow) *http.Client {
	guarded := &net.Dialer{Timeout: 10 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || Forbidden(ap.Addr()) {
			return fmt.Errorf("%w: %s", ErrForbiddenAddress, address)
		}
		return nil
	}}
	open := &net.Dialer{Timeout: 10 * time.Second}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // a proxy would dial for us, past the check
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, err
		}
		host, port, _ := net.SplitHostPort(strings.ToLower(addr))
		if allowed.Has(host, port) {
			return open.DialContext(ctx, network, addr)
		}
		if ip, ok := LiteralIP(host); ok && Forbidden(ip) {
			return nil, fmt.Errorf("%w: %s", ErrForbiddenAddress, host)
		}
		return guarded.DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: userAgent{tr}, Timeout: timeout, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		return nil
	}}
}

// briefMax is the most an outbound failure may say.
const briefMax = 200

// Brief wraps err so its text is one short line of printable characters:
// what a failed outbound call may put in a job's error or a log. A remote
// reply's body (echoed by a client library) never gets past it whole.
// errors.Is and As still see err.
func Brief(err error) error {
	if err == nil {
		return nil
	}
	msg := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || !utf8.ValidRune(r) {
			return ' '
		}
		return r
	}, err.Error())
	if r := []rune(msg); len(r) > briefMax {
		msg = string(r[:briefMax]) + "…"
	}
	return briefError{msg: msg, err: err}
}

type briefError struct {
	msg string
	err error
}

func (e briefError) Error() string { return e.msg }
func (e briefError) Unwrap() error { return e.err }

// UserAgent names bgjobs on every outbound request, so receivers can tell
// its calls apart (and filter or allow them).
var UserAgent = "bgjobs/" + bgjobs.Version

type userAgent struct{ next http.RoundTripper }

func (u userAgent) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("User-Agent") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("User-Agent", UserAgent)
	}
	return u.next.RoundTrip(r)
}
