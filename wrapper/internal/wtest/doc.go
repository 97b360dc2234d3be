// Package wtest holds what the tests of wrapper and of its packages share:
// waiting for a condition, servers to reach through the sandbox.
//
// Only tests import it.
package wtest
