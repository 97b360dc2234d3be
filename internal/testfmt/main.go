// Command testfmt reads `go test -json` and writes what a plain `go test`
// writes — each package's closing line (ok, FAIL, or ? with no test
// files), the output of every failing test, build errors — plus a line as
// each package starts and, while the tests run, a line every -every with
// what is still running and for how long, so that `make test` is never
// silent for minutes. Lines that are not test2json events pass through.
//
// Its exit status is 1 when a test, a package or a build failed; `make
// test` exits with go test's own status.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	every := flag.Duration("every", time.Minute, "write what is still running this often (0: never)")
	flag.Parse()
	f := newFormatter(os.Stdout, time.Now)
	done := make(chan struct{})
	if *every > 0 {
		go func() {
			t := time.NewTicker(*every)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					f.progress()
				}
			}
		}()
	}
	err := f.read(os.Stdin)
	close(done)
	f.summary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testfmt:", err)
		os.Exit(2)
	}
	if f.failed {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
}

type testKey struct{ pkg, test string }

type formatter struct {
	now   func() time.Time
	begin time.Time

	mu      sync.Mutex // guards the fields below and writes to w
	w       io.Writer
	running map[string]time.Time // package → when it started
	out     map[testKey][]string // a running test's output, written if it fails
	failed  bool
}

func newFormatter(w io.Writer, now func() time.Time) *formatter {
	return &formatter{w: w, now: now, begin: now(), running: map[string]time.Time{}, out: map[testKey][]string{}}
}

// read handles every line of r until its end.
func (f *formatter) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		f.line(sc.Text())
	}
	return sc.Err()
}

func (f *formatter) line(l string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var e event
	if !strings.HasPrefix(l, "{") || json.Unmarshal([]byte(l), &e) != nil || e.Action == "" {
		fmt.Fprintln(f.w, l)
		return
	}
	switch e.Action {
	case "build-output":
		fmt.Fprint(f.w, e.Output)
	case "build-fail":
		f.failed = true
	case "start":
		f.running[e.Package] = f.now()
		fmt.Fprintf(f.w, "     start\t%s\n", e.Package)
	case "output":
		if e.Test == "" {
			// The package's own lines: its closing "ok  pkg 1.2s", FAIL
			// lines, and what its TestMain prints; go test without -v
			// leaves out the bare PASS.
			if e.Output != "PASS\n" {
				fmt.Fprint(f.w, e.Output)
			}
			return
		}
		k := testKey{e.Package, e.Test}
		f.out[k] = append(f.out[k], e.Output)
	case "pass", "skip", "fail":
		if e.Action == "fail" {
			f.failed = true
		}
		if e.Test != "" {
			k := testKey{e.Package, e.Test}
			if e.Action == "fail" {
				fmt.Fprint(f.w, strings.Join(f.out[k], ""))
			}
			delete(f.out, k)
			return
		}
		// The package ended: the output of a test that never ended (a
		// panic, a timeout) is what tells why it failed.
		var left []testKey
		for k := range f.out {
			if k.pkg == e.Package {
				left = append(left, k)
			}
		}
		sort.Slice(left, func(i, j int) bool { return left[i].test < left[j].test })
		for _, k := range left {
			if e.Action == "fail" {
				fmt.Fprint(f.w, strings.Join(f.out[k], ""))
			}
			delete(f.out, k)
		}
		delete(f.running, e.Package)
	}
}

// progress writes what is still running, or that the test binaries are
// still being built.
func (f *formatter) progress() {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if len(f.running) == 0 {
		fmt.Fprintf(f.w, "     ...\t%s: building and linking the test binaries (with -race)\n", round(now.Sub(f.begin)))
		return
	}
	var pkgs []string
	for p := range f.running {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	var parts []string
	for _, p := range pkgs {
		parts = append(parts, fmt.Sprintf("%s (%s)", p, round(now.Sub(f.running[p]))))
	}
	fmt.Fprintf(f.w, "     ...\t%s: running %s\n", round(now.Sub(f.begin)), strings.Join(parts, ", "))
}

// summary writes the whole run's wall time.
func (f *formatter) summary() {
	f.mu.Lock()
	defer f.mu.Unlock()
	fmt.Fprintf(f.w, "go test took %s\n", round(f.now().Sub(f.begin)))
}

func round(d time.Duration) time.Duration { return d.Round(time.Second) }
