// Package netallow is a task's network allow list (issue 20): the
// "host:port" entries of `network: {allow: [...]}`, how they are written
// down in one string (the task's network setting in the database and
// launch.json) and which connections they let through.
package netallow

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Prefix starts a network setting that is an allow list: "allow:" and
// the entries, comma-separated, sorted, without duplicates ("allow:" alone
// allows only what the task's tool needs, see the controller).
const Prefix = "allow:"

// Entry is one allowed destination. Host is lower case; an IP address in
// its canonical form (IPv6 without brackets). A Host starting with "*."
// matches every name below that domain, not the domain itself.
type Entry struct {
	Host string
	Port int
}

// String is the entry as written: host:port, an IPv6 address in brackets.
func (e Entry) String() string {
	return net.JoinHostPort(e.Host, strconv.Itoa(e.Port))
}

// Loopback reports whether the entry names a loopback address: the task
// reaches it directly (dispatch listens on it in the sandbox), not only
// through the proxy. "localhost" counts.
func (e Entry) Loopback() bool {
	if e.Host == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(e.Host)
	return err == nil && a.IsLoopback()
}

// Parse reads one entry: host:port, where host is a DNS name, "*." and a
// DNS name, or an IP address (IPv6 in brackets), and port a number from 1
// to 65535. The error says what is wrong with it.
func Parse(s string) (Entry, error) {
	host, port, err := net.SplitHostPort(strings.TrimSpace(s))
	if err != nil {
		return Entry{}, fmt.Errorf("%q is not host:port (write e.g. api.example.com:443, 127.0.0.1:8080 or [::1]:8080)", s)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return Entry{}, fmt.Errorf("%q: the port must be a number from 1 to 65535", s)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return Entry{}, fmt.Errorf("%q: an address with a zone is not allowed", s)
		}
		return Entry{Host: a.Unmap().String(), Port: p}, nil
	}
	h := strings.ToLower(host)
	name := strings.TrimPrefix(h, "*.")
	if !validName(name) {
		return Entry{}, fmt.Errorf("%q: %q is not a host name or an IP address (a wildcard is written *.example.com)", s, host)
	}
	return Entry{Host: h, Port: p}, nil
}

// validName reports whether s is a DNS name: labels of letters, digits,
// '-' and '_', not starting or ending with '-', at most 253 bytes.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// List is an allow list.
type List []Entry

// Encode writes the setting: Prefix and the entries, sorted, without
// duplicates.
func Encode(l List) string {
	s := make([]string, len(l))
	for i, e := range l {
		s[i] = e.String()
	}
	slices.Sort(s)
	return Prefix + strings.Join(slices.Compact(s), ",")
}

// Decode reads a setting Encode wrote; ok is false when s is not an allow
// list (open, none, ""), err when it is one but an entry is bad.
func Decode(s string) (l List, ok bool, err error) {
	rest, ok := strings.CutPrefix(s, Prefix)
	if !ok {
		return nil, false, nil
	}
	if rest == "" {
		return List{}, true, nil
	}
	for _, part := range strings.Split(rest, ",") {
		e, err := Parse(part)
		if err != nil {
			return nil, true, err
		}
		l = append(l, e)
	}
	return l, true, nil
}

// IsAllow reports whether a network setting is an allow list.
func IsAllow(s string) bool { return strings.HasPrefix(s, Prefix) }

// Allows reports whether a connection to host:port is allowed: an entry
// with that port whose host is the same (names without regard to case,
// addresses in any spelling) or a wildcard above it.
func (l List) Allows(host string, port int) bool {
	h := strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if a, err := netip.ParseAddr(h); err == nil {
		h = a.Unmap().String()
	}
	for _, e := range l {
		if e.Port != port {
			continue
		}
		if e.Host == h {
			return true
		}
		if d, ok := strings.CutPrefix(e.Host, "*"); ok && strings.HasSuffix(h, d) && len(h) > len(d) {
			return true
		}
	}
	return false
}

// Strings are the entries as written.
func (l List) Strings() []string {
	out := make([]string, len(l))
	for i, e := range l {
		out[i] = e.String()
	}
	return out
}
