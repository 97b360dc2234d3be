package gittest

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"testing"
)

// Object types of a pack entry.
const (
	ObjCommit   = 1
	ObjTree     = 2
	ObjBlob     = 3
	ObjRefDelta = 7
)

// PackObject is an object of a pack built by hand (BuildPack): whole
// (Type 1 to 3) or a delta on the object named by Ref (ObjRefDelta).
type PackObject struct {
	Type     int
	Data     []byte
	Ref      string
	Declared int // the size its header gives, when not len(Data)
}

// Objects are the objects ids of r, whole.
func (r *Repo) Objects(ids ...string) []PackObject {
	r.T.Helper()
	var objs []PackObject
	for _, id := range ids {
		typ := r.Git("cat-file", "-t", id)
		raw, err := r.Run(nil, "cat-file", typ, id)
		if err != nil {
			r.T.Fatalf("cat-file %s: %v", id, err)
		}
		objs = append(objs, PackObject{Type: map[string]int{"commit": ObjCommit, "tree": ObjTree, "blob": ObjBlob}[typ], Data: raw})
	}
	return objs
}

// BuildPack writes a version 2 pack of objs, as a hostile node may.
func BuildPack(t testing.TB, objs []PackObject) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("PACK")
	binary.Write(&b, binary.BigEndian, uint32(2))
	binary.Write(&b, binary.BigEndian, uint32(len(objs)))
	for _, o := range objs {
		size := len(o.Data)
		if o.Declared > 0 {
			size = o.Declared
		}
		c := byte(o.Type<<4) | byte(size&15)
		size >>= 4
		for size > 0 {
			b.WriteByte(c | 0x80)
			c = byte(size & 0x7f)
			size >>= 7
		}
		b.WriteByte(c)
		if o.Type == ObjRefDelta {
			id, err := hex.DecodeString(o.Ref)
			if err != nil {
				t.Fatal(err)
			}
			b.Write(id)
		}
		zw := zlib.NewWriter(&b)
		zw.Write(o.Data)
		zw.Close()
	}
	sum := sha1.Sum(b.Bytes())
	b.Write(sum[:])
	return b.Bytes()
}

// Varint is a delta header's size.
func Varint(n int) []byte {
	var out []byte
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n == 0 {
			return append(out, c)
		}
		out = append(out, c|0x80)
	}
}

// Bomb is a pack bomb: a blob of 64 KiB of zeros and a delta copying it
// copies times (64 KiB each, one byte each), which no tree names.
func Bomb(copies int) []PackObject {
	zeros := make([]byte, 64<<10)
	id := sha1.Sum(append([]byte(fmt.Sprintf("blob %d\x00", len(zeros))), zeros...))
	delta := append(Varint(len(zeros)), Varint(copies*len(zeros))...)
	delta = append(delta, bytes.Repeat([]byte{0x80}, copies)...) // copy from offset 0, size 0x10000
	return []PackObject{{Type: ObjBlob, Data: zeros}, {Type: ObjRefDelta, Data: delta, Ref: hex.EncodeToString(id[:])}}
}
