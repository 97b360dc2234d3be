package home

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// tokenBytes is the token's randomness: 256 bits, written as hex.
const tokenBytes = 32

// Token returns the home's HTTP API token, creating it on first use: 64
// hex digits in TokenPath, mode 0600. A token file another user owns, that
// others can read, that is not a regular file (a link planted there) or
// that does not hold a token is refused with what to do; it is never
// followed or rewritten.
func Token(home string) (string, error) { return tokenAt(TokenPath(home)) }

// ReadToken returns the home's read-only HTTP API token, made and checked
// as Token's, in ReadTokenPath: it reads the dashboard and the API and is
// refused every action.
func ReadToken(home string) (string, error) { return tokenAt(ReadTokenPath(home)) }

func tokenAt(p string) (string, error) {
	for range 2 {
		tok, err := readToken(p)
		if !errors.Is(err, fs.ErrNotExist) {
			return tok, err
		}
		b := make([]byte, tokenBytes)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("make the HTTP token: %w", err)
		}
		tok = hex.EncodeToString(b)
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue // made by another process meanwhile: read it
		}
		if err != nil {
			return "", fmt.Errorf("write the HTTP token: %w", err)
		}
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return "", fmt.Errorf("write the HTTP token: %w", err)
		}
		if _, err := f.WriteString(tok + "\n"); err != nil {
			f.Close()
			os.Remove(p)
			return "", fmt.Errorf("write the HTTP token: %w", err)
		}
		if err := f.Close(); err != nil {
			os.Remove(p)
			return "", fmt.Errorf("write the HTTP token: %w", err)
		}
		return tok, nil
	}
	return "", fmt.Errorf("%s appears and disappears: is another program writing it?", p)
}

func readToken(p string) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("read the HTTP token %s: %w (remove it; serve --http makes a new one)", p, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("read the HTTP token %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 || !ownedByMe(fi) {
		return "", fmt.Errorf("the HTTP token %s is not a file private to you (mode %v): remove it; serve --http makes a new one", p, fi.Mode())
	}
	b := make([]byte, 256)
	n, _ := f.Read(b)
	tok := strings.TrimSpace(string(b[:n]))
	if len(tok) != 2*tokenBytes || strings.Trim(tok, "0123456789abcdef") != "" {
		return "", fmt.Errorf("%s does not hold a token: remove it; serve --http makes a new one", p)
	}
	return tok, nil
}

func ownedByMe(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return !ok || int(st.Uid) == os.Getuid()
}
