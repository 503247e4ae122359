package sshcert

import (
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"

	gossh "golang.org/x/crypto/ssh"

	"github.com/obmd/obmd/keys"
)

const (
	dsaKey  = "ssh-dss AAAAB3NzaC1kc3MAAACBANtEO2KbX23oiGnbY1/Ux+LFKq6JqGqtGEIeUrwi+qgxX1nP6iEEv+vS3wAwvxlFM0ZSBIYvTvSG/lhbJb56iyEvzaP/Lb/BrVKXx4Qkg0fef2+IxSpPxGdrbPSdMd8GDJdquDv6myjpKowwsLGbJhYc3yLvPhvIqCi80XM6vTSJAAAAFQCBdM9qNeoT8hWK6wNRLBHCuw+aMwAAAIEA1sQibW1ghcpErw7g3ihV8LamvveroJk7kNkHvq3AFHXv1lXNh5m0ekOq+ZFCCc2r+ioRdqc2r2k9F/sNHZvIkU12X/n8GQV8ij1I5GGt7rR4KsqRkWhjKvSV+re+HRSCLRCN42nvyLBCdmE4bpa37SXhvflxtcVHxmG5jaEgVMgAAACBALqxFjh88TSSAixYQ4yTkxSCp6KnMSgsMDUI4BcvTUW7tQA3ZmGO3NbMBiQwBCbUO2p9QIAAwP/gYTO0pz/TzQCfEwf9yznsw8KJc+C/rt9wmWXEBlani0hCtc+uA1tvzj8l1nHglzF0JlnV0nckTxbkzKnEElNez3Ui1x/aYZ8V dsa"
	rsa1024 = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQCxhmu1op5kUsNb/kwYc4l7DhjduGkQTHJuMqNKgri+mUWIBKvutz3w0slq7UmGnvL0HK/EG7Y/7QSZB8iB7UyU4X0MBrblKwm31wGXfoSXXbpONBZucTC8gg250myYN5qgvd2mpGIHywpZ456rLvH6T2qfEMG6SoYiXwhAwEnGQQ== r"
	certKey = "ssh-ed25519-cert-v01@openssh.com AAAAIHNzaC1lZDI1NTE5LWNlcnQtdjAxQG9wZW5zc2guY29tAAAAIP8ImgR86FiqZDuJISaV7wIvalKHGXqlPKGjIeffxW5CAAAAILNDi00BfDIs+CJx1hlZojEoJIFVLyiu1mXvfTczU+aqAAAAAAAAAAAAAAABAAAAAXgAAAAFAAAAAWEAAAAAaw6r+wAAAABrDqxzAAAAAAAAAIIAAAAVcGVybWl0LVgxMS1mb3J3YXJkaW5nAAAAAAAAABdwZXJtaXQtYWdlbnQtZm9yd2FyZGluZwAAAAAAAAAWcGVybWl0LXBvcnQtZm9yd2FyZGluZwAAAAAAAAAKcGVybWl0LXB0eQAAAAAAAAAOcGVybWl0LXVzZXItcmMAAAAAAAAAAAAAADMAAAALc3NoLWVkMjU1MTkAAAAgJLxtxx6wQrDxsWPxGsf/JGHdzjP4y7IbssssgerU8OoAAABTAAAAC3NzaC1lZDI1NTE5AAAAQNSe5MnpFIbrSs6quU+bHvjwZXKVOvAtIwRHX9XrLFlwE+0w72Bl4y3ry1a49nYjLRTTX0khOMzEpfLapCHe7gQ= root@vm"
)

func TestParseAuthority(t *testing.T) {
	ed := newSigner(t).PublicKey()
	edLine := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(ed)))
	rk, err := rsa.GenerateKey(rand.Reader, MinRSABits)
	if err != nil {
		t.Fatal(err)
	}
	rpub, err := gossh.NewPublicKey(&rk.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaLine := strings.TrimSpace(string(gossh.MarshalAuthorizedKey(rpub)))
	tests := []struct {
		name, caName, line string
		ok                 bool
	}{
		{"ed25519", "hil", edLine + " hil CA", true},
		{"rsa 2048", "rsa-ca_1.2", rsaLine, true},
		{"rsa 1024", "r", rsa1024, false},
		{"dsa", "d", dsaKey, false},
		{"certificate", "c", certKey, false},
		{"options", "o", "cert-authority " + edLine, false},
		{"two lines", "t", edLine + "\n" + edLine, false},
		{"garbage", "g", "ssh-ed25519 AAAA", false},
		{"empty name", "", edLine, false},
		{"name with colon", "hil:x", edLine, false},
		{"name with space", "hil x", edLine, false},
		{"name not ASCII", "hïl", edLine, false},
		{"name too long", strings.Repeat("a", MaxNameLen+1), edLine, false},
		{"name at the limit", strings.Repeat("a", MaxNameLen), edLine, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := ParseAuthority(tt.caName, tt.line)
			if (err == nil) != tt.ok {
				t.Fatalf("got %v, want ok %v", err, tt.ok)
			}
			if err != nil {
				return
			}
			if a.Name != tt.caName || a.Fingerprint != keys.Fingerprint(a.Key) || !strings.HasPrefix(a.Line, a.Key.Type()+" ") {
				t.Errorf("got %+v, want the name, the key's fingerprint and a normal line", a)
			}
		})
	}
}

func TestValidPrincipal(t *testing.T) {
	for p, ok := range map[string]bool{
		"project-x": true, "node-17": true, "é": true, strings.Repeat("p", MaxPrincipalLen): true,
		"": false, "a,b": false, "a b": false, "a\tb": false, "a\x00": false, "\xff": false,
		"a\u202eb": false, strings.Repeat("p", MaxPrincipalLen+1): false,
	} {
		if err := ValidPrincipal(p); (err == nil) != ok {
			t.Errorf("%q: got %v, want ok %v", p, err, ok)
		}
	}
}
