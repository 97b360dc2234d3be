package dashboard

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestDashboardHandler(t *testing.T) {
	h := Handler()
	cases := []struct {
		name, method, path string
		code               int
		ctype, contains    string
	}{
		{"root is the page", "GET", "/", 200, "text/html; charset=utf-8", `<script src="app.js" defer></script>`},
		{"index.html", "GET", "/index.html", 200, "text/html; charset=utf-8", "<title>dispatch</title>"},
		{"script", "GET", "/app.js", 200, "text/javascript; charset=utf-8", "'use strict'"},
		{"style", "GET", "/app.css", 200, "text/css; charset=utf-8", ":root"},
		{"head", "HEAD", "/app.js", 200, "text/javascript; charset=utf-8", ""},
		{"no listing", "GET", "/assets/", 404, "", ""},
		{"no embed path", "GET", "/assets/app.js", 404, "", ""},
		{"the actions' script", "GET", "/actions.js", 200, "text/javascript; charset=utf-8", "window.dispatchActions"},
		{"unknown", "GET", "/favicon.ico", 404, "", ""},
		{"no traversal", "GET", "/../dashboard.go", 404, "", ""},
		{"read-only", "POST", "/", 405, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if rec.Code != tc.code {
				t.Fatalf("%s %s: %d, want %d", tc.method, tc.path, rec.Code, tc.code)
			}
			if tc.ctype != "" && rec.Header().Get("Content-Type") != tc.ctype {
				t.Errorf("Content-Type %q, want %q", rec.Header().Get("Content-Type"), tc.ctype)
			}
			if tc.code == 200 && rec.Header().Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("no X-Content-Type-Options: nosniff")
			}
			if !strings.Contains(rec.Body.String(), tc.contains) {
				t.Errorf("body lacks %q", tc.contains)
			}
		})
	}
}

func TestDashboardRevalidates(t *testing.T) {
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/app.js", nil))
	etag := rec.Header().Get("ETag")
	if etag == "" || rec.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, rec.Header().Get("Cache-Control"))
	}
	req := httptest.NewRequest("GET", "/app.js", nil)
	req.Header.Set("If-None-Match", etag)
	rec = httptest.NewRecorder()
	Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusNotModified {
		t.Errorf("with If-None-Match: %d, want 304", rec.Code)
	}
}

// TestDashboardAssetsKeepTheCSP guards the rules the strict CSP and the
// task-controlled strings need, so that a change cannot slip one in: no
// HTML parsing of strings, no eval, no inline script or style.
func TestDashboardAssetsKeepTheCSP(t *testing.T) {
	for _, name := range []string{"index.html", "app.js", "actions.js", "app.css"} {
		b, err := assets.ReadFile("assets/" + name)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(",
			"new Function", "style=", ".style.", "cssText", "javascript:", "http://", "https://"} {
			if name == "app.js" && bad == "http://" && strings.Count(s, bad) == strings.Count(s, "http://www.w3.org/2000/svg") {
				continue // the SVG namespace is a name, not a fetch
			}
			if strings.Contains(s, bad) {
				t.Errorf("%s contains %q", name, bad)
			}
		}
	}
	page, _ := assets.ReadFile("assets/index.html")
	if strings.Count(string(page), "<script") != 2 || !strings.Contains(string(page), `<script src="actions.js" defer></script>
<script src="app.js" defer></script>`) {
		t.Errorf("index.html must load actions.js, then app.js, and have no inline script")
	}
}
