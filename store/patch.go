package store

import (
	"reflect"
	"strings"
	"time"

	"github.com/dispatch-tool/dispatch/domain"
	"github.com/dispatch-tool/dispatch/internal/yamlval"
)

// A patch names the columns of one row to change and their new values: a
// nil field is left as it is. Go 1.26's new(expr) makes them short to
// write: TaskPatch{Warning: new(""), HeartbeatAt: new(now)}. A task's
// status is not in TaskPatch: it moves only through Transition.

// TaskPatch changes columns of a task.
type TaskPatch struct {
	Title            *string            `col:"title"`
	Type             *string            `col:"type"`
	Tool             *string            `col:"tool"`
	Model            *string            `col:"model"`
	NodePin          *string            `col:"node_pin"`
	Priority         *int               `col:"priority"`
	MaxRetries       *int               `col:"max_retries"`
	DependsOn        *[]string          `col:"depends_on"`
	Tags             *[]string          `col:"tags"`
	Timeout          *time.Duration     `col:"timeout_seconds"`
	Stall            *time.Duration     `col:"stall_seconds"`
	SpecFile         *string            `col:"spec_file"`
	SpecHash         *string            `col:"spec_hash"`
	BaseDir          *string            `col:"base_dir"`
	BaseCommit       *string            `col:"base_commit"`
	Snapshot         *[]byte            `col:"snapshot"`
	RetriesUsed      *int               `col:"retries_used"`
	RateLimitRetries *int               `col:"rate_limit_retries"`
	LostRetries      *int               `col:"lost_retries"`
	NotBefore        *time.Time         `col:"not_before"`
	ExitCode         *int               `col:"exit_code"`
	ErrorClass       *string            `col:"error_class"`
	Error            *string            `col:"error"`
	Warning          *string            `col:"warning"`
	StartedAt        *time.Time         `col:"started_at"`
	CompletedAt      *time.Time         `col:"completed_at"`
	Heartbeat        *string            `col:"heartbeat"`
	HeartbeatAt      *time.Time         `col:"heartbeat_at"`
	ReusedFrom       *int               `col:"reused_from"`
	Sandbox          *string            `col:"sandbox"`
	Limits           *yamlval.Limits    `col:"limits"`
	Network          *string            `col:"network"`
	Env              *map[string]string `col:"env"`
	Files            *[]string          `col:"files"`
	StartFrom        *string            `col:"start_from"`
	OnConflict       *string            `col:"on_conflict"`
	RetryBackoff     *time.Duration     `col:"retry_backoff_seconds"`

	// Preemptions counts the attempts a more urgent task stopped;
	// NotPreemptible is preemptible: false.
	Preemptions    *int  `col:"preemptions"`
	NotPreemptible *bool `col:"not_preemptible"`
}

// AttemptPatch changes columns of one attempt's row.
type AttemptPatch struct {
	Status      *domain.Status `col:"status"`
	PID         *int           `col:"pid"`
	ExitCode    *int           `col:"exit_code"`
	Signal      *string        `col:"signal"`
	ErrorClass  *string        `col:"error_class"`
	Error       *string        `col:"error"`
	StartedAt   *time.Time     `col:"started_at"`
	CompletedAt *time.Time     `col:"completed_at"`
	CollectedAt *time.Time     `col:"collected_at"`
	LogBytes    *int64         `col:"log_bytes"`
	TokensIn    *int64         `col:"tokens_in"`
	TokensOut   *int64         `col:"tokens_out"`
	CostUSD     *float64       `col:"cost_usd"`
	Dangerous   *bool          `col:"dangerous"`
	APIMode     *string        `col:"api_mode"`
	// Gating is set while the attempt's gate runs (see migration 0022).
	Gating    *bool   `col:"gating"`
	SessionID *string `col:"session_id"`
	Commit    *string `col:"result_commit"`
	Inputs    *string `col:"inputs"`
	Sandbox   *string `col:"sandbox"`
	// Given is EncodeGiven of the dependencies' results the attempt
	// received; FinalMessage the agent's last word (see migration 0027).
	Given        *string `col:"given"`
	FinalMessage *string `col:"final_message"`
	// BaseCommit is the commit a stacked attempt started on (migration 0028).
	BaseCommit *string `col:"base_commit"`
	// SlurmJob is the id of the attempt's Slurm job; Waiting why that job
	// has not started yet, "" once it did (migration 0030).
	SlurmJob *string `col:"slurm_job"`
	Waiting  *string `col:"waiting"`
}

// ProjectPatch changes columns of a project.
type ProjectPatch struct {
	State       *string       `col:"state"`
	Phase       *domain.Phase `col:"phase"`
	Result      *string       `col:"result"`
	StartedAt   *time.Time    `col:"started_at"`
	FinishedAt  *time.Time    `col:"finished_at"`
	FinalCommit *string       `col:"final_commit"`
	Problem     *string       `col:"problem"`
}

// columns collects "col = ?" clauses and their arguments in the order
// they are added.
type columns struct {
	clauses []string
	args    []any
}

func (c *columns) add(name string, v any) {
	c.clauses = append(c.clauses, name+" = ?")
	c.args = append(c.args, sqlValue(v))
}

// expr sets a column to a raw SQL expression such as "attempt + 1".
func (c *columns) expr(name, sql string) {
	c.clauses = append(c.clauses, name+" = "+sql)
}

func (c *columns) sql() string { return strings.Join(c.clauses, ", ") }

func (p TaskPatch) columns() *columns    { return patchColumns(p) }
func (p AttemptPatch) columns() *columns { return patchColumns(p) }
func (p ProjectPatch) columns() *columns { return patchColumns(p) }

// patchColumns adds, for each set field of patch (a struct of pointer
// fields, each tagged with its column: `col:"name"`), name = its value, in
// the order of the fields.
func patchColumns(patch any) *columns {
	c := &columns{}
	v := reflect.ValueOf(patch)
	t := v.Type()
	for i := range t.NumField() {
		name := t.Field(i).Tag.Get("col")
		if name == "" {
			panic("store: field " + t.Name() + "." + t.Field(i).Name + " has no col tag")
		}
		if f := v.Field(i); !f.IsNil() {
			c.add(name, f.Elem().Interface())
		}
	}
	return c
}

// ApplyTo sets the fields of t that p sets, as writing p and reading t
// back would: the controller keeps a task it changed in a tick up to date
// for the later decisions of the same tick.
func (p TaskPatch) ApplyTo(t *domain.Task) {
	pv, tv := reflect.ValueOf(p), reflect.ValueOf(t).Elem()
	for i := range pv.NumField() {
		f := pv.Field(i)
		if f.IsNil() {
			continue
		}
		if dst := tv.FieldByName(pv.Type().Field(i).Name); dst.IsValid() && dst.Type() == f.Type().Elem() {
			dst.Set(f.Elem())
		}
	}
}
