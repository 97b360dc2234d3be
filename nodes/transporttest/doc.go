// Package transporttest is the shared test suite of the nodes.Transport seam. Every
// implementation (the local one, the SSH one) runs the same Run from its tests, so
// the contract written on nodes.Transport is checked the same way everywhere.
package transporttest
