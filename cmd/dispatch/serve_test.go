package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/control"
)

type scheduleJSON struct {
	Serving   bool `json:"serving"`
	Schedules []struct {
		Project    string `json:"project"`
		Kind       string `json:"kind"`
		Schedule   string `json:"schedule"`
		Enabled    bool   `json:"enabled"`
		NextAt     string `json:"next_at"`
		LastRun    int    `json:"last_run"`
		LastResult string `json:"last_result"`
		Problem    string `json:"problem"`
		Failures   int    `json:"failures"`
		Disabled   string `json:"disabled_reason"`
		Enable     string `json:"enable"`
	} `json:"schedules"`
}

func readSchedules(t *testing.T, home string) scheduleJSON {
	t.Helper()
	r := runDispatch(t, nil, "--home", home, "schedule", "--json")
	var v scheduleJSON
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &v) != nil {
		t.Fatalf("schedule --json: %s", r)
	}
	return v
}

// TestServeDaemon: `dispatch serve --detach` is a real background daemon:
// it starts a scheduled project's run when it is due, takes a `start` of
// another project, answers enable and disable, and ends on serve --stop.
func TestServeDaemon(t *testing.T) {
	t.Parallel()
	home, _ := opsHome(t, map[string]map[string]string{
		"nightly": {"S01-a.md": "echo a > a.txt\n"},
		"manual":  {"S01-a.md": "echo m > m.txt\n"},
	})
	// A schedule that does not read does not keep the daemon from serving
	// the others.
	writeFile(t, filepath.Join(home, "specs", "broken", "project.yaml"), "tool: shell\nschedule: {every: 1s}\n")
	writeFile(t, filepath.Join(home, "specs", "broken", "S01-a.md"), "true\n")
	// Due at once: its time has passed and it has never run.
	writeFile(t, filepath.Join(home, "specs", "nightly", "project.yaml"),
		"tool: shell\nintegration: false\nschedule:\n  at: 2026-01-01T00:00\n")
	if r := runDispatch(t, nil, "--home", home, "validate", "nightly"); r.code != 0 || !strings.Contains(r.stderr, "nightly has a schedule (next ") {
		t.Errorf("validate does not say the project runs on a schedule: %s", r)
	}
	v := readSchedules(t, home)
	if v.Serving || len(v.Schedules) != 2 || v.Schedules[0].Project != "nightly" || v.Schedules[0].Kind != "at" || !v.Schedules[0].Enabled ||
		v.Schedules[1].Project != "broken" || !strings.Contains(v.Schedules[1].Problem, "shorter than 10s") {
		t.Fatalf("schedule before serve: %+v", v)
	}
	if r := runDispatch(t, nil, "--home", home, "schedule"); !strings.Contains(r.stdout, "no dispatch serve runs") {
		t.Errorf("schedule does not say that no daemon runs: %s", r)
	}

	r := runDispatch(t, nil, "--home", home, "serve", "--detach")
	if r.code != 0 || !strings.Contains(r.stdout, "dispatch serve started in the background") || !strings.Contains(r.stderr, "broken") {
		t.Fatalf("serve --detach: %s", r)
	}
	t.Cleanup(func() { runDispatch(t, nil, "--home", home, "serve", "--stop") })
	deadline := time.Now().Add(60 * time.Second)
	for {
		v = readSchedules(t, home)
		if len(v.Schedules) == 2 && v.Schedules[0].LastResult == "passed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduled run did not pass: %+v\nlog:\n%s", v, readFile(t, filepath.Join(home, "dispatch.log")))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if s := v.Schedules[0]; !v.Serving || s.LastRun != 1 || s.NextAt != "" {
		t.Errorf("after the run: %+v; want serving, run 1, nothing due after an at: run", v)
	}
	r = runDispatch(t, nil, "--home", home, "runs", "nightly", "--json")
	if !strings.Contains(r.stdout, `"trigger": "schedule"`) {
		t.Errorf("runs of the scheduled project: %s", r)
	}
	if got := readFile(t, filepath.Join(home, "runs", "nightly", "S01", "output", "a.txt")); got != "a\n" {
		t.Errorf("the scheduled run's output: %q", got)
	}

	// A start while the daemon runs is handed to it.
	r = runDispatch(t, nil, "--home", home, "start", "manual")
	if r.code != 0 || !strings.Contains(r.stdout, "handed to the running controller") {
		t.Fatalf("start while serve runs: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "schedule", "disable", "nightly"); r.code != 0 || !strings.Contains(r.stdout, "disabled") {
		t.Errorf("schedule disable: %s", r)
	}
	if v := readSchedules(t, home); v.Schedules[0].Enabled {
		t.Errorf("after disable: %+v", v)
	}
	if r := runDispatch(t, nil, "--home", home, "schedule", "enable", "manual"); r.code != 2 || !strings.Contains(r.stderr, "has no schedule") {
		t.Errorf("enable of a project without a schedule: %s", r)
	}
	// A second daemon is refused: one controller per home.
	if r := runDispatch(t, nil, "--home", home, "serve"); r.code == 0 || !strings.Contains(r.stderr, "already runs") {
		t.Errorf("a second serve: %s", r)
	}

	r = runDispatch(t, nil, "--home", home, "serve", "--stop")
	if r.code != 0 || !strings.Contains(r.stdout, "stops") {
		t.Fatalf("serve --stop: %s", r)
	}
	if control.Running(home) {
		t.Error("the daemon still answers after serve --stop")
	}
	if v := readSchedules(t, home); v.Serving {
		t.Error("schedule says a daemon serves after serve --stop")
	}
	if r := runDispatch(t, nil, "--home", home, "serve", "--stop"); r.code != 0 || !strings.Contains(r.stdout, "nothing to stop") {
		t.Errorf("serve --stop with no daemon: %s", r)
	}
	// Without a daemon, enable takes the lock itself; an at: that ran and
	// passed is not due again.
	if r := runDispatch(t, nil, "--home", home, "schedule", "enable", "nightly"); r.code != 0 || !strings.Contains(r.stdout, "enabled") {
		t.Errorf("schedule enable without a daemon: %s", r)
	}
	if v := readSchedules(t, home); v.Schedules[0].Project != "nightly" || !v.Schedules[0].Enabled || v.Schedules[0].NextAt != "" {
		t.Errorf("an at: that ran, enabled again: %+v; want nothing due", v.Schedules[0])
	}
	if r := runDispatch(t, nil, "--home", home, "schedule", "enable", "nosuch"); r.code != 2 || !strings.Contains(r.stderr, "nosuch") ||
		strings.Contains(r.stderr, "has no schedule") {
		t.Errorf("enable of an unknown project: %s", r)
	}
}

// TestScheduleBadInput: a schedule that cannot run is refused by validate
// and start at its line of project.yaml with the fix, exit 2, and nothing
// is written (serve warns and serves the others: TestServeDaemon).
func TestScheduleBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"schedule:\n  cron: \"61 * * * *\"\n", `project.yaml:4: schedule: cron "61 * * * *" is not a cron expression`},
		{"schedule:\n  cron: \"0 3 * * *\"\n  timezone: Mars/Olympus\n", `project.yaml:5: schedule: timezone "Mars/Olympus" is not a known time zone`},
		{"schedule:\n  every: 5s\n", "project.yaml:4: schedule: every 5s is shorter than 10s"},
		{"schedule:\n  every: 6h\n  cron: \"0 3 * * *\"\n", "project.yaml:4: schedule has more than one of cron, every and at"},
		{"schedule:\n  at: tomorrow\n", `project.yaml:4: schedule: at "tomorrow" is not a date and time`},
		{"schedule: daily\n", "project.yaml:3: schedule must be a mapping"},
		{"schedule:\n  evry: 6h\n", `unknown key "evry"`},
		{"schedule:\n  cron: \"@every 2s\"\n", "project.yaml:4: schedule: cron @every is an interval"},
		{"schedule:\n  cron: \"0 0 30 2 *\"\n", "never comes"},
		{"schedule: {}\n", "schedule has none of cron, every and at"},
		{"schedule:\n  every: 6h\n  max_failures: -1\n", "project.yaml:5: schedule.max_failures must be a whole number from 0 to 1000, not -1"},
		{"schedule:\n  every: 6h\n  max_failures: many\n", "project.yaml:5: schedule.max_failures must be a whole number from 0 to 1000"},
		{"schedule:\n  every: 6h\n  max_failures: 2.5\n", "project.yaml:5: schedule.max_failures must be a whole number"},
	} {
		home, _ := opsHome(t, map[string]map[string]string{"p": {"S01-a.md": "true\n"}})
		writeFile(t, filepath.Join(home, "specs", "p", "project.yaml"), "tool: shell\nintegration: false\n"+tc.yaml)
		for _, args := range [][]string{{"validate", "p"}, {"start", "p"}, {"schedule", "enable", "p"}} {
			r := runDispatch(t, nil, append([]string{"--home", home}, args...)...)
			if r.code != 2 || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "fix:") {
				t.Errorf("%v with %q: %s; want exit 2 with %q and a fix", args, tc.yaml, r, tc.want)
			}
		}
		if _, err := os.Stat(filepath.Join(home, "dispatch.db")); err == nil {
			t.Errorf("%q: a database was written", tc.yaml)
		}
	}
}

// TestServeInstall: serve --install writes a systemd user unit that runs
// this dispatch for this home, private to its owner, and says how to
// enable it and which variables the service needs.
func TestServeInstall(t *testing.T) {
	t.Parallel()
	home, _ := opsHome(t, nil)
	nodesYAML := readFile(t, filepath.Join(home, "nodes.yaml"))
	writeFile(t, filepath.Join(home, "nodes.yaml"), nodesYAML+"api_modes:\n  team:\n    env: {ANTHROPIC_API_KEY: \"${TEAM_KEY}\"}\n")
	user := t.TempDir()
	r := runDispatch(t, []string{"HOME=" + user, "XDG_CONFIG_HOME=" + filepath.Join(user, "cfg")}, "--home", home, "serve", "--install")
	if r.code != 0 {
		t.Fatalf("serve --install: %s", r)
	}
	matches, _ := filepath.Glob(filepath.Join(user, "cfg", "systemd", "user", "dispatch-serve-*.service"))
	if len(matches) != 1 {
		t.Fatalf("unit files: %v\n%s", matches, r)
	}
	unit := readFile(t, matches[0])
	if !strings.Contains(unit, `"--home" "`+home+`"`) || !strings.Contains(unit, `"serve"`) || !strings.Contains(unit, "WantedBy=default.target") {
		t.Errorf("unit:\n%s", unit)
	}
	if fi, _ := os.Stat(matches[0]); fi.Mode().Perm() != 0o600 {
		t.Errorf("unit mode %v, want 0600", fi.Mode().Perm())
	}
	for _, want := range []string{"systemctl --user enable --now " + filepath.Base(matches[0]), "loginctl enable-linger", "import-environment TEAM_KEY"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("serve --install does not say %q:\n%s", want, r.stdout)
		}
	}
}

// TestServiceFiles: the unit and the launchd agent quote what systemd and
// XML would read otherwise (spaces, quotes, %, $, <).
func TestServiceFiles(t *testing.T) {
	home := `/home/a b/"q"/50%/$x/<y>`
	argv := []string{"/opt/dispatch", "--home", home, "serve"}
	sf, err := serviceFor("linux", home, argv, "/home/u", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sf.Path, "/home/u/.config/systemd/user/dispatch-serve-") ||
		!strings.Contains(sf.Text, `ExecStart="/opt/dispatch" "--home" "/home/a b/\"q\"/50%%/$$x/<y>" "serve"`) {
		t.Errorf("unit %s:\n%s", sf.Path, sf.Text)
	}
	sf, err = serviceFor("darwin", home, argv, "/Users/u", "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(sf.Path, "/Users/u/Library/LaunchAgents/dev.dispatch.serve.") ||
		!strings.Contains(sf.Text, "<string>/home/a b/&#34;q&#34;/50%/$x/&lt;y&gt;</string>") ||
		!strings.HasPrefix(sf.Enable[0], "launchctl load -w '/Users/u/Library/LaunchAgents/") {
		t.Errorf("agent %s:\n%s\n%v", sf.Path, sf.Text, sf.Enable)
	}
	if _, err := serviceFor("plan9", home, argv, "/u", ""); err == nil || !strings.Contains(err.Error(), "serve --detach") {
		t.Errorf("an unknown system: %v", err)
	}
}

// TestServeBreaker: under a real daemon, a scheduled project that fails
// max_failures: 2 times in a row is disabled: schedule_disabled is sent,
// `schedule` says why and how to enable it, `schedule enable` does and
// resets the count, and the fixed project's next scheduled run passes.
// An at: in the past is due at once; DISPATCH_TEST_SCHEDULE_BACKOFF
// shortens the wait after a failure from 60s to 1s.
func TestServeBreaker(t *testing.T) {
	t.Parallel()
	inbox := t.TempDir()
	home, _ := opsHome(t, map[string]map[string]string{"flaky": {"S01-a.md": "---\nmax_retries: 0\n---\nexit 3\n"}})
	writeFile(t, filepath.Join(home, "specs", "flaky", "project.yaml"), "tool: shell\nintegration: false\n"+
		"notify:\n  command: [/bin/sh, -c, 'n=$(ls \"$1\" | wc -l); cat > \"$1/.m\" && mv \"$1/.m\" \"$1/$n.json\"', sh, "+inbox+"]\n"+
		"  on: [schedule_disabled]\n"+
		"schedule:\n  at: 2026-01-01T00:00\n  max_failures: 2\n")
	r := runDispatch(t, []string{envScheduleBackoff + "=1s"}, "--home", home, "serve", "--detach")
	if r.code != 0 {
		t.Fatalf("serve --detach: %s", r)
	}
	t.Cleanup(func() { runDispatch(t, nil, "--home", home, "serve", "--stop") })
	waitFor := func(what string, cond func(scheduleJSON) bool) scheduleJSON {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			v := readSchedules(t, home)
			if len(v.Schedules) == 1 && cond(v) {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v\nlog:\n%s", what, v, readFile(t, filepath.Join(home, "dispatch.log")))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	v := waitFor("the schedule to be disabled", func(v scheduleJSON) bool { return !v.Schedules[0].Enabled })
	s := v.Schedules[0]
	if s.Project != "flaky" || s.Failures != 2 || s.LastRun != 2 || s.NextAt != "" ||
		!strings.Contains(s.Disabled, "2 scheduled runs failed in a row (max_failures: 2, the last run 2)") || s.Enable != "dispatch schedule enable flaky" {
		t.Errorf("disabled: %+v", s)
	}
	var msg struct{ Event, Project, Message string }
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(filepath.Join(inbox, "0.json"))
		if err == nil && json.Unmarshal(b, &msg) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no schedule_disabled received: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if msg.Event != "schedule_disabled" || msg.Project != "flaky" || !strings.Contains(msg.Message, "dispatch schedule enable flaky") {
		t.Errorf("the notification: %+v", msg)
	}
	if r := runDispatch(t, nil, "--home", home, "schedule"); !strings.Contains(r.stdout, "flaky is disabled: 2 scheduled runs failed in a row") ||
		!strings.Contains(r.stdout, "to enable it again: dispatch schedule enable flaky") {
		t.Errorf("schedule does not say why and how: %s", r)
	}
	if r := runDispatch(t, nil, "--home", home, "runs", "flaky", "--json"); strings.Count(r.stdout, `"trigger": "schedule"`) != 2 {
		t.Errorf("want 2 scheduled runs, no third: %s", r)
	}
	writeFile(t, filepath.Join(home, "specs", "flaky", "S01-a.md"), "true\n")
	r = runDispatch(t, nil, "--home", home, "schedule", "enable", "flaky")
	if r.code != 0 || !strings.Contains(r.stdout, "enabled (its count of failed runs is reset)") {
		t.Fatalf("schedule enable: %s", r)
	}
	v = waitFor("the fixed project's scheduled run to pass", func(v scheduleJSON) bool { return v.Schedules[0].LastResult == "passed" })
	if s := v.Schedules[0]; !s.Enabled || s.Failures != 0 || s.Disabled != "" || s.LastRun != 3 {
		t.Errorf("enabled again: %+v; want enabled, the count reset, run 3 passed", s)
	}
}
