package nodestatus

import (
	"reflect"
	"strings"
	"testing"

	"github.com/dispatch-tool/dispatch/wire"
)

// TestCheckLiveRequest: `status --live` takes "project/ID" names, each
// with the tag the controller holds for it or none; a bad name or a tag
// list of another length is a usage error saying what is wrong.
func TestCheckLiveRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		req       wire.LiveRequest
		wantNamed map[string][]string
		wantHeld  map[string]string
		wantErr   string
	}{
		{"names", wire.LiveRequest{Tasks: []string{"demo/T1", "demo/T2", "other/X"}},
			map[string][]string{"demo": {"T1", "T2"}, "other": {"X"}}, map[string]string{}, ""},
		{"tags", wire.LiveRequest{Tasks: []string{"demo/T1", "demo/T2"}, Tags: []string{"a1", ""}},
			map[string][]string{"demo": {"T1", "T2"}}, map[string]string{"demo/T1": "a1"}, ""},
		{"tags of another length", wire.LiveRequest{Tasks: []string{"demo/T1"}, Tags: []string{"a", "b"}}, nil, nil, "2 tags for 1 tasks"},
		{"no project", wire.LiveRequest{Tasks: []string{"T1"}}, nil, nil, `invalid task name "T1"`},
		{"dot dot", wire.LiveRequest{Tasks: []string{"demo/.."}}, nil, nil, "invalid task name"},
		{"nested", wire.LiveRequest{Tasks: []string{"demo/a/b"}}, nil, nil, "invalid task name"},
		{"empty project", wire.LiveRequest{Tasks: []string{"/T1"}}, nil, nil, "invalid task name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			named, held, err := checkLiveRequest(tc.req)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(named, tc.wantNamed) || !reflect.DeepEqual(held, tc.wantHeld) {
				t.Fatalf("= %v, %v, %v; want %v, %v", named, held, err, tc.wantNamed, tc.wantHeld)
			}
		})
	}
}
