// Package netguard keeps tenant-given URLs (webhook endpoints) from
// reaching qunfa's own network: loopback, private, link-local (the cloud
// metadata endpoint), carrier-grade NAT and other non-public addresses.
// CheckURL refuses such URLs when they are registered; Control refuses to
// connect to such an address when it is dialed, on the address actually
// resolved, so a name that resolves to a public address at registration
// and to a private one later (DNS rebinding) is still stopped.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// ErrBlocked: the address is not a public one.
var ErrBlocked = errors.New("address is not public")

var blockedPrefixes = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",          // this network
		"100.64.0.0/10",      // carrier-grade NAT
		"192.0.0.0/24",       // IETF protocol assignments
		"192.0.2.0/24",       // documentation
		"198.18.0.0/15",      // benchmarking
		"198.51.100.0/24",    // documentation
		"203.0.113.0/24",     // documentation
		"240.0.0.0/4",        // reserved
		"255.255.255.255/32", // broadcast
		"64:ff9b::/96",       // NAT64 (may map to private IPv4)
		"64:ff9b:1::/48",     // local-use NAT64
		"100::/64",           // discard
		"2001:db8::/32",      // documentation
		"2002::/16",          // 6to4 (may embed private IPv4)
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// Blocked reports whether ip may not be reached by tenant-given URLs.
func Blocked(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Control is a net.Dialer Control function that refuses connections to
// blocked addresses. It sees the address after name resolution.
func Control(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, err)
	}
	if Blocked(ip) {
		return fmt.Errorf("dial %s: %w", address, ErrBlocked)
	}
	return nil
}

// Resolver looks names up (net.DefaultResolver in production).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL validates a tenant-given endpoint URL: absolute http or https,
// a host, no user information. Unless allowPrivate, a host that is a
// blocked address, is named localhost, or resolves (with r, when not nil)
// to any blocked address is refused. A name that does not resolve now is
// accepted: Control still guards every connection.
func CheckURL(ctx context.Context, raw string, r Resolver, allowPrivate bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("is not a URL")
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return errors.New("must be an http or https URL")
	}
	if u.Host == "" || u.Hostname() == "" {
		return errors.New("must name a host")
	}
	if u.User != nil {
		return errors.New("must not carry user information")
	}
	if u.Fragment != "" {
		return errors.New("must not have a fragment")
	}
	if allowPrivate {
		return nil
	}
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		if Blocked(ip) {
			return errors.New("must not point to a loopback, private or otherwise non-public address")
		}
		return nil
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return errors.New("must not point to a loopback, private or otherwise non-public address")
	}
	if r == nil {
		return nil
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, ip := range ips {
		if Blocked(ip) {
			return fmt.Errorf("must not point to a loopback, private or otherwise non-public address (%s resolves to %s)", host, ip)
		}
	}
	return nil
}
