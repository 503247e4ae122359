package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// sshdPath is where Debian's openssh-server puts sshd.
const sshdPath = "/usr/sbin/sshd"

// forceCommand is what the alternative users have today runs per
// connection: a ForceCommand wrapper that would call `ipmitool power
// status` and print its answer; here it prints a fixed one, so the
// comparison is the SSH server's own cost (an ipmitool call would add
// ~70 ms and more CPU on top).
const forceCommand = `#!/bin/sh
# ForceCommand wrapper: a real one runs ipmitool -I lanplus ... power status
echo "power on"
`

// sshdServer is OpenSSH's sshd on a loopback port, run as our child with
// its own host key, key authentication for the current user, and the
// ForceCommand script.
type sshdServer struct {
	*child
	Addr   string
	User   string
	Signer gossh.Signer
}

// startSSHD writes a config into dir and runs `sshd -D -e -f CONFIG`, with
// the fixed forceCommand.
func startSSHD(dir string) (*sshdServer, error) { return startSSHDWith(dir, forceCommand) }

// startSSHDWith is startSSHD with script (a shell script) as the ForceCommand.
func startSSHDWith(dir, script string) (*sshdServer, error) {
	if _, err := os.Stat(sshdPath); err != nil {
		return nil, notMeasured("%s missing (apt-get install openssh-server)", sshdPath)
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("current user: %w", err)
	}
	if u.Uid == "0" {
		// sshd refuses to start without its privilege-separation directory;
		// openssh-server's service creates it at boot, a container may not have.
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			return nil, notMeasured("/run/sshd missing and not creatable: %v", err)
		}
	}
	if _, err := writeKey(filepath.Join(dir, "ssh_host_ed25519_key")); err != nil {
		return nil, err
	}
	client, err := writeKey(filepath.Join(dir, "id_ed25519"))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), gossh.MarshalAuthorizedKey(client.PublicKey()), 0o600); err != nil {
		return nil, err
	}
	scriptPath := filepath.Join(dir, "power-status.sh")
	if err := os.WriteFile(scriptPath, []byte(script), 0o700); err != nil {
		return nil, err
	}
	port, err := freeTCPPort()
	if err != nil {
		return nil, err
	}
	conf := strings.Join([]string{
		"ListenAddress 127.0.0.1",
		"Port " + strconv.Itoa(port),
		"HostKey " + filepath.Join(dir, "ssh_host_ed25519_key"),
		"PidFile " + filepath.Join(dir, "sshd.pid"),
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"),
		"ForceCommand " + scriptPath,
		"UsePAM no",
		"PermitRootLogin prohibit-password",
		"PubkeyAuthentication yes",
		"PasswordAuthentication no",
		"KbdInteractiveAuthentication no",
		"StrictModes no",
		"UseDNS no",
		"PrintMotd no",
		"PrintLastLog no",
		"X11Forwarding no",
		"AllowTcpForwarding no",
		"MaxStartups 100:30:200",
		"LogLevel ERROR",
		"",
	}, "\n")
	confPath := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	if out, err := exec.Command(sshdPath, "-t", "-f", confPath).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("sshd -t: %v: %s", err, strings.TrimSpace(string(out)))
	}
	cmd := exec.Command(sshdPath, "-D", "-e", "-f", confPath)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	// sshd prints nothing when ready at LogLevel ERROR: poll the port.
	c, err := startChild(cmd, filepath.Join(dir, "sshd.log"), 0, nil)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, fmt.Errorf("sshd did not listen on %s: %s", addr, tailFile(filepath.Join(dir, "sshd.log")))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &sshdServer{child: c, Addr: addr, User: u.Username, Signer: client}, nil
}

// writeKey writes a new ed25519 private key in OpenSSH format to path.
func writeKey(path string) (gossh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := gossh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	return gossh.NewSignerFromKey(priv)
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
