// Package agentlogtest holds what the agent CLIs print, recorded and
// shortened but with their real shapes, for the tests of agentlog and of the
// supervisor that reads them.
//
// Only tests import it.
package agentlogtest
