package readmodel

import (
	"testing"

	"github.com/dispatch-tool/dispatch/store"
)

func TestStoppedNext(t *testing.T) {
	tests := []struct {
		name  string
		tasks map[string]string
		want  string
	}{
		{"nothing canceled", map[string]string{"S01": store.Completed, "S02": store.Pending},
			"dispatch start p resumes"},
		{"all killed by stop --kill", map[string]string{"S02": store.Canceled, "S01": store.Canceled, "S03": store.Completed},
			"dispatch retry p S01 S02 reruns the canceled"},
		{"killed and waiting", map[string]string{"S01": store.Canceled, "S02": store.Blocked, "S03": store.Pending},
			"dispatch start p resumes the 2 waiting task(s); dispatch retry p S01 reruns the canceled"},
	}
	for _, tt := range tests {
		if got := StoppedNext("p", tt.tasks); got != tt.want {
			t.Errorf("%s: StoppedNext = %q, want %q", tt.name, got, tt.want)
		}
	}
}
