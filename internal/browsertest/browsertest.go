// Package browsertest starts Debian's chromium headless for the tests of the
// dashboard (chromedp), and records what a page must never do: throw,
// log an error (a refused Content-Security-Policy is one) or open a dialog.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// Browser is one headless chromium with one tab.
type Browser struct {
	// Ctx is the tab's context, for chromedp.Run and chromedp.Do.
	Ctx context.Context

	// mu guards problems.
	mu       sync.Mutex
	problems []string
}

// Chromium returns the path of chromium. When it is missing the test skips
// with a line that says how to install it, or fails when CI=true.
func Chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found, so the dashboard's browser tests cannot run: install it (Debian/Ubuntu: sudo apt-get install chromium)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true)")
	}
	t.Skip(msg)
	return ""
}

// Start starts chromium headless with a 1280x900 window; it ends with the test.
func Start(t *testing.T) *Browser {
	t.Helper()
	path := Chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.UserDataDir(t.TempDir()),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses to run as root with its sandbox
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelTab(); cancelAlloc(); cancel() })
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("start chromium %s: %v", path, err)
	}
	b := &Browser{Ctx: tab}
	messages := chromedp.Console(tab)
	dialogs := chromedp.Events(tab, page.JavascriptDialogOpening)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException {
				b.problem(fmt.Sprintf("console %s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line))
			}
		}
	}()
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			b.problem(fmt.Sprintf("a %s dialog opened: %q", ev.Type, ev.Message))
			_, _ = chromedp.Call(tab, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	}()
	return b
}

func (b *Browser) problem(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, s)
}

// Problems returns the exceptions, console errors and dialogs seen so far.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// Navigate loads url in the tab.
func (b *Browser) Navigate(t *testing.T, url string) {
	t.Helper()
	if err := chromedp.Do(b.Ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("navigate to %s: %v", url, err)
	}
}

// Eval evaluates a JavaScript expression in the page.
func Eval[T any](t *testing.T, b *Browser, js string) T {
	t.Helper()
	v, err := chromedp.Run(b.Ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// WaitFor polls the JavaScript expression cond until it is true; after
// timeout the test fails with what the page shows and its problems.
func (b *Browser) WaitFor(t *testing.T, timeout time.Duration, what, cond string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := chromedp.Run(b.Ctx, chromedp.Evaluate[bool]("!!("+cond+")"))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			text, _ := chromedp.Run(b.Ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
			t.Fatalf("timed out after %s waiting for %s (%s; last error %v)\npage:\n%s\nproblems: %s",
				timeout, what, cond, err, text, strings.Join(b.Problems(), "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// NoProblems fails the test if the page threw, logged an error or opened a
// dialog.
func (b *Browser) NoProblems(t *testing.T) {
	t.Helper()
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page had problems:\n%s", strings.Join(p, "\n"))
	}
}

// Screenshot returns a PNG of the window.
func (b *Browser) Screenshot(t *testing.T) []byte {
	t.Helper()
	png, err := chromedp.Run(b.Ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	return png
}
