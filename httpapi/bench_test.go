package httpapi

import (
	"io"
	"testing"
)

// BenchmarkRunPage is the dashboard's first read of a run of 10,000
// tasks: the summary and the first window of the status (issue 22: at
// most 300 ms of server time).
func BenchmarkRunPage(b *testing.B) {
	h := newTestHome(b, 10000)
	for b.Loop() {
		for _, path := range []string{"/api/v1/projects/p/summary", "/api/v1/projects/p?offset=0&limit=200"} {
			resp := h.get(b, path)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatalf("%s: %s", path, resp.Status)
			}
		}
	}
}
