package store

import (
	"github.com/dispatch-tool/dispatch/internal/yamlval"
	"strings"
	"time"
)

// A patch names the columns of one row to change and their new values: a
// nil field is left as it is. Go 1.26's new(expr) makes them short to
// write: TaskPatch{Warning: new(""), HeartbeatAt: new(now)}. A task's
// status is not in TaskPatch: it moves only through Transition.

// TaskPatch changes columns of a task.
type TaskPatch struct {
	Title, Type, Tool, Model, NodePin *string
	Priority, MaxRetries              *int
	DependsOn, Tags                   *[]string
	Timeout, Stall                    *time.Duration
	SpecFile, SpecHash, BaseDir       *string
	BaseCommit                        *string
	Snapshot                          *[]byte
	RetriesUsed, RateLimitRetries     *int
	LostRetries                       *int
	NotBefore                         *time.Time
	ExitCode                          *int
	ErrorClass, Error, Warning        *string
	StartedAt, CompletedAt            *time.Time
	Heartbeat                         *string
	HeartbeatAt                       *time.Time
	ReusedFrom                        *int
	Sandbox                           *string
	Limits                            *yamlval.Limits
	Network                           *string
}

// RunPatch changes columns of one attempt's run row.
type RunPatch struct {
	Status                              *string
	PID, ExitCode                       *int
	Signal, ErrorClass, Error           *string
	StartedAt, CompletedAt, CollectedAt *time.Time
	LogBytes, TokensIn, TokensOut       *int64
	CostUSD                             *float64
	Dangerous                           *bool
	APIMode, SessionID, Commit          *string
	Inputs                              *string
	Sandbox                             *string
}

// ProjectPatch changes columns of a project.
type ProjectPatch struct {
	State, Phase, Result  *string
	FinalCommit           *string
	Problem               *string
	StartedAt, FinishedAt *time.Time
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

// col adds name = *p when p is set.
func col[T any](c *columns, name string, p *T) {
	if p != nil {
		c.add(name, *p)
	}
}

func (p TaskPatch) columns() *columns {
	c := &columns{}
	col(c, "title", p.Title)
	col(c, "type", p.Type)
	col(c, "tool", p.Tool)
	col(c, "model", p.Model)
	col(c, "node_pin", p.NodePin)
	col(c, "priority", p.Priority)
	col(c, "max_retries", p.MaxRetries)
	col(c, "depends_on", p.DependsOn)
	col(c, "tags", p.Tags)
	col(c, "timeout_seconds", p.Timeout)
	col(c, "stall_seconds", p.Stall)
	col(c, "sandbox", p.Sandbox)
	col(c, "limits", p.Limits)
	col(c, "network", p.Network)
	col(c, "spec_file", p.SpecFile)
	col(c, "spec_hash", p.SpecHash)
	col(c, "base_dir", p.BaseDir)
	col(c, "base_commit", p.BaseCommit)
	col(c, "snapshot", p.Snapshot)
	col(c, "retries_used", p.RetriesUsed)
	col(c, "rate_limit_retries", p.RateLimitRetries)
	col(c, "lost_retries", p.LostRetries)
	col(c, "not_before", p.NotBefore)
	col(c, "exit_code", p.ExitCode)
	col(c, "error_class", p.ErrorClass)
	col(c, "error", p.Error)
	col(c, "warning", p.Warning)
	col(c, "started_at", p.StartedAt)
	col(c, "completed_at", p.CompletedAt)
	col(c, "heartbeat", p.Heartbeat)
	col(c, "heartbeat_at", p.HeartbeatAt)
	col(c, "reused_from", p.ReusedFrom)
	return c
}

func (p RunPatch) columns() *columns {
	c := &columns{}
	col(c, "status", p.Status)
	col(c, "pid", p.PID)
	col(c, "exit_code", p.ExitCode)
	col(c, "signal", p.Signal)
	col(c, "error_class", p.ErrorClass)
	col(c, "error", p.Error)
	col(c, "started_at", p.StartedAt)
	col(c, "completed_at", p.CompletedAt)
	col(c, "collected_at", p.CollectedAt)
	col(c, "log_bytes", p.LogBytes)
	col(c, "tokens_in", p.TokensIn)
	col(c, "tokens_out", p.TokensOut)
	col(c, "cost_usd", p.CostUSD)
	col(c, "dangerous", p.Dangerous)
	col(c, "api_mode", p.APIMode)
	col(c, "session_id", p.SessionID)
	col(c, "result_commit", p.Commit)
	col(c, "inputs", p.Inputs)
	col(c, "sandbox", p.Sandbox)
	return c
}

func (p ProjectPatch) columns() *columns {
	c := &columns{}
	col(c, "state", p.State)
	col(c, "phase", p.Phase)
	col(c, "result", p.Result)
	col(c, "started_at", p.StartedAt)
	col(c, "finished_at", p.FinishedAt)
	col(c, "final_commit", p.FinalCommit)
	col(c, "problem", p.Problem)
	return c
}
