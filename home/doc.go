// Package home is the on-disk layout of a dispatch home: where its
// nodes.yaml, database, specs, collected runs, control socket, pid and log
// files are, and the lock that makes one controller the only writer of it.
// Whatever builds one of these paths asks this package.
package home
