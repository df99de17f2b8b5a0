package agents

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrForbiddenAddress is returned for a fetch that would reach loopback,
// private, link-local, unspecified or multicast space.
var ErrForbiddenAddress = errors.New("address not allowed")

// Forbidden reports whether ip is in space a fetch must never reach. IPv4
// addresses in IPv6 clothing (::ffff:127.0.0.1) are judged as IPv4.
func Forbidden(ip netip.Addr) bool {
	ip = ip.Unmap()
	return !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() ||
		cgnat.Contains(ip) || (ip.Is4() && ip.As4()[0] == 0)
}

// cgnat is shared address space (RFC 6598), private in all but name.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

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

// SafeClient returns an HTTP client that refuses forbidden addresses at
// every dial, redirects included: the check runs on the address actually
// dialed (after resolution), so a name that resolves to loopback is
// refused too. Hosts in allow (host or host:port) skip the check.
func SafeClient(timeout time.Duration, allow []string) *http.Client {
	allowed := map[string]bool{}
	for _, a := range allow {
		if a = strings.TrimSpace(strings.ToLower(a)); a != "" {
			allowed[a] = true
		}
	}
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
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		host = strings.ToLower(host)
		if allowed[host] || allowed[strings.ToLower(addr)] {
			return open.DialContext(ctx, network, addr)
		}
		if ip, ok := LiteralIP(host); ok && Forbidden(ip) {
			return nil, fmt.Errorf("%w: %s", ErrForbiddenAddress, host)
		}
		return guarded.DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		return nil
	}}
}
