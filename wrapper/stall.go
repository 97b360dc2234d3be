package wrapper

import (
	"path/filepath"
	"time"

	"github.com/dispatch-tool/dispatch/wrapper/agentlog"
	"github.com/dispatch-tool/dispatch/wrapper/attempt"
	"github.com/dispatch-tool/dispatch/wrapper/taskfiles"
)

// A tool that writes nothing for stall_seconds is stalled: an agent CLI
// waiting on a hung connection, a prompt no one answers, a loop that never
// prints. Writing means task.log growing, or the tool's transcript changing
// (for claude, whose stream-json prints a message only once it is whole:
// its transcript file is touched as it goes).

// stallCheckPeriod bounds how often the activity is looked at.
func stallCheckPeriod(stall time.Duration) time.Duration {
	return min(max(stall/5, 50*time.Millisecond), 5*time.Second)
}

// watchStall stops the attempt as stalled when neither task.log nor the
// transcript changed for the launch's stall_seconds.
func (s *supervisor) watchStall(stop <-chan struct{}) {
	stall := seconds(s.launch.StallSeconds)
	if stall <= 0 {
		return
	}
	dir := agentlog.TranscriptDir(s.launch.Transcript, s.env, filepath.Join(s.dir, taskfiles.DirOutput))
	t := time.NewTicker(stallCheckPeriod(stall))
	defer t.Stop()
	total, changed := s.tlog.Total(), agentlog.NewestChange(dir)
	last := time.Now()
	s.activeAt.Store(last.UnixNano())
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			s.mu.Lock()
			started, gating := s.cur != nil, s.gating
			s.mu.Unlock()
			if !started || gating {
				// Copying the base tree prints nothing and is no stall;
				// a gate has its own timeout.
				last = now
				s.activeAt.Store(now.UnixNano())
				continue
			}
			tl, tc := s.tlog.Total(), agentlog.NewestChange(dir)
			if tl != total || !tc.Equal(changed) {
				total, changed, last = tl, tc, now
				s.activeAt.Store(now.UnixNano())
				continue
			}
			if now.Sub(last) >= stall {
				s.logger.Info("tool wrote nothing", taskfiles.LogKeyReason, attempt.ReasonStall, "for", now.Sub(last).Round(time.Millisecond))
				s.stop(attempt.ReasonStall, seconds(s.launch.GraceSeconds))
				return
			}
		}
	}
}
