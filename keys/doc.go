// Package keys owns obmd's secrets and key material: host key, node tokens,
// authorized keys, and the sealing of BMC passwords.
//
// That is the SSH host key, node tokens (generation and hashing),
// authorized-key parsing and fingerprints, and the sealing of BMC passwords
// at rest. Its sub-package sshcert is the policy for OpenSSH user
// certificates as a node credential.
//
// Nothing here logs; callers decide what is safe to print (fingerprints are,
// tokens and key files never are).
package keys
