package main

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// tb lets the bench use internal/sshdtest, whose helpers take a testing.TB,
// outside `go test`. The embedded testing.TB is nil: it only supplies the
// interface's unexported method. sshdtest calls Helper, Fatalf, Errorf,
// Failed, Logf, Skipf, TempDir and Cleanup; the rest of what a bench could
// reach is implemented too. Fatal and Skip panic with a benchAbort, which
// guard turns into the scenario's error.
type tb struct {
	testing.TB

	name string
	root string // TempDir makes directories under it

	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

type benchAbort struct{ msg string }

func newTB(name, root string) *tb { return &tb{name: name, root: root} }

func (t *tb) Helper()      {}
func (t *tb) Name() string { return t.name }

func (t *tb) Log(args ...any) { t.Logf("%s", fmt.Sprint(args...)) }
func (t *tb) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench %s: %s\n", t.name, fmt.Sprintf(format, args...))
}

func (t *tb) Fail() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *tb) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *tb) Error(args ...any) { t.Fail(); t.Log(args...) }
func (t *tb) Errorf(format string, args ...any) {
	t.Fail()
	t.Logf(format, args...)
}

func (t *tb) FailNow()          { t.Fail(); panic(benchAbort{"failed"}) }
func (t *tb) Fatal(args ...any) { t.Fail(); panic(benchAbort{fmt.Sprint(args...)}) }
func (t *tb) Fatalf(format string, args ...any) {
	t.Fail()
	panic(benchAbort{fmt.Sprintf(format, args...)})
}

func (t *tb) SkipNow()         { panic(benchAbort{"skipped"}) }
func (t *tb) Skip(args ...any) { panic(benchAbort{"skipped: " + fmt.Sprint(args...)}) }
func (t *tb) Skipped() bool    { return false }
func (t *tb) Skipf(format string, args ...any) {
	panic(benchAbort{"skipped: " + fmt.Sprintf(format, args...)})
}

func (t *tb) TempDir() string {
	dir, err := os.MkdirTemp(t.root, "t")
	if err != nil {
		panic(benchAbort{fmt.Sprintf("temp dir: %v", err)})
	}
	return dir
}

func (t *tb) Cleanup(f func()) {
	t.mu.Lock()
	t.cleanups = append(t.cleanups, f)
	t.mu.Unlock()
}

// cleanup runs the Cleanup functions, last registered first, each guarded
// so that one failing does not stop the others.
func (t *tb) cleanup() {
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		func() {
			defer func() {
				if r := recover(); r != nil {
					fmt.Fprintf(os.Stderr, "bench %s: cleanup: %v\n", t.name, r)
				}
			}()
			f()
		}()
	}
}

// guard runs fn and turns a benchAbort (or any panic) into an error.
func guard(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if a, ok := r.(benchAbort); ok {
				err = fmt.Errorf("%s", a.msg)
				return
			}
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	fn()
	return nil
}
