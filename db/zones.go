package db

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MaxZoneLen is the longest zone name.
const MaxZoneLen = 64

// maxZones is the most zones one replica may declare (they are stored
// comma-separated in replicas.zones, at most 2000 bytes).
const maxZones = 30

// ErrBadZone is a zone name ValidZone refuses.
var ErrBadZone = errors.New("a zone is 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")

// ValidZone checks a zone name: "" (none) or 1 to MaxZoneLen bytes of
// lower-case letters, digits, '.', '_' and '-', starting with a letter or a
// digit (ErrBadZone).
func ValidZone(z string) error {
	if z == "" {
		return nil
	}
	if len(z) > MaxZoneLen {
		return fmt.Errorf("zone %.64q...: %w", z, ErrBadZone)
	}
	for i := 0; i < len(z); i++ {
		c := z[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return fmt.Errorf("zone %q: %w", z, ErrBadZone)
		}
	}
	return nil
}

// ValidZones checks the zones a replica declares: each ValidZone and not
// "", at most maxZones, no repeats.
func ValidZones(zones []string) error {
	if len(zones) > maxZones {
		return fmt.Errorf("%d zones, at most %d", len(zones), maxZones)
	}
	seen := map[string]bool{}
	for _, z := range zones {
		if z == "" {
			return fmt.Errorf("an empty zone: %w", ErrBadZone)
		}
		if err := ValidZone(z); err != nil {
			return err
		}
		if seen[z] {
			return fmt.Errorf("zone %q listed twice", z)
		}
		seen[z] = true
	}
	return nil
}

// Reaches reports whether a replica declaring zones reaches a BMC in zone
// z: one that declares none reaches every zone (as before zones, and as a
// replica of an earlier release), and every replica reaches a node without
// a zone.
func Reaches(zones []string, z string) bool {
	return z == "" || len(zones) == 0 || slices.Contains(zones, z)
}

func joinZones(zones []string) string { return strings.Join(zones, ",") }

func splitZones(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
