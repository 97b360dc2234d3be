package domain

// Status is a task's status (tasks.status) or an attempt's (attempts.status).
type Status string

// Task statuses. See Legal for the transitions between them.
const (
	Pending   Status = "pending"
	Claimed   Status = "claimed"
	Running   Status = "running"
	Completed Status = "completed"
	Failed    Status = "failed"
	Blocked   Status = "blocked"
	Canceled  Status = "canceled"
	Lost      Status = "lost"
)

// Killed is the status of an attempt killed by the operator
// (attempts.status; the wrapper writes it too).
const Killed Status = "killed"

// Statuses lists every task status in display order.
var Statuses = []Status{Pending, Claimed, Running, Completed, Failed, Blocked, Canceled, Lost}

// legal is the task state machine: legal[from] holds the statuses a task may
// move to. A retry goes failed → pending; a dispatch retry of a finished task
// goes completed/canceled → pending; a completed task whose outputs cannot be
// collected (over quota, transfer failing) goes completed → failed; a
// running attempt a more urgent task preempts goes running → pending.
var legal = map[Status][]Status{
	Pending:   {Claimed, Blocked, Canceled},
	Claimed:   {Running, Completed, Failed, Pending, Lost, Canceled},
	Running:   {Completed, Failed, Lost, Canceled, Pending},
	Completed: {Pending, Failed},
	Failed:    {Pending, Blocked},
	Blocked:   {Pending, Canceled},
	Canceled:  {Pending},
	Lost:      {Pending, Failed, Canceled},
}

// Legal reports whether a task may move from one status to another.
func Legal(from, to Status) bool {
	for _, s := range legal[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Terminal reports whether a status ends a task's life unless an operator
// retries it.
func Terminal(status Status) bool {
	return status == Completed || status == Failed || status == Blocked || status == Canceled
}
