// Package subcmd holds what every wrapper subcommand uses to read its
// flags and print its reply: every failure comes out as one JSON value,
// so flag sets report errors instead of printing them.
package subcmd
