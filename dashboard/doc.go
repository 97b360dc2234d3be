// Package dashboard holds the browser dashboard of `dispatch serve --http`:
// one HTML page, one script and one style sheet, embedded in the binary and
// served as they are (no framework, no CDN, no build step). The page reads
// the JSON API under /api/v1 and its event stream; it never writes.
//
// Everything a task controls (titles, logs, paths, errors, node names) is
// put into the page as text (textContent, createTextNode), never as HTML,
// and the page runs under a strict Content-Security-Policy: no inline
// scripts or styles, no eval.
package dashboard
