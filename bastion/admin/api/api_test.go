package api

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestNodeJSON: a node's BMC fields join the node's in one object, and
// decode back into BMC.
func TestNodeJSON(t *testing.T) {
	cipher, keys := 3, 2
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		node Node
		want string
	}{
		{"ipmi", Node{Label: "n1", Type: "ipmi", CreatedAt: at, UpdatedAt: at, Keys: &keys,
			BMC: BMC{Addr: "10.0.0.5", Port: 623, User: "root", Cipher: &cipher}},
			`{"label":"n1","type":"ipmi","created_at":"2030-01-02T03:04:05Z","updated_at":"2030-01-02T03:04:05Z","keys":2,` +
				`"addr":"10.0.0.5","port":623,"user":"root","cipher":3}`},
		{"redfish console", Node{Label: "r1", Type: "redfish", CreatedAt: at, UpdatedAt: at,
			BMC: BMC{Addr: "https://bmc", User: "u", SOL: &SOL{}}},
			`{"label":"r1","type":"redfish","created_at":"2030-01-02T03:04:05Z","updated_at":"2030-01-02T03:04:05Z",` +
				`"addr":"https://bmc","user":"u","sol":{}}`},
		{"no info", Node{Label: "x", Type: "sim", CreatedAt: at, UpdatedAt: at, InfoError: "sealed"},
			`{"label":"x","type":"sim","created_at":"2030-01-02T03:04:05Z","updated_at":"2030-01-02T03:04:05Z","info_error":"sealed"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := json.Marshal(tt.node)
			if err != nil || string(got) != tt.want {
				t.Fatalf("marshal: got %s (%v), want %s", got, err, tt.want)
			}
			var back Node
			if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, tt.node) {
				t.Errorf("unmarshal: got %+v (%v), want %+v", back, err, tt.node)
			}
		})
	}
}
