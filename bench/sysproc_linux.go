package bench

import (
	"fmt"
	"syscall"
)

// FSType names the file system that holds path (ext4, xfs, tmpfs, ...),
// since the durable targets' figures depend on what an fsync costs there.
func FSType(path string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return "unknown"
	}
	switch uint64(st.Type) {
	case 0xEF53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683E:
		return "btrfs"
	case 0x01021994:
		return "tmpfs (in memory: fsync costs nothing)"
	case 0x794C7630:
		return "overlayfs"
	case 0x2FC12FC1:
		return "zfs"
	}
	return fmt.Sprintf("type 0x%x", uint64(st.Type))
}
