package home

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// The files of a home, each directly in it.
const (
	// ConfigFile is nodes.yaml, read unless --config names another.
	ConfigFile = "nodes.yaml"
	// DBFile is the database, which only the lock holder writes.
	DBFile = "dispatch.db"
	// SocketFile is the control socket (see SocketPath).
	SocketFile = "dispatch.sock"
	// PidFile records the pid of a background controller.
	PidFile = "dispatch.pid"
	// LogFile is the log of a background controller.
	LogFile = "dispatch.log"
	// TokenFile is the HTTP API's token (serve --http), private (0600).
	TokenFile = "http.token"
	// ReadTokenFile is the HTTP API's read-only token: it is refused every
	// action (retry, cancel, stop, start, a schedule's switch).
	ReadTokenFile = "http-read.token"
)

// ConfigPath is the home's nodes.yaml.
func ConfigPath(home string) string { return filepath.Join(home, ConfigFile) }

// DBPath is the home's database.
func DBPath(home string) string { return filepath.Join(home, DBFile) }

// SpecsDir holds the home's projects, one directory each.
func SpecsDir(home string) string { return filepath.Join(home, "specs") }

// RunsRoot holds what is collected of every project (runs/), private to
// the home's owner (see AcquireLock).
func RunsRoot(home string) string { return filepath.Join(home, "runs") }

// RunsDir is where a project's collected outputs and report live.
func RunsDir(home, project string) string { return filepath.Join(RunsRoot(home), project) }

// TokenPath is the token every HTTP API request must carry.
func TokenPath(home string) string { return filepath.Join(home, TokenFile) }

// ReadTokenPath is the token that reads the HTTP API and never acts.
func ReadTokenPath(home string) string { return filepath.Join(home, ReadTokenFile) }

// LogPath is the log of a background controller.
func LogPath(home string) string { return filepath.Join(home, LogFile) }

// SocketPath is the control socket of a home: dispatch.sock in it, or, when
// that path is too long for a unix socket, a name derived from the home in
// SocketDir.
func SocketPath(home string) string {
	p := filepath.Join(home, SocketFile)
	if len(p) < 100 {
		return p
	}
	sum := sha256.Sum256([]byte(home))
	return filepath.Join(SocketDir(), hex.EncodeToString(sum[:8])+".sock")
}

// SocketDir is where the control sockets of homes with long paths live:
// dispatch-<uid> in the temp directory, private to its user (0700). It is
// the same in every session of the user, unlike $XDG_RUNTIME_DIR, so that
// a controller started from one shell answers the commands of another.
func SocketDir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("dispatch-%d", os.Getuid()))
}
