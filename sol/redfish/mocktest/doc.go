// Package mocktest runs the Redfish driver (sol/redfish) against a real
// Redfish service: metal-operator's bmc/mock/server, which serves DMTF's
// public-rackmount1 mockup and changes a system's PowerState after a reset,
// started in-process on 127.0.0.1 behind a TLS front (httptest) that adds
// what the mock lacks and a real BMC has: Redfish sessions (login, token,
// logout) and a record of the resets and PATCHes it was sent.
//
// It is a module of its own because metal-operator v0.7.0 declares go
// 1.26.3, which would raise the go line of obmd's go.mod (fixed at 1.26.0),
// and because its module graph (Kubernetes, controller-runtime) then stays
// out of obmd's go.sum altogether. It replaces github.com/obmd/obmd with the
// checkout it sits in; `make test` runs it.
package mocktest
