package redfish

import (
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"
)

// CheckService checks addr as an IPMI node's info.redfish, the URL of its
// BMC's Redfish service ("https://host[:port]"); errors name that field.
func CheckService(addr string) error {
	_, _, err := parseAddr("redfish", addr)
	return err
}

// NewDiscoverer returns the Redfish service of IPMI node label at addr
// (which CheckService accepts), logged in with user and pass, for what its
// console "auto" asks: ConsoleServices. It does no I/O.
func NewDiscoverer(label, addr, user, pass string, insecure bool, cfg Config, log logrus.FieldLogger) (*BMC, error) {
	if err := CheckService(addr); err != nil {
		return nil, err
	}
	b, err := New(label, Info{Addr: addr, User: user, Pass: pass, Insecure: insecure}, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("info.redfish: %w", err)
	}
	return b, nil
}

// errServiceField refuses info.redfish on a Redfish node, whose service
// is its own info.addr.
var errServiceField = errors.New("info.redfish applies only to ipmi and ipmitool nodes: a redfish node's Redfish service is its info.addr")
