package netguard_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/qunfa/qunfa/internal/netguard"
)

func TestBlocked(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "127.5.5.5": true, "::1": true, "10.1.2.3": true, "172.16.0.1": true, "172.31.255.255": true,
		"192.168.1.1": true, "169.254.169.254": true, "100.64.0.1": true, "0.0.0.0": true, "::": true, "fc00::1": true,
		"fe80::1": true, "224.0.0.1": true, "::ffff:127.0.0.1": true, "::ffff:10.0.0.1": true, "64:ff9b::a00:1": true,
		"8.8.8.8": false, "1.1.1.1": false, "172.32.0.1": false, "2606:4700:4700::1111": false, "::ffff:8.8.8.8": false,
	} {
		if got := netguard.Blocked(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Blocked(%s) = %v, want %v", addr, got, want)
		}
	}
}

func TestControl(t *testing.T) {
	if err := netguard.Control("tcp", "10.0.0.1:443", nil); !errors.Is(err, netguard.ErrBlocked) {
		t.Errorf("Control(10.0.0.1) = %v, want ErrBlocked", err)
	}
	if err := netguard.Control("tcp", "[::1]:443", nil); !errors.Is(err, netguard.ErrBlocked) {
		t.Errorf("Control(::1) = %v, want ErrBlocked", err)
	}
	if err := netguard.Control("tcp", "93.184.215.14:443", nil); err != nil {
		t.Errorf("Control(public) = %v", err)
	}
}

// resolver answers from a table.
type resolver map[string][]netip.Addr

func (r resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	ips, ok := r[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	return ips, nil
}

func TestCheckURL(t *testing.T) {
	r := resolver{
		"hooks.example.com": {netip.MustParseAddr("93.184.215.14")},
		"internal.example":  {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.0.0.7")},
		"metadata.example":  {netip.MustParseAddr("169.254.169.254")},
	}
	for raw, ok := range map[string]bool{
		"https://hooks.example.com/qunfa":   true,
		"http://hooks.example.com:8080/x":   true,
		"https://unresolvable.example/x":    true, // guarded at dial time
		"https://8.8.8.8/hook":              true,
		"https://internal.example/x":        false,
		"https://metadata.example/x":        false,
		"http://127.0.0.1:9000/hook":        false,
		"http://[::1]/hook":                 false,
		"http://localhost/hook":             false,
		"http://api.localhost/hook":         false,
		"http://192.168.0.10/hook":          false,
		"ftp://hooks.example.com/x":         false,
		"hooks.example.com/x":               false,
		"https://user:pw@hooks.example.com": false,
		"https:///path":                     false,
		"https://hooks.example.com/#frag":   false,
	} {
		err := netguard.CheckURL(context.Background(), raw, r, false)
		if (err == nil) != ok {
			t.Errorf("CheckURL(%q) = %v, want ok %v", raw, err, ok)
		}
	}
	if err := netguard.CheckURL(context.Background(), "http://127.0.0.1:9000/hook", r, true); err != nil {
		t.Errorf("with allowPrivate, loopback refused: %v", err)
	}
	if err := netguard.CheckURL(context.Background(), "ftp://127.0.0.1/hook", r, true); err == nil {
		t.Error("with allowPrivate, an ftp URL was accepted")
	}
}
