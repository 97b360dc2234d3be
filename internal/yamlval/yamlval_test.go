package yamlval

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestProblemError(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{File: "nodes.yaml", Line: 3, Msg: "bad", Fix: "do this"}, "nodes.yaml:3: bad\n  fix: do this"},
		{Problem{File: "nodes.yaml", Msg: "the file does not exist"}, "nodes.yaml: the file does not exist"},
		{Problem{Line: 2, Msg: "bad"}, "line 2: bad"},
		{Problem{Msg: "bad"}, "bad"},
	}
	for _, tt := range tests {
		if got := tt.p.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	ps := Problems{{File: "b.md", Line: 1, Msg: "x"}, {File: "a.md", Line: 9, Msg: "y"}, {File: "a.md", Line: 2, Msg: "z", Err: fs.ErrNotExist}}
	ps.Sort()
	if got := ps.Error(); got != "a.md:2: z\na.md:9: y\nb.md:1: x" {
		t.Errorf("sorted problems:\n%s", got)
	}
	if !errors.Is(ps, fs.ErrNotExist) {
		t.Error("errors.Is does not see a problem's underlying error")
	}
	var one *Problem
	if !errors.As(error(ps), &one) || !ps.BadInput() || !one.BadInput() {
		t.Error("problems are not bad input, or errors.As finds none")
	}
}

func TestSyntaxError(t *testing.T) {
	tests := []struct {
		name, src string
		line      int
		msg       string
	}{
		{"parser problem: the line after yaml.v3's", "a: [1, 2\nb: 3\n", 2, "did not find expected ',' or ']'"},
		{"tab in the indentation: its own line", "a:\n  b: 1\n\tc: 2\n", 3, "tab character"},
		{"at the end of input: the last line", "a: 'open\n", 1, "found unexpected end of stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n yaml.Node
			err := yaml.Unmarshal([]byte(tt.src), &n)
			if err == nil {
				t.Fatal("no error")
			}
			line, msg := SyntaxError(err, []byte(tt.src))
			if line != tt.line || !strings.Contains(msg, tt.msg) {
				t.Errorf("SyntaxError = %d, %q; want %d, %q (yaml said %v)", line, msg, tt.line, tt.msg, err)
			}
		})
	}
}

func TestDescribeAndNull(t *testing.T) {
	var doc yaml.Node
	src := "s: text\nn: 5\nb: true\nl: [1]\nm: {a: 1}\nz:\nq: &x 7\nr: *x\n"
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Content[0]
	want := map[string]string{"s": `"text"`, "n": "5", "b": "true", "l": "a list", "m": "a mapping", "z": "empty", "q": "7", "r": "7"}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i].Value, m.Content[i+1]
		if got := Describe(v); got != want[k] {
			t.Errorf("Describe(%s) = %q, want %q", k, got, want[k])
		}
		if IsNull(v) != (k == "z") {
			t.Errorf("IsNull(%s) = %v", k, IsNull(v))
		}
	}
	if Describe(nil) != "nothing" || IsNull(nil) {
		t.Error("a nil node")
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"poll_interval", "heartbeat_timeout", "slots", "stall_timeout"}
	for in, want := range map[string]string{"poll_intervall": "poll_interval", "slot": "slots", "sta": "stall_timeout", "zzz": "", "heart": "heartbeat_timeout"} {
		if got := Suggest(in, known); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnknownKey(t *testing.T) {
	var ps Problems
	d := Doc{Problems: &ps, File: "p.yaml", Offset: 1}
	d.Unknown(&yaml.Node{Value: "slotz", Line: 3}, "node \"a\": ", []string{"name", "slots"})
	want := "p.yaml:4: node \"a\": unknown key \"slotz\"\n  fix: did you mean \"slots\"? known keys: name, slots"
	if len(ps) != 1 || ps[0].Error() != want {
		t.Errorf("got %v, want %q", ps, want)
	}
}

func TestSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1073741824", 1 << 30, true},
		{"100B", 100, true},
		{"1K", 1000, true},
		{"1KB", 1000, true},
		{"1KiB", 1024, true},
		{"512MiB", 512 << 20, true},
		{"2GiB", 2 << 30, true},
		{"1.5GB", 1_500_000_000, true},
		{"1.5GiB", 3 << 29, true},
		{"2gb", 2_000_000_000, true},
		{"3 TB", 3_000_000_000_000, true},
		{"1TiB", 1 << 40, true},
		{"8EiB", 0, false},
		{"", 0, false},
		{"GiB", 0, false},
		{"-1", 0, false},
		{"1.2.3GB", 0, false},
		{"1e9", 0, false},
		{"9223372036854775807", 1<<63 - 1, true},
		{"9223372036854775808", 0, false},
		{"9000000TiB", 0, false},
	}
	for _, tc := range tests {
		got, err := parseSize(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseSize(%q) = %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
