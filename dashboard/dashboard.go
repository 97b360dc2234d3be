package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"time"
)

//go:embed assets/index.html assets/app.js assets/actions.js assets/app.css
var assets embed.FS

// asset is one embedded file as served.
type asset struct {
	body        []byte
	contentType string
	etag        string
}

// files maps a request path to its asset; anything else is 404, so there
// is no directory listing and no file but these four.
var files = map[string]asset{
	"/":           load("index.html", "text/html; charset=utf-8"),
	"/index.html": load("index.html", "text/html; charset=utf-8"),
	"/app.js":     load("app.js", "text/javascript; charset=utf-8"),
	"/actions.js": load("actions.js", "text/javascript; charset=utf-8"),
	"/app.css":    load("app.css", "text/css; charset=utf-8"),
}

func load(name, contentType string) asset {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		panic("dashboard: embedded asset missing: " + name)
	}
	sum := sha256.Sum256(b)
	return asset{body: b, contentType: contentType, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
}

// Handler serves the dashboard: "/" (and /index.html) is the page, /app.js
// and /actions.js its scripts, /app.css its style; every other path is 404. Only GET and
// HEAD are answered. The caller mounts it behind its authentication and
// sets the Content-Security-Policy.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	a, ok := files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	// no-cache: the browser revalidates with the ETag, so a new binary's
	// assets are picked up at once.
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
