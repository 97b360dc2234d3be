package home

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A home whose path is too long for a socket uses the private directory.
func TestSocketPathFallback(t *testing.T) {
	home := filepath.Join("/nonexistent", strings.Repeat("long-directory-name/", 6))
	p := SocketPath(home)
	if filepath.Dir(p) != SocketDir() || !strings.HasSuffix(SocketDir(), fmt.Sprintf("dispatch-%d", os.Getuid())) {
		t.Fatalf("SocketPath = %s, want it in %s", p, SocketDir())
	}
	if len(p) >= 100 {
		t.Fatalf("SocketPath = %s: too long", p)
	}
}
