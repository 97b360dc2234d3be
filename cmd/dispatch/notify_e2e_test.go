package main

import (
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dispatch-tool/dispatch/notify"
)

// hookReceiver is a real HTTP receiver of webhooks that answers status
// and keeps each body with whether its signature was right.
type hookReceiver struct {
	mu     sync.Mutex
	bodies []string
	signed []bool
}

func newHookReceiver(t *testing.T, secret string, status int) (*hookReceiver, string) {
	r := &hookReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.bodies = append(r.bodies, string(b))
		r.signed = append(r.signed, hmac.Equal([]byte(req.Header.Get(notify.SignatureHeader)), []byte(notify.Sign(secret, b))))
		r.mu.Unlock()
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

// TestNotifyWhenARunFinishes: a project's webhook gets a signed JSON POST
// when the run finishes, its command the same JSON on stdin; the secret
// and the URL's token come from the controller's environment and are
// written nowhere. A webhook that refuses does not fail the run, and
// status says so.
func TestNotifyWhenARunFinishes(t *testing.T) {
	t.Parallel()
	home, _ := opsHome(t, map[string]map[string]string{"ok": {"S01-a.md": "echo a > a.txt\n"}, "refused": {"S01-a.md": "true\n"}})
	const secret = "whsec-2f9c1e7d"
	good, goodURL := newHookReceiver(t, secret, 200)
	_, badURL := newHookReceiver(t, "", 400)
	got := filepath.Join(t.TempDir(), "command.json")
	writeFile(t, filepath.Join(home, "specs", "ok", "project.yaml"), "tool: shell\nintegration: false\nnotify:\n"+
		"  webhook: ${HOOK_URL}\n  secret: ${HOOK_SECRET}\n  command: [/bin/sh, -c, 'cat > "+got+"']\n")
	// nodes.yaml's notify is every other project's.
	nodesYAML := readFile(t, filepath.Join(home, "nodes.yaml"))
	writeFile(t, filepath.Join(home, "nodes.yaml"), nodesYAML+"notify:\n  webhook: "+badURL+"/hook\n")
	env := []string{"HOOK_URL=" + goodURL + "/hook?token=tok-81b2", "HOOK_SECRET=" + secret}

	if r := runDispatch(t, env, "--home", home, "start", "ok"); r.code != 0 {
		t.Fatalf("start ok: %s", r)
	}
	good.mu.Lock()
	bodies, signed := append([]string(nil), good.bodies...), append([]bool(nil), good.signed...)
	good.mu.Unlock()
	if len(bodies) != 1 || !signed[0] {
		t.Fatalf("the webhook got %d bodies (signed: %v), want one signed", len(bodies), signed)
	}
	var m notify.Message
	if err := json.Unmarshal([]byte(bodies[0]), &m); err != nil {
		t.Fatal(err)
	}
	if m.Event != notify.RunFinished || m.Project != "ok" || m.Run != 1 || m.Result != "passed" ||
		m.Counts["completed"] != 1 || !strings.HasSuffix(m.Report, filepath.Join("runs", "ok", "report.md")) {
		t.Errorf("message %+v", m)
	}
	// The body has the keys of docs/SCHEDULES.md's example, message included.
	readme := readFile(t, filepath.Join("..", "..", "docs", "SCHEDULES.md"))
	_, example, _ := strings.Cut(readme[strings.Index(readme, "## Notifications"):], "```json\n")
	example, _, _ = strings.Cut(example, "```")
	if want, have := keys(t, json.RawMessage(example)), keys(t, json.RawMessage(bodies[0])); !slices.Equal(want, have) {
		t.Errorf("the body's keys %v are not the docs/SCHEDULES.md example's %v", have, want)
	}
	if b, err := os.ReadFile(got); err != nil || strings.TrimSpace(string(b)) != bodies[0] {
		t.Errorf("the command got %q (%v), want the webhook's body", b, err)
	}
	// Neither the secret nor the URL's token is on disk.
	filepath.WalkDir(home, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil && (strings.Contains(string(b), secret) || strings.Contains(string(b), "tok-81b2")) {
				t.Errorf("%s holds the secret or the token", p)
			}
		}
		return nil
	})

	// The other project uses nodes.yaml's webhook, which refuses: the run
	// passes anyway, and status shows the failed notification.
	if r := runDispatch(t, env, "--home", home, "start", "refused"); r.code != 0 {
		t.Fatalf("start refused: %s", r)
	}
	r := runDispatch(t, nil, "--home", home, "status", "refused")
	if r.code != 0 || !strings.Contains(r.stdout+r.stderr, "notification failed: run_finished by webhook failed after 1 tries") ||
		!strings.Contains(r.stdout+r.stderr, "400 Bad Request") {
		t.Errorf("status of refused: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "status", "ok"); strings.Contains(r.stdout+r.stderr, "notification failed") {
		t.Errorf("status of ok shows a failure: %s", r)
	}
}

// TestNotifyBadInput: a notify block that cannot work is refused with the
// line and the fix, exit 2.
func TestNotifyBadInput(t *testing.T) {
	t.Parallel()
	home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "true\n"}})
	for _, tc := range []struct{ yaml, want string }{
		{"notify:\n  secret: hunter2\n  webhook: https://example.com/h\n", "project.yaml:3: notify: secret must name an environment variable"},
		{"notify:\n  webhook: ftp://example.com/h\n", "project.yaml:3: notify: webhook \"ftp://example.com/h\" is not an http or https URL"},
		{"notify: {}\n", "notify has neither webhook nor command"},
		{"notify:\n  command: notify-send\n", "notify: command must be a list"},
		{"notify:\n  webhok: https://example.com\n", `unknown key "webhok"`},
		{"notify:\n  webhook: https://example.com/h\n  secret: ${DISPATCH_TEST_UNSET_SECRET}\n", "notify secret: "},
		{"notify:\n  command: [n]\n  on: [task_failed, tsk_failed]\n", `project.yaml:4: notify: on: unknown event "tsk_failed"`},
		{"notify:\n  command: [n]\n  on: task_failed\n", "project.yaml:4: notify: on must be a list of events"},
		{"notify:\n  command: [n]\n  on: []\n", "project.yaml:4: notify: on is an empty list"},
	} {
		writeFile(t, filepath.Join(home, "specs", "p", "project.yaml"), "tool: shell\n"+tc.yaml)
		r := runDispatch(t, nil, "--home", home, "validate", "p")
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "fix:") {
			t.Errorf("%q: %s; want exit 2 with %q", tc.yaml, r, tc.want)
		}
		if strings.Contains(tc.yaml, "on:") && !strings.Contains(r.stderr, "known events: run_finished, run_failed, task_failed, gate_failed") {
			t.Errorf("%q: %s; want the known events", tc.yaml, r)
		}
	}
}
