package ipmitool

import (
	"fmt"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openPTY returns a pty master that the runtime poller drives and its tty
// in raw mode (set before ipmitool starts, so that no byte we write is ever
// cooked: ipmitool switches to raw mode only after the banner).
func openPTY() (master, tty *os.File, err error) {
	m, t, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	// pty.Open leaves the master in blocking mode, where neither deadlines
	// nor Close interrupt a Read: put a non-blocking duplicate in the poller.
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		t.Close()
		return nil, nil, fmt.Errorf("open pty: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := makeRaw(t); err != nil {
		master.Close()
		t.Close()
		return nil, nil, fmt.Errorf("pty raw mode: %w", err)
	}
	return master, t, nil
}

func makeRaw(t *os.File) error {
	fd := int(t.Fd())
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return err
	}
	tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON | unix.IXOFF | unix.IXANY
	tio.Oflag &^= unix.OPOST
	tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	tio.Cflag &^= unix.CSIZE | unix.PARENB
	tio.Cflag |= unix.CS8
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
	return unix.IoctlSetTermios(fd, unix.TCSETS, tio)
}

// ttyPeer opens master's tty through a descriptor of its own
// (TIOCGPTPEER, Linux 4.13), for unread; the caller closes it.
func ttyPeer(master *os.File) (int, error) {
	rc, err := master.SyscallConn()
	if err != nil {
		return -1, err
	}
	peer := -1
	var ierr error
	err = rc.Control(func(fd uintptr) {
		p, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, unix.TIOCGPTPEER,
			uintptr(unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC))
		if errno != 0 {
			ierr = errno
			return
		}
		peer = int(p)
	})
	if err == nil {
		err = ierr
	}
	return peer, err
}

// unread returns how many bytes written to the pty master the tty (a
// descriptor from ttyPeer) holds that the process reading it (ipmitool)
// has not read yet.
func unread(tty int) (int, error) { return unix.IoctlGetInt(tty, unix.TIOCINQ) }
