package domain

import (
	"fmt"
	"strings"
)

// Phase is the phase a project is in (projects.phase).
type Phase string

// Phases of a project.
const (
	PhaseImplementation Phase = "implementation"
	PhaseIntegration    Phase = "integration"
	PhaseVerification   Phase = "verification"
	PhaseFix            Phase = "fix"
	PhaseDone           Phase = "done"
)

// Results of a finished project (projects.result); an unfinished project
// has none.
const (
	ResultPassed = "passed"
	ResultFailed = "failed"
	// ResultStopped is what a report says of a project stopped by the
	// operator before it finished; it is never stored.
	ResultStopped = "stopped"
	// ResultRunning is what a report says of an unfinished project; it is
	// never stored.
	ResultRunning = "running"
)

// IntegrationID is the integration task of every project.
const IntegrationID = "S99"

// IsPhaseID reports whether a task ID belongs to the integration phase: S99,
// V01... (verification) and F01... (fix). Authors may supply their own
// specs for them; the others are generated.
func IsPhaseID(id string) bool {
	return id == IntegrationID || strings.HasPrefix(id, "V") || strings.HasPrefix(id, "F")
}

// VerifyID is the verification task of a round: V01, V02...
func VerifyID(round int) string { return fmt.Sprintf("V%02d", round) }

// FixID is the fix task of a round: F01, F02...
func FixID(round int) string { return fmt.Sprintf("F%02d", round) }

// PhaseOf is the phase a phase task belongs to.
func PhaseOf(id string) Phase {
	switch {
	case id == IntegrationID:
		return PhaseIntegration
	case strings.HasPrefix(id, "V"):
		return PhaseVerification
	}
	return PhaseFix
}
