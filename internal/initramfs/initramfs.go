// Package initramfs writes the archive format the Linux kernel unpacks
// into its initial root file system: newc cpio (`cpio -H newc`),
// uncompressed. The VM tests (test/vmtest) and the sandbox's VM node
// (internal/sandbox) boot their guests from one.
package initramfs

import (
	"bytes"
	"fmt"
)

// Archive is an initramfs being written: entries in the order they are
// added, each parent directory before what it holds.
type Archive struct {
	buf bytes.Buffer
	ino int
}

// Dir adds a directory (mode 0755).
func (a *Archive) Dir(name string) { a.entry(name, 0o040755, nil) }

// File adds a regular file with the permission bits perm.
func (a *Archive) File(name string, perm uint32, data []byte) {
	a.entry(name, 0o100000|perm&0o7777, data)
}

// Bytes ends the archive (the TRAILER!!! entry) and returns it. Nothing
// may be added after.
func (a *Archive) Bytes() []byte {
	a.entry("TRAILER!!!", 0, nil)
	return a.buf.Bytes()
}

// entry writes a 110-byte ASCII header, the name and the data, each of the
// two padded to 4 bytes.
func (a *Archive) entry(name string, mode uint32, data []byte) {
	a.ino++
	fmt.Fprintf(&a.buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		a.ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	a.buf.WriteString(name)
	a.buf.WriteByte(0)
	a.pad()
	a.buf.Write(data)
	a.pad()
}

func (a *Archive) pad() {
	for a.buf.Len()%4 != 0 {
		a.buf.WriteByte(0)
	}
}
