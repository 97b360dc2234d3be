// Package control is the control socket of a home: the requests the
// commands send to the running controller (Request, Reply, Send), the
// listening end that hands them to the controller's loop (Serve), and the
// checks that only the home's user, or root, talks on either end (the
// socket's owner and mode, and the peer's credentials).
package control
