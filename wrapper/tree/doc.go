// Package tree owns the file trees a node receives and sends: a task's base
// tree (CheckBase, CopyTree: regular files, directories and links, never
// followed, stoppable), an archive unpacked into a fresh directory and moved
// into place (Unpack, NewTreeDir, PlaceTree) or packed from one under a size
// cap (Pack), and an attempt's inputs copied from its dependencies'
// outputs, each file checked against its digest (CopyInput).
//
// The subcommands that call these (untar, tar, inputs) and their flags are
// package wrapper's. It imports wire, wrapper/errkind and wrapper/taskfiles.
package tree
