package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestFormatsRealGoTest runs `go test -json` on a module of three packages
// (one passing, one with a failing test beside passing ones, one that does
// not build) and checks what testfmt makes of it against the same module's
// plain `go test`: the same closing line per package, the failing test's
// output and the build error, none of the passing tests' output, a start
// line per package, and a failure status.
func TestFormatsRealGoTest(t *testing.T) {
	mod := t.TempDir()
	files := map[string]string{
		"go.mod":             "module example.com/m\n\ngo 1.21\n",
		"good/good_test.go":  "package good\n\nimport \"testing\"\n\nfunc TestGood(t *testing.T) { t.Log(\"quiet when passing\") }\n",
		"bad/bad_test.go":    "package bad\n\nimport \"testing\"\n\nfunc TestFine(t *testing.T) { t.Log(\"quiet too\") }\n\nfunc TestBroken(t *testing.T) { t.Fatal(\"the reason it broke\") }\n",
		"nobuild/nb_test.go": "package nobuild\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) { undefinedThing() }\n",
		"notests/notests.go": "package notests\n",
	}
	for name, text := range files {
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gotest := func(args ...string) string {
		cmd := exec.Command("go", append([]string{"test", "-count=1"}, append(args, "./...")...)...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
		out, err := cmd.Output()
		if err == nil {
			t.Fatalf("go test %v passed; want it to fail:\n%s", args, out)
		}
		return string(out)
	}
	plain := gotest()
	var b bytes.Buffer
	f := newFormatter(&b, time.Now)
	if err := f.read(strings.NewReader(gotest("-json"))); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	if !f.failed {
		t.Errorf("no failure seen in:\n%s", got)
	}
	closing := regexp.MustCompile(`(?m)^(ok|FAIL|\?)\s+example\.com/m/\S+`)
	want := closing.FindAllString(plain, -1)
	if len(want) != 4 {
		t.Fatalf("plain go test's closing lines = %q; want 4 in:\n%s", want, plain)
	}
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("output lacks go test's %q:\n%s", w, got)
		}
	}
	for _, w := range []string{"--- FAIL: TestBroken", "the reason it broke", "undefinedThing", "start\texample.com/m/good", "start\texample.com/m/bad"} {
		if !strings.Contains(got, w) {
			t.Errorf("output lacks %q:\n%s", w, got)
		}
	}
	for _, w := range []string{"quiet when passing", "quiet too", "\nPASS\n"} {
		if strings.Contains(got, w) {
			t.Errorf("output has %q, which plain go test leaves out:\n%s", w, got)
		}
	}
}

// TestProgress: while nothing runs the progress line says the binaries are
// being built; then it names each running package and for how long.
func TestProgress(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	f := newFormatter(&b, func() time.Time { return now })
	now = now.Add(90 * time.Second)
	f.progress()
	f.line(`{"Action":"start","Package":"example.com/m/slow"}`)
	now = now.Add(2 * time.Minute)
	f.progress()
	f.line(`{"Action":"output","Package":"example.com/m/slow","Output":"ok  \texample.com/m/slow\t120.1s\n"}`)
	f.line(`{"Action":"pass","Package":"example.com/m/slow"}`)
	f.line("not json")
	f.progress()
	want := "     ...\t1m30s: building and linking the test binaries (with -race)\n" +
		"     start\texample.com/m/slow\n" +
		"     ...\t3m30s: running example.com/m/slow (2m0s)\n" +
		"ok  \texample.com/m/slow\t120.1s\n" +
		"not json\n" +
		"     ...\t3m30s: building and linking the test binaries (with -race)\n"
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	if f.failed {
		t.Error("a passing run counted as failed")
	}
}
