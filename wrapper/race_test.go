//go:build race

package wrapper

// raceEnabled makes TestMain build the wrapper binary with -race too, so the
// supervisor's goroutines are checked, not only the test's.
const raceEnabled = true
