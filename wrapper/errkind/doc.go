// Package errkind gives a failed subcommand's error its wire.ErrorReply
// kind (usage, io, not_found, too_large, internal...), so that the layer that
// knows what went wrong says so and only the reply is written at the top.
//
// It imports wire.
package errkind
