package agentlog

// An agent CLI's transcript, which the stall watch looks at besides task.log.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dispatch-tool/dispatch/wrapper/proc"
)

// TranscriptDir is where the tool keeps this attempt's transcript, or "".
// Only claude's is known by path: <config dir>/projects/<cwd with every
// character but letters and digits turned into '-'>. codex and gemini print
// every step of their work in their stream formats, which task.log sees.
func TranscriptDir(tool string, env []string, cwd string) string {
	if tool != "claude" {
		return ""
	}
	base := proc.LookupEnv(env, "CLAUDE_CONFIG_DIR")
	if base == "" {
		home := proc.LookupEnv(env, "HOME")
		if home == "" {
			return ""
		}
		base = filepath.Join(home, ".claude")
	}
	slug := strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return '-'
	}, cwd)
	return filepath.Join(base, "projects", slug)
}

// maxTranscriptEntries bounds the files looked at in a transcript directory.
const maxTranscriptEntries = 256

// NewestChange returns the latest modification time in dir and its direct
// entries; the zero time when there is none.
func NewestChange(dir string) time.Time {
	if dir == "" {
		return time.Time{}
	}
	var newest time.Time
	fi, err := os.Stat(dir)
	if err != nil {
		return newest
	}
	newest = fi.ModTime()
	// The tool's home is the task's to change: never block on a FIFO.
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_DIRECTORY, 0)
	if err != nil {
		return newest
	}
	defer f.Close()
	entries, _ := f.ReadDir(maxTranscriptEntries)
	for _, e := range entries {
		if info, err := e.Info(); err == nil && info.ModTime().After(newest) {
			newest = info.ModTime()
		}
	}
	return newest
}
