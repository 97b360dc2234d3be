package netallow

import (
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{"api.example.com:443", "api.example.com:443", ""},
		{"API.Example.COM:443", "api.example.com:443", ""},
		{"*.github.com:443", "*.github.com:443", ""},
		{"127.0.0.1:8080", "127.0.0.1:8080", ""},
		{"[::1]:80", "[::1]:80", ""},
		{"[::ffff:127.0.0.1]:80", "127.0.0.1:80", ""},
		{"[fe80::1%eth0]:80", "", `"[fe80::1%eth0]:80": an address with a zone is not allowed`},
		{"example.com", "", `"example.com" is not host:port (write e.g. api.example.com:443, 127.0.0.1:8080 or [::1]:8080)`},
		{"example.com:http", "", `"example.com:http": the port must be a number from 1 to 65535`},
		{"example.com:65536", "", `"example.com:65536": the port must be a number from 1 to 65535`},
		{"-bad.com:1", "", `"-bad.com:1": "-bad.com" is not a host name or an IP address (a wildcard is written *.example.com)`},
		{"a..b:1", "", `"a..b:1": "a..b" is not a host name or an IP address (a wildcard is written *.example.com)`},
		{"*:1", "", `"*:1": "*" is not a host name or an IP address (a wildcard is written *.example.com)`},
		{"a.*.com:1", "", `"a.*.com:1": "a.*.com" is not a host name or an IP address (a wildcard is written *.example.com)`},
	}
	for _, tc := range tests {
		e, err := Parse(tc.in)
		got := ""
		if err == nil {
			got = e.String()
		}
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("Parse(%q) = %q, %v; want %q, %s", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestEncodeDecode(t *testing.T) {
	l := List{{"b.com", 443}, {"a.com", 80}, {"b.com", 443}, {"::1", 8080}}
	s := Encode(l)
	if s != "allow:[::1]:8080,a.com:80,b.com:443" {
		t.Fatalf("Encode = %q", s)
	}
	got, ok, err := Decode(s)
	if !ok || err != nil || len(got) != 3 || got[0] != (Entry{"::1", 8080}) {
		t.Fatalf("Decode = %v, %v, %v", got, ok, err)
	}
	if got, ok, err := Decode("allow:"); !ok || err != nil || len(got) != 0 {
		t.Errorf("Decode(allow:) = %v, %v, %v", got, ok, err)
	}
	for _, s := range []string{"", "open", "none"} {
		if _, ok, err := Decode(s); ok || err != nil {
			t.Errorf("Decode(%q) = %v, %v", s, ok, err)
		}
	}
	if _, ok, err := Decode("allow:x"); !ok || err == nil {
		t.Errorf("Decode(allow:x) = %v, %v, want an error", ok, err)
	}
}

func TestAllows(t *testing.T) {
	l := List{{"api.example.com", 443}, {"*.github.com", 443}, {"127.0.0.1", 8080}, {"::1", 9090}}
	tests := []struct {
		host string
		port int
		want bool
	}{
		{"api.example.com", 443, true},
		{"API.EXAMPLE.COM.", 443, true},
		{"api.example.com", 80, false},
		{"example.com", 443, false},
		{"evilapi.example.com", 443, false},
		{"raw.github.com", 443, true},
		{"a.b.github.com", 443, true},
		{"github.com", 443, false},
		{"evilgithub.com", 443, false},
		{"127.0.0.1", 8080, true},
		{"127.0.0.1", 8081, false},
		{"127.0.0.2", 8080, false},
		{"::ffff:127.0.0.1", 8080, true},
		{"[::1]", 9090, true},
		{"0:0::1", 9090, true},
		{"localhost", 8080, false},
	}
	for _, tc := range tests {
		if got := l.Allows(tc.host, tc.port); got != tc.want {
			t.Errorf("Allows(%q, %d) = %v, want %v", tc.host, tc.port, got, tc.want)
		}
	}
	if !(Entry{"localhost", 1}).Loopback() || !(Entry{"127.0.0.5", 1}).Loopback() || !(Entry{"::1", 1}).Loopback() || (Entry{"10.0.0.1", 1}).Loopback() {
		t.Error("Loopback is wrong")
	}
}
