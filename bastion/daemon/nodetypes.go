package daemon

import (
	"fmt"
	"io"

	"github.com/sirupsen/logrus"

	"github.com/obmd/obmd/bastion/admin/api"
	"github.com/obmd/obmd/bastion/nodes"
	"github.com/obmd/obmd/keys"
	"github.com/obmd/obmd/sol"
	"github.com/obmd/obmd/sol/ipmi"
	"github.com/obmd/obmd/sol/ipmitool"
	"github.com/obmd/obmd/sol/redfish"
	"github.com/obmd/obmd/sol/sim"
	"github.com/obmd/obmd/sol/transport"
)

// Node types, as registered through the admin API.
const (
	TypeIPMI     nodes.Type = "ipmi"     // native RMCP+ (sol/ipmi)
	TypeIPMITool nodes.Type = "ipmitool" // the ipmitool binary (sol/ipmitool)
	TypeMock     nodes.Type = "mock"     // obmd's mock BMC (sol/sim in mock mode)
	TypeSim      nodes.Type = "sim"      // the built-in simulator (sol/sim), for demos
	TypeRedfish  nodes.Type = "redfish"  // Redfish over HTTPS (sol/redfish)
)

// nodeTypes is the one table of node types: what each type's BMC info
// is, how it is checked, compared and shown, and which driver it builds.
// This is the only place that knows the types: the admin API registers
// nodes through it, and the resolver builds drivers through it. A new BMC
// type is a row here and a driver. The drivers take their sections of cfg,
// the IPMI ones (a Redfish node's console too) with the shared options
// opts, whose cipher memory forgets a deleted node. The drivers' settings
// were checked with the configuration (checkDrivers). The ipmi,
// ipmitool and redfish types take the console fields (console, ssh_*):
// their drivers are wrapped by cons (sol/transport), which reaches the
// console over the BMC's SSH service when the node says so.
func nodeTypes(cfg Config, opts sol.IPMIOptions, lab *sim.Lab, sealer *keys.Sealer, cons *consoles) (*nodes.Table, error) {
	cfg.IPMI.Options, cfg.IPMITool.Options = opts, opts
	rf := cfg.Redfish
	rf.IPMI = cfg.IPMI
	simulated := func(mode sim.Mode) nodes.SolSpec {
		return nodes.SolSpec{
			New: func(label string, _ sol.Info, _ logrus.FieldLogger) (sol.BMC, error) {
				return lab.BMC(label, mode), nil
			},
			Forget: lab.Forget,
		}
	}
	forget := func(label string) { opts.Ciphers.Forget(label); cons.forget(label) }
	return nodes.NewTable(sealer,
		nodes.Define(TypeIPMI, nodes.SolKind(TypeIPMI, nodes.SolSpec{Credentials: true, Check: ipmi.Check,
			Console: checkIPMIConsole,
			New: func(label string, info sol.Info, log logrus.FieldLogger) (sol.BMC, error) {
				b, err := ipmi.New(label, info, cfg.IPMI, log)
				return cons.wrap(label, b, err, ipmiTarget(label, info, rf, log))
			}, Forget: forget})),
		// ipmitool takes what the shared rules of sol.Info types let
		// through (FuzzNodeTypesCheckAsDrivers): it needs no Check of its own.
		nodes.Define(TypeIPMITool, nodes.SolKind(TypeIPMITool, nodes.SolSpec{Credentials: true, Interface: true,
			Console: checkIPMIConsole,
			New: func(label string, info sol.Info, log logrus.FieldLogger) (sol.BMC, error) {
				b, err := ipmitool.New(label, info, cfg.IPMITool, log)
				return cons.wrap(label, b, err, ipmiTarget(label, info, rf, log))
			}, Forget: forget})),
		nodes.Define(TypeMock, nodes.SolKind(TypeMock, simulated(sim.ModeMock))),
		nodes.Define(TypeSim, nodes.SolKind(TypeSim, simulated(sim.ModeNormal))),
		nodes.Define(TypeRedfish, nodes.Kind[redfish.Info]{
			Check:     checkRedfish,
			Canonical: canonicalRedfish,
			Equal:     redfish.Info.Equal,
			View:      redfishView,
			New: func(label string, info redfish.Info, log logrus.FieldLogger) (sol.BMC, error) {
				b, err := redfish.New(label, info, rf, log)
				host := ""
				if err == nil {
					host = b.Host()
				}
				return cons.wrap(label, b, err, func() (transport.Target, error) {
					return transport.Target{Host: host, User: info.User, Pass: info.Pass, Info: info.ConsoleInfo}, nil
				})
			},
			Forget: forget,
			BMCs:   redfish.Info.BMCs}),
	)
}

// checkIPMIConsole is an IPMI node's console fields' check: the
// transport's, then the URL of the BMC's Redfish service, if given.
func checkIPMIConsole(ci sol.ConsoleInfo) (sol.ConsoleInfo, error) {
	ci, err := transport.CheckInfo(ci)
	if err == nil && ci.Redfish != "" {
		err = redfish.CheckService(ci.Redfish)
	}
	return ci, err
}

// ipmiTarget is an IPMI node's console target: the SSH service at its
// BMC's address with its user and password by default, and the BMC's
// Redfish service (info.redfish) as what auto asks. It is called when the
// node's driver is built; it does no I/O.
func ipmiTarget(label string, info sol.Info, rf redfish.Config, log logrus.FieldLogger) func() (transport.Target, error) {
	return func() (transport.Target, error) {
		tg := transport.Target{Host: info.Addr, User: info.User, Pass: info.Pass, Info: info.ConsoleInfo}
		if info.Redfish == "" {
			return tg, nil
		}
		d, err := redfish.NewDiscoverer(label, info.Redfish, info.User, info.Pass, info.RedfishInsecure, rf, log)
		if err != nil {
			return tg, err
		}
		tg.Discover = d
		return tg, nil
	}
}

// checkRedfish is a Redfish registration's check: the driver's, then its
// console fields'.
func checkRedfish(i redfish.Info) error {
	if err := redfish.Check(i); err != nil {
		return err
	}
	_, err := transport.CheckInfo(i.ConsoleInfo)
	return err
}

// canonicalRedfish folds a Redfish registration's defaults: the driver's
// (console "sol" is SOL's details), then its console fields'.
func canonicalRedfish(i redfish.Info) redfish.Info {
	i = i.Canonical()
	if ci, err := transport.CheckInfo(i.ConsoleInfo); err == nil {
		i.ConsoleInfo = ci
	}
	return i
}

// checkDrivers has each driver build a sample node from cfg's sections, so
// that a setting it refuses (an unsupported suite in
// ipmi_options.cipher_order) stops the start instead of failing every
// node's calls. The drivers' constructors do no I/O.
func checkDrivers(cfg Config) error {
	ipmiCfg, toolCfg := cfg.IPMI, cfg.IPMITool
	ipmiCfg.Options, toolCfg.Options = cfg.IPMIOptions, cfg.IPMIOptions
	rf := cfg.Redfish
	rf.IPMI = ipmiCfg
	quiet := logrus.New()
	quiet.SetOutput(io.Discard)
	sample := sol.Info{Addr: "bmc.invalid", User: "obmd", Pass: "sample"}
	if _, err := ipmi.New("sample", sample, ipmiCfg, quiet); err != nil {
		return fmt.Errorf("ipmi settings: %w", err)
	}
	if _, err := ipmitool.New("sample", sample, toolCfg, quiet); err != nil {
		return fmt.Errorf("ipmitool settings: %w", err)
	}
	info := redfish.Info{Addr: "https://bmc.invalid", User: "obmd", Pass: "sample", SOL: &redfish.SOLInfo{}}
	if _, err := redfish.New("sample", info, rf, quiet); err != nil {
		return fmt.Errorf("redfish settings: %w", err)
	}
	return nil
}

// redfishView is a Redfish node's info as GET /v1/nodes shows it: never
// the password.
func redfishView(i redfish.Info) api.BMC {
	v := nodes.ConsoleView(i.ConsoleInfo)
	v.Addr, v.User, v.System, v.Insecure = i.Addr, i.User, i.System, i.Insecure
	if i.SOL != nil {
		v.SOL = &api.SOL{Port: i.SOL.Port, Cipher: i.SOL.Cipher}
	}
	return v
}
