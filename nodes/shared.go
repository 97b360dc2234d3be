package nodes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
)

// A work_dir may be reached by more than one node: two names for one host,
// or a home shared over NFS with the default ~/.dispatch/work. Each node
// reports and kills only its own attempts there (the wrapper's --node), so
// their tasks do not collide; still, an operator should know. Every node
// that uses a work_dir leaves a marker in it, and `dispatch nodes check`
// and `validate` look for the markers of other nodes.

// MarkerDir is the directory of a work_dir that holds the markers of the
// nodes that use it, one file each (see MarkerName).
const MarkerDir = ".nodes"

// maxMarker caps what is read of one marker: anyone with the node user's
// rights can write there.
const maxMarker = 4 << 10

// Marker says that a node of a dispatch home uses a work_dir.
type Marker struct {
	Node string `json:"node"`
	// Home names the dispatch home (see HomeID).
	Home string `json:"home"`
	// Time is when the marker was written (RFC 3339); it is not
	// rewritten while it is there.
	Time string `json:"time"`
}

// HomeID names the dispatch home at the absolute path home, as markers
// do: this machine's host name and the path.
func HomeID(home string) string {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return host + ":" + home
}

// MarkerName is the file name of m in MarkerDir: the node's name and a
// digest of its home, so that two homes with a node of one name each
// keep a marker of their own.
func MarkerName(m Marker) string {
	sum := sha256.Sum256([]byte(m.Home))
	return m.Node + "." + hex.EncodeToString(sum[:6]) + ".json"
}

// WriteMarker records in the work_dir wd (absolute) that m.Node of m.Home
// uses it, with now as its time, unless its marker is there already: a
// work_dir does not change each time a controller starts.
func WriteMarker(ctx context.Context, tr Transport, wd string, m Marker, now time.Time) error {
	p := path.Join(wd, MarkerDir, MarkerName(m))
	if st, err := tr.Lstat(ctx, p); err == nil && st.Mode.IsRegular() {
		return nil
	}
	m.Time = now.UTC().Format(time.RFC3339)
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := tr.Put(ctx, p, bytes.NewReader(append(data, '\n')), 0o600); err != nil {
		return fmt.Errorf("write the node marker %s: %w", p, err)
	}
	return nil
}

// markerReads is how many markers ReadMarkers reads at once: each is a
// file of its own (an SFTP open, read and close over SSH), and a work_dir
// used by many homes holds many, read one after the other at every
// connection (about 4 round trips each: 100 over a link of 30 ms, some
// 12 s).
const markerReads = 16

// ReadMarkers returns the markers in the work_dir wd (absolute), sorted by
// file name; none when it has none. A file that is not a marker (too big,
// not JSON, naming no node) is skipped. Up to markerReads are read at once.
func ReadMarkers(ctx context.Context, tr Transport, wd string) ([]Marker, error) {
	dir := path.Join(wd, MarkerDir)
	files, err := tr.Walk(ctx, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	files = slices.DeleteFunc(files, func(f FileInfo) bool {
		return strings.Contains(f.Path, "/") || !f.Mode.IsRegular() || f.Size > maxMarker || !strings.HasSuffix(f.Path, ".json")
	})
	read := make([]*Marker, len(files))
	sem := make(chan struct{}, markerReads)
	var wg sync.WaitGroup
	for i, f := range files {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			read[i] = readMarker(ctx, tr, path.Join(dir, f.Path))
		})
	}
	wg.Wait()
	var out []Marker
	for _, m := range read {
		if m != nil {
			out = append(out, *m)
		}
	}
	return out, nil
}

// readMarker reads the marker at p, nil when it is none. The file may
// have grown since it was listed: no more than maxMarker is kept.
func readMarker(ctx context.Context, tr Transport, p string) *Marker {
	buf := &markerBuffer{}
	if err := tr.Get(ctx, p, buf); err != nil {
		return nil
	}
	var m Marker
	if json.Unmarshal(buf.Bytes(), &m) != nil || m.Node == "" {
		return nil
	}
	return &m
}

// markerBuffer holds up to maxMarker bytes and refuses more.
type markerBuffer struct{ bytes.Buffer }

var errMarkerTooBig = errors.New("not a marker: over 4 KiB")

func (b *markerBuffer) Write(p []byte) (int, error) {
	if b.Len()+len(p) > maxMarker {
		return 0, errMarkerTooBig
	}
	return b.Buffer.Write(p)
}

// SharedWith decides which of the markers found in node self's work_dir
// name another node that uses it: a node of self's home named in
// configured (nodes.yaml), or any node of another home. A marker of
// self's home whose node nodes.yaml no longer names is a former name of
// a node (renamed, removed) and left out, as is self's own.
func SharedWith(self Marker, found []Marker, configured []string) []Marker {
	var out []Marker
	for _, m := range found {
		switch {
		case m.Home == self.Home && m.Node == self.Node:
		case m.Home == self.Home && !slices.Contains(configured, m.Node):
		default:
			out = append(out, m)
		}
	}
	return out
}

// SharedWarning says, for node at line of file, what it means that its
// work_dir wd is also used by others (SharedWith), and how to set them
// apart.
func SharedWarning(node, wd, file string, line int, home string, others []Marker) string {
	var ours, theirs []string
	for _, m := range others {
		if m.Home == home {
			ours = append(ours, m.Node)
		} else {
			theirs = append(theirs, fmt.Sprintf("node %s of the dispatch home %s (last %s; if that home is gone, remove %s)",
				m.Node, m.Home, m.Time, path.Join(wd, MarkerDir, MarkerName(m))))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "node %s's work_dir %s is also used by ", node, wd)
	if len(ours) > 0 {
		fmt.Fprintf(&b, "node %s of this home (two names for one host, or a home shared over NFS): each node reports and kills only its own attempts there, "+
			"so their tasks do not collide, but they share one directory and maybe one machine's slots", strings.Join(ours, ", "))
		if len(theirs) > 0 {
			b.WriteString("; and by ")
		}
	}
	if len(theirs) > 0 {
		fmt.Fprintf(&b, "%s: projects of the same name in both homes write into the same task directories", strings.Join(theirs, "; "))
	}
	fmt.Fprintf(&b, "; to set them apart give each node its own work_dir (%s, line %d), e.g. work_dir: ~/.dispatch/work-%s", file, line, node)
	return b.String()
}
