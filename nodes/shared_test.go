package nodes

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSharedWith(t *testing.T) {
	self := Marker{Node: "box1", Home: "op:/home/a"}
	for _, tc := range []struct {
		name       string
		found      []Marker
		configured []string
		want       []string
	}{
		{"alone", []Marker{self}, []string{"box1", "box2"}, nil},
		{"nothing yet", nil, []string{"box1"}, nil},
		{"another name of this home", []Marker{self, {Node: "box2", Home: self.Home}}, []string{"box1", "box2"}, []string{"box2@op:/home/a"}},
		{"a former name of this home", []Marker{self, {Node: "old", Home: self.Home}}, []string{"box1", "box2"}, nil},
		{"another home, same name", []Marker{self, {Node: "box1", Home: "lab:/srv/b"}}, []string{"box1"}, []string{"box1@lab:/srv/b"}},
		{"another home, a name unknown here", []Marker{{Node: "gpu", Home: "lab:/srv/b"}}, []string{"box1"}, []string{"gpu@lab:/srv/b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, m := range SharedWith(self, tc.found, tc.configured) {
				got = append(got, m.Node+"@"+m.Home)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("SharedWith = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMarkers: markers written over a transport are read back, one a
// node and home (two homes' nodes of one name keep theirs), a marker
// already there is not rewritten (a work_dir does not change at each
// start), and files that are not markers are skipped.
func TestMarkers(t *testing.T) {
	ctx := t.Context()
	tr := NewLocal()
	wd := t.TempDir()
	if got, err := ReadMarkers(ctx, tr, wd); err != nil || len(got) != 0 {
		t.Fatalf("markers of a fresh work_dir: %v, %v", got, err)
	}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for i, m := range []Marker{{Node: "box1", Home: "op:/a"}, {Node: "box1", Home: "lab:/b"}, {Node: "box1", Home: "op:/a"}} {
		// The third, a marker already there, is left as it is.
		if err := WriteMarker(ctx, tr, wd, m, now.Add(time.Duration(i/2)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	writeFileT(t, wd+"/"+MarkerDir+"/junk.json", "not json")
	writeFileT(t, wd+"/"+MarkerDir+"/big.json", `{"node":"x","home":"`+string(make([]byte, 5000))+`"}`)
	got, err := ReadMarkers(ctx, tr, wd)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, m := range got {
		keys = append(keys, m.Node+"@"+m.Home+"@"+m.Time)
	}
	slices.Sort(keys)
	if want := []string{"box1@lab:/b@2026-11-28T12:00:00Z", "box1@op:/a@2026-11-28T12:00:00Z"}; !slices.Equal(keys, want) {
		t.Errorf("markers = %v, want %v", keys, want)
	}
}

func writeFileT(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// gatedGets is a transport whose Get of a marker waits until want of
// them are under way at once (or one waited 2 s, when it lets all go),
// and which answers more than a marker may hold for grown.json.
type gatedGets struct {
	Transport
	want     int
	mu       sync.Mutex
	inFlight int
	most     int
	gate     chan struct{}
	once     sync.Once
}

func (g *gatedGets) Get(ctx context.Context, p string, w io.Writer) error {
	g.mu.Lock()
	g.inFlight++
	g.most = max(g.most, g.inFlight)
	if g.inFlight >= g.want {
		g.once.Do(func() { close(g.gate) })
	}
	g.mu.Unlock()
	select {
	case <-g.gate:
	case <-time.After(2 * time.Second):
		g.once.Do(func() { close(g.gate) })
	}
	g.mu.Lock()
	g.inFlight--
	g.mu.Unlock()
	if strings.HasSuffix(p, "/grown.json") {
		// Listed small, grown since: a node user writing it.
		_, err := w.Write([]byte(`{"node":"x","home":"` + strings.Repeat("y", 5000) + `"}`))
		return err
	}
	return g.Transport.Get(ctx, p, w)
}

// TestMarkersReadSideBySide: a work_dir many homes used holds many
// markers; they are read several at once (one after the other, each is
// a file's round trips at every connection), every one of them kept, and
// a marker that grew past 4 KiB since it was listed is skipped.
func TestMarkersReadSideBySide(t *testing.T) {
	ctx := t.Context()
	wd := t.TempDir()
	local := NewLocal()
	const homes = 40
	for i := range homes {
		if err := WriteMarker(ctx, local, wd, Marker{Node: "box1", Home: fmt.Sprintf("op:/h%02d", i)}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	writeFileT(t, wd+"/"+MarkerDir+"/grown.json", `{"node":"x","home":"y"}`)
	g := &gatedGets{Transport: local, want: 4, gate: make(chan struct{})}
	got, err := ReadMarkers(ctx, g, wd)
	if err != nil {
		t.Fatal(err)
	}
	if g.most < g.want {
		t.Errorf("at most %d markers read at once, want %d or more", g.most, g.want)
	}
	if len(got) != homes {
		t.Errorf("%d markers read, want %d (the grown one skipped)", len(got), homes)
	}
	for _, m := range got {
		if m.Node != "box1" {
			t.Errorf("marker %+v read, want only box1's", m)
		}
	}
}
