package readmodel

import (
	"testing"

	"github.com/dispatch-tool/dispatch/domain"
)

func TestStoppedNext(t *testing.T) {
	tests := []struct {
		name  string
		tasks map[string]domain.Status
		want  string
	}{
		{"nothing canceled", map[string]domain.Status{"S01": domain.Completed, "S02": domain.Pending},
			"dispatch start p resumes"},
		{"all killed by stop --kill", map[string]domain.Status{"S02": domain.Canceled, "S01": domain.Canceled, "S03": domain.Completed},
			"dispatch retry p S01 S02 reruns the canceled"},
		{"killed and waiting", map[string]domain.Status{"S01": domain.Canceled, "S02": domain.Blocked, "S03": domain.Pending},
			"dispatch start p resumes the 2 waiting task(s); dispatch retry p S01 reruns the canceled"},
	}
	for _, tt := range tests {
		if got := StoppedNext("p", tt.tasks); got != tt.want {
			t.Errorf("%s: StoppedNext = %q, want %q", tt.name, got, tt.want)
		}
	}
}
