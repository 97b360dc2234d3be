package sandbox

import (
	"strings"
	"testing"
)

func testSeatbeltSpec() seatbeltSpec {
	return seatbeltSpec{
		TaskDir: "/Users/u/.dispatch/work/p/tasks/T", WorkDir: "/Users/u/.dispatch/work", Homes: []string{"/Users/u"},
		Tool: []string{"/opt/homebrew/lib/node_modules/@anthropic-ai/claude-code"}, Repo: "/Users/u/.dispatch/work/p/repo.git",
		RO: []string{"/Users/u/go/pkg/mod", "/etc/ssl"}, RW: []string{"/Users/u/.cache/pip", "/tmp/shared"},
	}
}

// TestSeatbeltProfile checks the generated macOS profile's key rules and
// their order: SBPL's later rules win, so the denials of the home and the
// work_dir come after the system's reads and before what the task may
// open.
func TestSeatbeltProfile(t *testing.T) {
	prof, err := seatbeltProfile(testSeatbeltSpec())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(prof, "(version 1)\n(deny default)\n") {
		t.Errorf("the profile does not start by denying everything:\n%s", prof)
	}
	// Each rule, in this order.
	rules := []string{
		"(allow process-exec process-fork)",
		"(allow network*)",
		"(allow file-read*\n    (subpath \"/usr\")",
		"(subpath \"/System\")", "(subpath \"/private/etc\")", "(subpath \"/private/var/db/dyld\")",
		"(allow file-read* file-write-data\n    (literal \"/dev/null\")",
		"(deny file-read* file-write*\n    (subpath \"/Users/u/.dispatch/work\")\n    (subpath \"/Users/u\"))",
		"(allow file-read*\n    (subpath \"/opt/homebrew/lib/node_modules/@anthropic-ai/claude-code\")\n    (subpath \"/Users/u/go/pkg/mod\")\n    (subpath \"/private/etc/ssl\")\n    (subpath \"/Users/u/.dispatch/work/p/repo.git\"))",
		"(allow file-read*\n    (literal \"/Users/u/.dispatch/work/p/tasks/T/spec.md\"))",
		"(allow file-read* file-write*\n    (subpath \"/Users/u/.dispatch/work/p/tasks/T/output\")\n    (subpath \"/Users/u/.dispatch/work/p/tasks/T/home\")\n    (subpath \"/Users/u/.dispatch/work/p/tasks/T/tmp\")\n    (subpath \"/Users/u/.cache/pip\")\n    (subpath \"/private/tmp/shared\"))",
		"(allow file-read-metadata\n    (literal \"/\")",
	}
	at := 0
	for _, r := range rules {
		i := strings.Index(prof[at:], r)
		if i < 0 {
			t.Fatalf("the profile lacks, after byte %d,\n%s\nin\n%s", at, r, prof)
		}
		at += i
	}
	for _, want := range []string{"(literal \"/Users/u/.dispatch/work/p/tasks/T\")", "(literal \"/Users\")", "(literal \"/private/tmp\")"} {
		if !strings.Contains(prof, want) {
			t.Errorf("the metadata of a parent is not readable: no %s", want)
		}
	}
	// The task may write nothing of the work_dir but its own directories,
	// nor read another task's.
	for _, bad := range []string{"(subpath \"/Users/u/.dispatch/work/p/tasks/T\")", "(subpath \"/tmp", "(subpath \"/Users/u/.dispatch/work/p\")"} {
		if strings.Contains(prof, bad) {
			t.Errorf("the profile opens %s", bad)
		}
	}
}

// TestSeatbeltEscaping: a path with a double quote and a backslash stays
// one SBPL string; a path with a newline (which could end the rule) is
// refused.
func TestSeatbeltEscaping(t *testing.T) {
	if got, want := sbplString(`/a "b\c`), `"/a \"b\\c"`; got != want {
		t.Errorf("sbplString: %s, want %s", got, want)
	}
	sp := testSeatbeltSpec()
	sp.RO = []string{`/Users/u/we"ird\dir`}
	prof, err := seatbeltProfile(sp)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(prof, `(subpath "/Users/u/we\"ird\\dir")`) {
		t.Errorf("the path is not escaped:\n%s", prof)
	}
	if strings.Contains(prof, `we"ird`) {
		t.Errorf("an unescaped quote ends the string:\n%s", prof)
	}
	sp.RO = []string{"/Users/u/x\n(allow file-write* (subpath \"/\"))"}
	if _, err := seatbeltProfile(sp); err == nil {
		t.Error("a path with a newline was accepted")
	}
}

// TestSeatbeltRefuses: relative, unclean paths and ones opening the whole
// home, the work_dir or / are refused.
func TestSeatbeltRefuses(t *testing.T) {
	for name, edit := range map[string]func(*seatbeltSpec){
		"relative ro":        func(sp *seatbeltSpec) { sp.RO = []string{"go/pkg/mod"} },
		"tilde rw":           func(sp *seatbeltSpec) { sp.RW = []string{"~/.cache/pip"} },
		"relative tool":      func(sp *seatbeltSpec) { sp.Tool = []string{"bin"} },
		"relative task":      func(sp *seatbeltSpec) { sp.TaskDir = "work/p/tasks/T" },
		"relative work_dir":  func(sp *seatbeltSpec) { sp.WorkDir = "work" },
		"relative home":      func(sp *seatbeltSpec) { sp.Homes = []string{"u"} },
		"dotdot":             func(sp *seatbeltSpec) { sp.RO = []string{"/Users/u/x/../.ssh"} },
		"root":               func(sp *seatbeltSpec) { sp.RO = []string{"/"} },
		"whole home":         func(sp *seatbeltSpec) { sp.RW = []string{"/Users"} },
		"task not in work":   func(sp *seatbeltSpec) { sp.TaskDir = "/Users/u/elsewhere/T" },
		"work_dir as a task": func(sp *seatbeltSpec) { sp.TaskDir = sp.WorkDir },
	} {
		sp := testSeatbeltSpec()
		edit(&sp)
		if prof, err := seatbeltProfile(sp); err == nil {
			t.Errorf("%s: accepted:\n%s", name, prof)
		}
	}
}

// TestSandboxProbeDarwin: a macOS node reports the sandbox unavailable,
// saying why, until the profile has run on a real Mac.
func TestSandboxProbeDarwin(t *testing.T) {
	r := noSandboxOn("darwin")
	if r == nil || r.Sandbox != "" || r.Error != "untested on a real Mac; sandbox-exec support is generated but not enabled" || r.Fix == "" {
		t.Errorf("darwin: %+v", r)
	}
	if r := noSandboxOn("linux"); r != nil {
		t.Errorf("linux: %+v, want bwrap to decide", r)
	}
	if r := noSandboxOn("freebsd"); r == nil || r.Error == "" {
		t.Errorf("freebsd: %+v", r)
	}
}
