package plan

import "testing"

func TestPhaseWaits(t *testing.T) {
	six := []string{"S01", "S02", "S03", "S04", "S05", "S06"}
	tests := []struct {
		typ     string
		authors []string
		gate    bool
		want    string
	}{
		{"integration", []string{"S01", "S02"}, false, "S01,S02"},
		{"integration", six[:5], false, "S01,S02,S03,S04,S05"},
		{"integration", six, false, "all 6 author tasks"},
		{"verification", six, false, "S99"},
		{"verification", six, true, "S99 (its gate passed)"},
		{"fix", six, false, "V01 (a fail verdict)"},
		{"fix", six, true, "V01 (a fail verdict) or S99's gate failing"},
	}
	for _, tc := range tests {
		if got := phaseWaits(tc.typ, tc.authors, tc.gate); got != tc.want {
			t.Errorf("phaseWaits(%s, %d authors, gate %v) = %q, want %q", tc.typ, len(tc.authors), tc.gate, got, tc.want)
		}
	}
}
