package kill

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dispatch-tool/dispatch/wire"
	"github.com/dispatch-tool/dispatch/wrapper/errkind"
)

// TestTaskWithoutSupervisor: kill of a task directory no supervisor holds
// (no process record either, so nothing is signalled): a final status is
// reported as it is, a running one ends killed, another node's attempt is
// refused, and a directory with nothing to kill says so.
func TestTaskWithoutSupervisor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, launch, status, node string
		wantStatus, wantKind       string
	}{
		{"running orphan", `{"node":"box1"}`, `{"status":"running","attempt":2}`, "box1", wire.StatusKilled, ""},
		{"final as it is", "", `{"status":"completed","attempt":1}`, "", wire.StatusCompleted, ""},
		{"another node's", `{"node":"box2"}`, `{"status":"running","attempt":1}`, "box1", "", wire.KindOtherNode},
		{"no status", "", "", "", "", wire.KindNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, data := range map[string]string{"launch.json": tc.launch, "status.json": tc.status} {
				if data == "" {
					continue
				}
				if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			st, err := Task(t.Context(), dir, tc.node, time.Second, true)
			if tc.wantKind != "" {
				var ke *errkind.Error
				if !errors.As(err, &ke) || ke.Kind != tc.wantKind {
					t.Fatalf("Task = %+v, %v; want a %s error", st, err, tc.wantKind)
				}
				return
			}
			if err != nil || st == nil || st.Status != tc.wantStatus {
				t.Fatalf("Task = %+v, %v; want status %s", st, err, tc.wantStatus)
			}
		})
	}
}
