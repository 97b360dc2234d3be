// Package collect owns what a node sends back of its finished attempts in
// one stream (`wrapper collect`): it reads and checks the controller's
// request (ReadRequest) and writes one tar of each attempt's head (what was
// found: the attempt's directory, whether task.log and output/ are there,
// output/'s files within the quotas), its task.log and its output/ files
// (Write: Open reads each attempt's head, Send sends what the head says,
// task.log up to the size it read, output/ as it listed it); Serve answers such requests one a line on a conversation held
// open (`collect --serve`), each stream in frames. It follows no link: task.log and output/ must be a regular file
// and a directory themselves, and output/ is read through an os.Root. A
// file that changes while it is sent ends that attempt with a collect.err
// entry, never the stream.
//
// It does not decide what is kept: the controller checks every entry
// (controller/collectstream.go). The subcommand's flags are package
// wrapper's. It imports wire, wrapper/errkind and wrapper/taskfiles.
package collect
