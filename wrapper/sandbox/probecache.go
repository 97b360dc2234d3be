package sandbox

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
)

// Every attempt's supervisor is a process of its own, and a trial bwrap
// costs it 4–10 ms (more on a loaded node) before its real one. The probe's
// answer is kept in the wrapper's directory for probeCacheTTL, for the
// wrapper version, boot, user and bwrap binary that gave it; `wrapper
// sandbox` (the controller's probe when it connects, `nodes check`) always
// probes afresh and renews it. Only the node user can write there: a task
// that could forge it (an unsandboxed one) could replace the wrapper
// itself.

// FileProbeCache is the cached probe, beside the wrapper binary.
const FileProbeCache = ".sandbox-probe.json"

// probeCacheTTL bounds how long a cached answer serves: a sysctl that
// turns user namespaces off is seen within it.
const probeCacheTTL = 10 * time.Minute

// maxProbeCache bounds what is read of the cache file.
const maxProbeCache = 64 << 10

// probeCache is the cache file's content.
type probeCache struct {
	Key   probeKey          `json:"key"`
	At    time.Time         `json:"at"`
	Reply wire.SandboxReply `json:"reply"`
}

// probeKey names what the probe's answer depends on.
type probeKey struct {
	Version    string `json:"version"`
	Boot       string `json:"boot"`
	UID        int    `json:"uid"`
	Bwrap      string `json:"bwrap"`
	BwrapMtime int64  `json:"bwrap_mtime"`
}

// currentProbeKey is the key here and now; false where none can be made
// (no bwrap: the probe is cheap then).
func currentProbeKey(version string) (probeKey, bool) {
	path := bwrapPath()
	if path == "" {
		return probeKey{}, false
	}
	fi, err := os.Stat(path)
	if err != nil {
		return probeKey{}, false
	}
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return probeKey{Version: version, Boot: strings.TrimSpace(string(boot)), UID: os.Getuid(), Bwrap: path,
		BwrapMtime: fi.ModTime().UnixNano()}, true
}

// probeCachePath is the cache file of this wrapper binary; "" when its
// directory is unknown.
func probeCachePath() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), FileProbeCache)
}

// cachedProbe is the cached answer for key, if one is fresh at now.
func cachedProbe(path string, key probeKey, now time.Time) (wire.SandboxReply, bool) {
	f, err := os.Open(path)
	if err != nil {
		return wire.SandboxReply{}, false
	}
	defer f.Close()
	var c probeCache
	if err := json.NewDecoder(io.LimitReader(f, maxProbeCache)).Decode(&c); err != nil {
		return wire.SandboxReply{}, false
	}
	if c.Key != key || now.Before(c.At) || now.Sub(c.At) > probeCacheTTL {
		return wire.SandboxReply{}, false
	}
	return c.Reply, true
}

// storeProbe writes the answer for key (replacing the file whole; a
// failure only costs the next attempt a probe).
func storeProbe(path string, key probeKey, reply wire.SandboxReply, now time.Time) {
	data, err := json.Marshal(probeCache{Key: key, At: now, Reply: reply})
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), FileProbeCache+".tmp*")
	if err != nil {
		return
	}
	_, werr := tmp.Write(data)
	if cerr := tmp.Close(); werr != nil || cerr != nil || os.Rename(tmp.Name(), path) != nil {
		os.Remove(tmp.Name())
	}
}

// ProbeWithCache is the probe's answer: the cached one when fresh, else a
// new probe's (fresh: always), stored for the attempts that follow.
func ProbeWithCache(ctx context.Context, version string, fresh bool) wire.SandboxReply {
	key, ok := currentProbeKey(version)
	path := probeCachePath()
	if !ok || path == "" {
		return ProbeBwrap(ctx)
	}
	now := time.Now()
	if !fresh {
		if r, ok := cachedProbe(path, key, now); ok {
			return r
		}
	}
	r := ProbeBwrap(ctx)
	storeProbe(path, key, r, now)
	return r
}
