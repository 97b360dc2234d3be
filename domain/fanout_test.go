package domain

import (
	"slices"
	"testing"
)

func TestCompareIDs(t *testing.T) {
	ids := []string{"S02", "S01.10@b", "S01.10@a", "S01.2", "S01.1", "S01", "S10", "S01.10", "S01@a"}
	slices.SortFunc(ids, CompareIDs)
	want := []string{"S01", "S01@a", "S01.1", "S01.2", "S01.10", "S01.10@a", "S01.10@b", "S02", "S10"}
	if !slices.Equal(ids, want) {
		t.Errorf("sorted = %v, want %v", ids, want)
	}
	for id, spec := range map[string]string{"S01.2@m.x": "S01", "S01@m": "S01", "S01.3": "S01", "S99": "S99"} {
		if got := SpecID(id); got != spec {
			t.Errorf("SpecID(%s) = %s, want %s", id, got, spec)
		}
	}
}
