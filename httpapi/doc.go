// Package httpapi is the HTTP side of `dispatch serve --http`: a JSON API
// under /api/v1 (the CLI's JSON views, from the same readmodel code, plus
// the views the dashboard needs; the operator's actions as POST, handed to
// the controller as the CLI's are, behind a CSRF defence), a
// Server-Sent-Events stream of the event log, a task's live log, and the
// dashboard at /. Every request carries the home's token (home.Token, or
// the read-only home.ReadToken): as a bearer token, or in the HttpOnly
// cookie that /?token= sets. docs/API.md is its reference.
package httpapi
