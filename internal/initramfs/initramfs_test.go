package initramfs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// busybox's cpio, the one the VM's initramfs is checked against, reads the
// archive back: names, modes and contents survive.
func TestBusyboxCpioUnpacksTheArchive(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("no /bin/busybox (hack/apt.sh installs busybox-static)")
	}
	var a Archive
	a.Dir("bin")
	a.File("bin/tool", 0o755, []byte("#!/bin/sh\necho hi\n"))
	a.File("odd", 0o600, []byte("abc")) // a length that needs padding
	dir := t.TempDir()
	cmd := exec.Command("/bin/busybox", "cpio", "-i", "-d")
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(a.Bytes())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)

	st, err := os.Stat(filepath.Join(dir, "bin", "tool"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), st.Mode().Perm())
	raw, err := os.ReadFile(filepath.Join(dir, "bin", "tool"))
	require.NoError(t, err)
	require.Equal(t, "#!/bin/sh\necho hi\n", string(raw))
	raw, err = os.ReadFile(filepath.Join(dir, "odd"))
	require.NoError(t, err)
	require.Equal(t, "abc", string(raw))
}
