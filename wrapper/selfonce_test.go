package wrapper

import (
	"errors"
	"syscall"
	"testing"
)

// TestSelfKeepsOnlyASuccess: the supervisor reads its own start time once
// a process; a read that failed (EMFILE, a `ps` that could not fork) must
// not fail every later attempt of the batch: the next call reads again,
// and once one succeeded nothing is read any more.
func TestSelfKeepsOnlyASuccess(t *testing.T) {
	t.Parallel()
	calls := 0
	results := []error{syscall.EMFILE, nil, errors.New("not called")}
	o := keepSuccess(func() (selfID, error) {
		err := results[calls]
		calls++
		return selfID{pid: 7, start: "s"}, err
	})
	if _, err := o.get(); !errors.Is(err, syscall.EMFILE) {
		t.Fatalf("first read: err %v, want EMFILE", err)
	}
	for i := range 2 {
		id, err := o.get()
		if err != nil || id.pid != 7 || id.start != "s" {
			t.Fatalf("call %d after a failed read = %+v, %v; want the value read again", i+2, id, err)
		}
	}
	if calls != 2 {
		t.Fatalf("%d reads, want 2 (the failed one, then one success kept)", calls)
	}
}
