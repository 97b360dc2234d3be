package readmodel

import (
	"fmt"
	"sort"
	"strings"

	"github.com/dispatch-tool/dispatch/domain"
)

// StoppedNext says what takes a stopped project further. `dispatch start`
// resumes its waiting tasks (pending or blocked); a canceled task (by
// `stop --kill` or `cancel`) stays canceled until `dispatch retry` names
// it, so it is never said to be resumed by start. states is each task's
// status by ID (store.States).
func StoppedNext(project string, states map[string]domain.Status) string {
	var canceled []string
	waiting := 0
	for id, st := range states {
		switch st {
		case domain.Canceled:
			canceled = append(canceled, id)
		case domain.Pending, domain.Blocked:
			waiting++
		}
	}
	sort.Strings(canceled)
	retry := fmt.Sprintf("dispatch retry %s %s reruns the canceled", project, strings.Join(canceled, " "))
	switch {
	case len(canceled) > 0 && waiting > 0:
		return fmt.Sprintf("dispatch start %s resumes the %d waiting task(s); %s", project, waiting, retry)
	case len(canceled) > 0:
		return retry
	default:
		return fmt.Sprintf("dispatch start %s resumes", project)
	}
}
