package nodestatus

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// BenchmarkPoll is one look of the watch's 100 ms poll (no file events)
// over a node holding 10,000 finished task directories and 32 live ones,
// while none starts or ends: "walk" looks at every directory (the poll
// before ScanLive), "live" where the live index says.
//
//	go test -run XXX -bench Poll ./wrapper/nodestatus
func BenchmarkPoll(b *testing.B) {
	root := b.TempDir()
	for i := range 10_032 {
		dir := filepath.Join(root, "p", "tasks", "T"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		status := `{"status":"completed","attempt":1}`
		if i >= 10_000 {
			status = `{"status":"running","attempt":1}`
			if err := MarkLive(dir, 1); err != nil {
				b.Fatal(err)
			}
		}
		if err := taskfiles.WriteFileAtomic(filepath.Join(dir, taskfiles.FileStatus), []byte(status), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct {
		name string
		look func(*scanner) []string
	}{
		{"walk", func(s *scanner) []string { return s.Scan(false) }},
		{"live", (*scanner).ScanLive},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := NewScanner(root)
			s.Prime()
			for b.Loop() {
				if changed := bc.look(s); len(changed) != 0 {
					b.Fatalf("a look with nothing changed told %v", changed)
				}
			}
		})
	}
}
