// Package prune applies retention (issue 23): it decides which ended runs
// of a project go (Decide, pure), records the intent, deletes the
// git-native branches only they used (DecideBranches, pure), removes their
// attempt directories on the nodes, their archive under runs/ and their
// rows, then clears the intent. A prune killed midway is finished by the
// next one; nothing a kept run refers to is removed.
package prune
