package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkPutNodes: a tick's write of 20 nodes (in one transaction, so
// that the commit is not what is measured).
func BenchmarkPutNodes(b *testing.B) {
	ctx := context.Background()
	s, err := Open(ctx, b.TempDir()+"/d.db")
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var ns []Node
	for i := range 20 {
		ns = append(ns, Node{Name: fmt.Sprintf("m%d", i+1), State: NodeOnline, LastSeen: time.Now(), OS: "linux", Arch: "amd64",
			WrapperVersion: "0a035b4-46725f95a8", MemAvailableBytes: 1 << 30, Load1: 1.5, DiskFreeBytes: 1 << 40, RTTMillis: 3.5})
	}
	b.ResetTimer()
	err = s.Update(ctx, func(tx *Tx) error {
		for i := 0; i < b.N; i++ {
			for j := range ns {
				ns[j].LastSeen = time.Now()
			}
			if err := tx.PutNodes(ctx, ns); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}
