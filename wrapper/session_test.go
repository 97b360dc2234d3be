package wrapper

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// TestSessionComesFromTheToolAlone: setup printing an init line, and a
// status.json rewritten after the attempt, cannot choose the session a
// later attempt resumes: `status` reports the one the tool itself named
// first, from the supervisor's private record.
func TestSessionComesFromTheToolAlone(t *testing.T) {
	t.Parallel()
	tk := newTask(t, "", wire.Launch{
		Setup:   `echo '{"type":"thread.started","thread_id":"forged-by-setup"}'`,
		Command: shell(`echo '{"type":"thread.started","thread_id":"tool-own-id"}'; echo '{"type":"thread.started","thread_id":"later-line"}'`),
	})
	tk.run(t, "")
	st := tk.waitFinal(t)
	if st.Status != wire.StatusCompleted || st.SessionID != "tool-own-id" {
		t.Fatalf("final status %+v; want completed with the tool's own session", st)
	}
	// A leftover process rewrites status.json with another id.
	st.SessionID = "forged-later"
	data, _ := json.Marshal(st)
	if err := os.WriteFile(tk.path(taskfiles.FileStatus), data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := runWrapper(t, "", "status", "--root", tk.root)
	var ns wire.NodeStatus
	if code != 0 || json.Unmarshal(out, &ns) != nil || len(ns.Tasks) != 1 || ns.Tasks[0].Status == nil {
		t.Fatalf("status: exit %d: %s", code, out)
	}
	if got := ns.Tasks[0].Status.SessionID; got != "tool-own-id" {
		t.Errorf("status reports session %q; want the tool's own, from the private record", got)
	}
	// kill's reply (a preempted attempt's end, which the controller
	// records for the next attempt to resume) takes it from there too.
	out, code = runWrapper(t, "", "kill", "--dir", tk.dir, "--grace", "1s")
	var killed wire.Status
	if code != 0 || json.Unmarshal(out, &killed) != nil {
		t.Fatalf("kill: exit %d: %s", code, out)
	}
	if killed.SessionID != "tool-own-id" {
		t.Errorf("kill replies session %q; want the tool's own, from the private record", killed.SessionID)
	}
}
