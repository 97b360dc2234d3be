package nodes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
)

// wrapperPackage is the import path of the wrapper's main package.
const wrapperPackage = "github.com/dispatch-tool/dispatch/cmd/dispatch-wrapper"

// embeddedWrappers holds the wrappers built by `make build` (build tag
// embedwrappers): wrappers/VERSION and wrappers/dispatch-wrapper-<os>-<arch>.
// It is nil in a plain `go build` or `go run`.
var embeddedWrappers fs.FS

// Wrappers provides the wrapper binary for each node platform. A `make build`
// binary carries all four embedded; a binary built from a checkout without
// them (`go run ./cmd/dispatch`, `go test`) builds them on demand with the
// local Go toolchain and caches them, keyed by a hash of the wrapper source so
// that a changed wrapper gets a new version and is reinstalled on the nodes.
type Wrappers struct {
	// CacheDir holds binaries built on demand; empty means the user cache
	// directory.
	CacheDir string

	mu      sync.Mutex
	version string
	source  string // module root when building on demand
	built   map[string][]byte
}

// NewWrappers returns the wrapper provider of this dispatch binary.
func NewWrappers() *Wrappers { return &Wrappers{built: map[string][]byte{}} }

// ErrNoWrapperSource means this binary has neither embedded wrappers nor a
// source checkout to build them from.
var ErrNoWrapperSource = errors.New("this dispatch binary has no embedded wrappers and no source checkout to build them from: build it with `make build`")

// Version returns the wrapper version this controller installs and expects.
func (w *Wrappers) Version() (string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.versionLocked()
}

func (w *Wrappers) versionLocked() (string, error) {
	if w.version != "" {
		return w.version, nil
	}
	if embeddedWrappers != nil {
		b, err := fs.ReadFile(embeddedWrappers, "wrappers/VERSION")
		if err != nil {
			return "", fmt.Errorf("embedded wrappers: %w", err)
		}
		w.version = strings.TrimSpace(string(b))
		return w.version, nil
	}
	root, err := sourceRoot()
	if err != nil {
		return "", err
	}
	v, err := sourceVersion(root)
	if err != nil {
		return "", err
	}
	w.source, w.version = root, v
	return v, nil
}

// Binary returns the wrapper executable for goos/goarch.
func (w *Wrappers) Binary(ctx context.Context, goos, goarch string) ([]byte, error) {
	if !SupportedPlatform(goos, goarch) {
		return nil, fmt.Errorf("no wrapper for %s/%s: dispatch supports linux and darwin on amd64 and arm64", goos, goarch)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	version, err := w.versionLocked()
	if err != nil {
		return nil, err
	}
	key := goos + "-" + goarch
	if b, ok := w.built[key]; ok {
		return b, nil
	}
	var b []byte
	if embeddedWrappers != nil {
		b, err = fs.ReadFile(embeddedWrappers, "wrappers/dispatch-wrapper-"+key)
	} else {
		b, err = w.build(ctx, version, goos, goarch)
	}
	if err != nil {
		return nil, fmt.Errorf("wrapper for %s: %w", key, err)
	}
	w.built[key] = b
	return b, nil
}

func (w *Wrappers) build(ctx context.Context, version, goos, goarch string) ([]byte, error) {
	dir := w.CacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "dispatch", "wrappers")
	}
	out := filepath.Join(dir, fmt.Sprintf("dispatch-wrapper-%s-%s-%s", version, goos, goarch))
	if b, err := os.ReadFile(out); err == nil {
		return b, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("building the wrapper needs the Go toolchain on PATH (or use a `make build` binary): %w", err)
	}
	tmp := fmt.Sprintf("%s.tmp%d", out, os.Getpid())
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", tmp,
		"-ldflags", "-s -w -X github.com/dispatch-tool/dispatch/wrapper.Version="+version, wrapperPackage)
	cmd.Dir = w.source
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("go build %s: %w: %s", wrapperPackage, err, strings.TrimSpace(stderr.String()))
	}
	if err := os.Rename(tmp, out); err != nil {
		return nil, err
	}
	return os.ReadFile(out)
}

// SupportedPlatform reports whether a wrapper exists for goos/goarch.
func SupportedPlatform(goos, goarch string) bool {
	return (goos == "linux" || goos == "darwin") && (goarch == "amd64" || goarch == "arm64")
}

// sourceRoot finds the module root of the checkout this binary was built
// from, through the path the compiler recorded for this file.
func sourceRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", ErrNoWrapperSource
	}
	root := filepath.Dir(filepath.Dir(file))
	if _, err := os.Stat(filepath.Join(root, "cmd", "dispatch-wrapper", "main.go")); err != nil {
		return "", ErrNoWrapperSource
	}
	return root, nil
}

// wrapperSourceDirs are the directories, under the module root, whose Go
// files the on-demand wrapper version hashes, each with its
// subdirectories: every package of this module the wrapper is built from
// lies in them (nodes:TestSourceVersionHashesEverySource checks it).
var wrapperSourceDirs = []string{"wrapper", filepath.Join("cmd", "dispatch-wrapper"), "wire", "internal"}

// sourceVersion hashes the wrapper's source files, go.mod and go.sum.
func sourceVersion(root string) (string, error) {
	files, err := wrapperSourceFiles(root)
	if err != nil {
		return "", err
	}
	files = append(files, filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum"))
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("hash wrapper source: %w", err)
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
	}
	return "dev-" + hex.EncodeToString(h.Sum(nil))[:12], nil
}

// wrapperSourceFiles lists the non-test Go files under wrapperSourceDirs
// (testdata left out).
func wrapperSourceFiles(root string) ([]string, error) {
	var files []string
	for _, dir := range wrapperSourceDirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("hash wrapper source: %w", err)
		}
	}
	return files, nil
}
