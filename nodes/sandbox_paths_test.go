package nodes

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestSandboxPaths: sandbox_paths is read into the node, and every path
// that would open what the sandbox hides is refused with its line and a
// fix.
func TestSandboxPaths(t *testing.T) {
	const head = "nodes:\n  - name: a\n    work_dir: ~/.dispatch/work\n"
	ok := head + "    sandbox_paths:\n      ro: [~/go/pkg/mod, ~/.gitconfig, /opt/tools/]\n      rw: [~/.cache/pip]\n"
	cfg, err := Parse("nodes.yaml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	want := SandboxPaths{RO: []string{"~/go/pkg/mod", "~/.gitconfig", "/opt/tools"}, RW: []string{"~/.cache/pip"}}
	if got := cfg.Nodes[0].SandboxPaths; !reflect.DeepEqual(got, want) {
		t.Errorf("sandbox_paths: %+v, want %+v", got, want)
	}
	tests := []struct {
		name, yaml, msg, fix string
	}{
		{"relative", "ro: [go/pkg/mod]", `"go/pkg/mod" must be absolute or start with ~/`, "~/go/pkg/mod"},
		{"other user", "ro: [~bob/cache]", `"~bob/cache" must be absolute or start with ~/`, ""},
		{"dotdot", "ro: [~/cache/../.ssh]", `"~/cache/../.ssh" must not contain ..`, "without .."},
		{"root", "rw: [/]", `"/" would open the whole file system`, "directories the tasks need"},
		{"home", "ro: [~/]", `"~/" would open the node user's whole home`, "under the home"},
		{"work_dir", "rw: [~/.dispatch/work]", "is the work_dir ~/.dispatch/work or holds it", "does not hold the work_dir"},
		{"parent of work_dir", "ro: [~/.dispatch]", "is the work_dir ~/.dispatch/work or holds it", ""},
		{"in .bin", "ro: [~/.dispatch/work/.bin/x]", "is inside the work_dir's .bin", "never the wrapper's directory"},
		{"in work_dir", "rw: [~/.dispatch/work/proj/tasks]", "is inside the work_dir", "outside the work_dir"},
		{"twice", "ro: [~/c, ~/c/]", `"~/c/" is already listed under ro`, "once"},
		{"not a list", "ro: ~/c", "sandbox_paths ro must be a list", "[~/go/pkg/mod]"},
		{"unknown key", "rx: [~/c]", `unknown key "rx"`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("nodes.yaml", []byte(head+"    sandbox_paths:\n      "+tc.yaml+"\n"))
			var errs ConfigErrors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Fatalf("Parse: %v, want one error", err)
			}
			e := errs[0]
			if e.Line != 5 || !strings.Contains(e.Msg, tc.msg) || !strings.Contains(e.Fix, tc.fix) || e.Fix == "" {
				t.Errorf("error %d %q (fix %q), want line 5 %q (fix containing %q)", e.Line, e.Msg, e.Fix, tc.msg, tc.fix)
			}
		})
	}
	// An absolute work_dir is compared with absolute paths.
	_, err = Parse("nodes.yaml", []byte("nodes:\n  - name: a\n    work_dir: /srv/d\n    sandbox_paths: {rw: [/srv]}\n"))
	if err == nil || !strings.Contains(err.Error(), "holds it") {
		t.Errorf("rw: [/srv] with work_dir /srv/d: %v, want refused", err)
	}
}
