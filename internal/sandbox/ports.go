package sandbox

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Free ports for test clusters are reserved, not just probed. Probing
// (listen on :0, close, start the server later) races twice: another test
// process may probe the same port, and the kernel hands ports of its
// ephemeral range to outgoing client connections, so a port that was free
// at the probe can be some client's source port when the server binds it.
// Reservations therefore come from below the ephemeral range, and each is
// an flock on a file every shardmover process on the machine agrees on; the
// kernel drops the lock when the holder exits, so a crashed test leaks
// nothing.

const lowestFreePort = 10000

var (
	reservedMu sync.Mutex
	reserved   = map[int]*os.File{} // port -> held lock file
)

// ephemeralLow returns the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > lowestFreePort+1000 {
				return v
			}
		}
	}
	return 32768
}

func portLockDir() (string, error) {
	dir := filepath.Join(os.TempDir(), "shardmover-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", fmt.Errorf("create port reservation folder: %w", err)
	}
	// Every user's tests share the reservations: open it to all (umask
	// would not). Failing that, the locks this user can take still work.
	_ = os.Chmod(dir, 0o777)
	return dir, nil
}

// ReservePorts reserves n consecutive free loopback ports below the
// kernel's ephemeral range and returns the first. The ports stay reserved
// for this process until ReleasePorts or exit; other shardmover processes
// never reserve them meanwhile.
func ReservePorts(n int) (int, error) {
	if n < 1 {
		return 0, errors.New("reserve at least one port")
	}
	dir, err := portLockDir()
	if err != nil {
		return 0, err
	}
	hi := ephemeralLow() - n
	for tries := 0; tries < 500; tries++ {
		base := lowestFreePort + rand.IntN(hi-lowestFreePort)
		var held []int
		ok := true
		for p := base; p < base+n; p++ {
			if !reserveOne(dir, p) {
				ok = false
				break
			}
			held = append(held, p)
		}
		if ok {
			return base, nil
		}
		ReleasePorts(held...)
	}
	return 0, fmt.Errorf("no %d consecutive free ports between %d and %d", n, lowestFreePort, hi+n)
}

// ReleasePorts gives back ports from ReservePorts. Unknown ports are ignored.
func ReleasePorts(ports ...int) {
	reservedMu.Lock()
	defer reservedMu.Unlock()
	for _, p := range ports {
		if f, ok := reserved[p]; ok {
			_ = f.Close()
			delete(reserved, p)
		}
	}
}

func reserveOne(dir string, port int) bool {
	reservedMu.Lock()
	defer reservedMu.Unlock()
	if _, ok := reserved[port]; ok {
		return false
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)+".lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return false
	}
	_ = f.Chmod(0o666) // past umask, so other users can lock it too
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return false
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		_ = f.Close()
		return false
	}
	_ = l.Close()
	reserved[port] = f
	return true
}
