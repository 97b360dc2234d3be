package service

import (
	"context"
	"log/slog"
	"time"
)

// PruneEvery is how often `dispatch serve` prunes the runs retention lets
// go, and PruneFirst how long after it starts it prunes first.
const (
	PruneEvery = 24 * time.Hour
	PruneFirst = time.Minute
)

// Pruned is what a prune removed from one project.
type Pruned struct {
	Project           string
	Runs, Files, Rows int
	Bytes             int64
	// Problems are what it could not do, for the next prune to finish.
	Problems []string
}

// DailyPrune prunes, for the daemon, beside its control loop and never in
// a tick: the prune reads and writes only ended runs, which the
// controller no longer touches, and its node calls are its own.
type DailyPrune struct {
	// Prune prunes every project (prune.Pruner.All with the home's
	// current nodes.yaml) and says what went.
	Prune func(ctx context.Context) ([]Pruned, error)
	Log   *slog.Logger
	// First and Every are the waits before the first prune and between
	// prunes (PruneFirst and PruneEvery when zero).
	First, Every time.Duration
}

// Run prunes after First, then every Every, until ctx ends. A prune that
// fails is logged; what it left is finished by the next.
func (d *DailyPrune) Run(ctx context.Context) {
	first, every := d.First, d.Every
	if first <= 0 {
		first = PruneFirst
	}
	if every <= 0 {
		every = PruneEvery
	}
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		reps, err := d.Prune(ctx)
		for _, r := range reps {
			for _, msg := range r.Problems {
				d.Log.Warn("prune: "+msg, keyProject, r.Project)
			}
			if r.Runs > 0 {
				d.Log.Info("pruned runs retention lets go", keyProject, r.Project, "runs", r.Runs, "files", r.Files, "bytes", r.Bytes, "rows", r.Rows)
			}
		}
		if err != nil && ctx.Err() == nil {
			d.Log.Error("prune failed; the next one finishes it", "err", err)
		}
		t.Reset(every)
	}
}
