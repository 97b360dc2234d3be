// Package httpapi is the HTTP side of `dispatch serve --http`: a read-only
// JSON API under /api/v1 (the CLI's JSON views, from the same readmodel
// code, plus the views the dashboard needs), a Server-Sent-Events stream of
// the event log, a task's live log, and the dashboard at /. Every request
// carries the home's token (home.Token): as a bearer token, or in the
// HttpOnly cookie that /?token= sets. docs/API.md is its reference.
package httpapi
